/**
 * presignPut on Azurite: a plain fetch creates a blob through a create-only SAS and can do nothing else
 * with it (not even write it again); and the whole direct-to-cloud flow of the service with this store
 * as its temporary store.
 */
import { createHmac, randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { BlobServiceClient } from '@azure/storage-blob'
import { createAttachHandler, createAttachStorage, openDatabase } from 'attach-storage'
import { expectDirectUploads, generatedStream } from 'attach-storage/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AzureBlobStore } from './index.js'
import { type Azurite, connectionString, DEV_ACCOUNT, startAzurite } from './test-azurite.js'

let azurite: Azurite
beforeAll(async () => {
  azurite = await startAzurite()
})
afterAll(async () => {
  await azurite?.stop()
})

const readAll = async (s: NodeJS.ReadableStream) => {
  const chunks: Buffer[] = []
  for await (const c of s) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

/** A blob of container `direct`, read with the account key (what a CDN in front of the container would serve). */
const blobClient = (name: string) =>
  BlobServiceClient.fromConnectionString(connectionString(azurite.port)).getContainerClient('direct').getBlobClient(name)

describe('AzureBlobStore presignPut on Azurite', () => {
  let store: AzureBlobStore
  beforeAll(async () => {
    store = new AzureBlobStore('az', {
      connectionString: connectionString(azurite.port),
      container: 'direct',
      prefix: 'p/',
      createContainer: true,
    })
    await store.put('warm-up.txt', Buffer.from('x'))
  })
  afterAll(() => store?.close())

  it('signs a create-only SAS that a plain fetch creates a block blob through, as a download of a safe type', async () => {
    const bytes = randomBytes(70_000)
    const put = await store.presignPut!('up/a b+c.bin', { expiresIn: 60, contentLength: bytes.length })
    expect(put.method).toBe('PUT')
    expect(put.headers).toEqual({
      'x-ms-blob-type': 'BlockBlob',
      'x-ms-blob-content-type': 'application/octet-stream',
      'x-ms-blob-content-disposition': 'attachment',
    })
    const url = new URL(put.url)
    expect(`${url.origin}${url.pathname}`).toBe(`http://127.0.0.1:${azurite.port}/${DEV_ACCOUNT}/direct/p/up/a%20b%2Bc.bin`)
    expect(url.searchParams.get('sp')).toBe('c')
    expect(Date.parse(url.searchParams.get('se')!) - Date.now()).toBeLessThanOrEqual(60_000)
    const res = await fetch(put.url, { method: put.method, headers: put.headers, body: bytes })
    expect(res.status).toBe(201)
    expect((await readAll(await store.get('up/a b+c.bin'))).equals(bytes)).toBe(true)
  })

  it('the SAS neither reads, lists, deletes nor writes another blob', async () => {
    const put = await store.presignPut!('up/only.bin', { expiresIn: 60, contentLength: 3 })
    expect((await fetch(put.url, { method: 'PUT', headers: put.headers, body: 'abc' })).status).toBe(201)
    expect((await fetch(put.url)).status).toBe(403)
    expect((await fetch(put.url, { method: 'DELETE' })).status).toBe(403)
    const other = put.url.replace('/up/only.bin', '/up/other.bin')
    expect((await fetch(other, { method: 'PUT', headers: put.headers, body: 'abc' })).status).toBe(403)
    expect(await store.exists('up/other.bin')).toBe(false)
    expect(await store.exists('up/only.bin')).toBe(true)
  })

  it('writes nothing more once a blob is at the key: the tombstone of a committed upload stops the address (Azurite enforces create-only)', async () => {
    const put = await store.presignPut!('up/once.bin', { expiresIn: 60, contentLength: 4 })
    expect((await fetch(put.url, { method: 'PUT', headers: put.headers, body: 'once' })).status).toBe(201)
    const again = await fetch(put.url, { method: 'PUT', headers: put.headers, body: 'evil' })
    expect(again.status).toBe(403)
    expect(await again.text()).toContain('AuthorizationPermissionMismatch')
    // The commit leaves an empty tombstone in its place (written with the account key), which the address cannot replace.
    await store.put('up/once.bin', new Uint8Array(0), { contentType: 'application/octet-stream' })
    expect((await fetch(put.url, { method: 'PUT', headers: put.headers, body: 'evil' })).status).toBe(403)
    expect((await store.stat('up/once.bin')).size).toBe(0)
  })

  it('cannot bind request headers: a client may send another type (Azure SAS has no signed request headers; the commit never trusts it)', async () => {
    const put = await store.presignPut!('up/typed.html', { expiresIn: 60, contentLength: 4, contentType: 'text/html' })
    expect(put.headers['x-ms-blob-content-type']).toBe('application/octet-stream')
    const res = await fetch(put.url, {
      method: 'PUT',
      headers: { 'x-ms-blob-type': 'BlockBlob', 'x-ms-blob-content-type': 'text/html' },
      body: '<b>',
    })
    expect(res.status).toBe(201)
    expect((await blobClient('p/up/typed.html').getProperties()).contentType).toBe('text/html')
  })

  it('stores active content as a download of a type no browser runs; other types as given', async () => {
    for (const type of ['text/html', 'image/svg+xml', 'application/xml', 'text/javascript; charset=utf-8']) {
      await store.put('saved/page', Buffer.from('<html><script>alert(1)</script></html>'), { contentType: type })
      const props = await blobClient('p/saved/page').getProperties()
      expect([props.contentType, props.contentDisposition], type).toEqual(['application/octet-stream', 'attachment'])
    }
    await store.put('saved/photo', Buffer.from('not really a png'), { contentType: 'image/png' })
    const props = await blobClient('p/saved/photo').getProperties()
    expect([props.contentType, props.contentDisposition]).toEqual(['image/png', undefined])
  })

  it('takes a large body in one Put Blob (the length is checked by whoever commits it)', async () => {
    const big = generatedStream(8 * 1024 * 1024)
    const put = await store.presignPut!('up/big.bin', { expiresIn: 60, contentLength: 10 })
    const body = await readAll(big.stream)
    expect((await fetch(put.url, { method: 'PUT', headers: put.headers, body })).status).toBe(201)
    expect((await store.stat('up/big.bin')).size).toBe(8 * 1024 * 1024)
  })

  it('refuses bad keys and validities before signing', async () => {
    await expect(store.presignPut!('../x', { expiresIn: 60, contentLength: 1 })).rejects.toMatchObject({ code: 'bad-key' })
    await expect(store.presignPut!('x', { expiresIn: 0, contentLength: 1 })).rejects.toThrow(/expiresIn must be 1 to 604800 seconds/)
  })
})

describe('direct-to-cloud uploads through the service on Azure', () => {
  const SECRET = 'a-test-secret-of-32-characters!!'
  let dir: string
  let db: Awaited<ReturnType<typeof openDatabase>>
  let storage: Awaited<ReturnType<typeof createAttachStorage>>
  let clock = 0
  let inside: AzureBlobStore

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-azure-direct-'))
    db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
    const settings = { type: 'azure', connectionString: connectionString(azurite.port), container: 'svc', createContainer: true }
    storage = await createAttachStorage({
      config: {
        directory: { baseDir: join(dir, 'files'), tmpDir: join(dir, 'tmp') },
        defaultStore: 'az',
        tmpStore: 'az',
        stores: { az: settings },
        upload: { maxFileSize: 256 * 1024 },
        domains: { demo: { categories: { default: {}, image: { filters: ['image'] } } } },
      },
      db,
      jwt: { secret: SECRET },
      logger: { info: () => {}, warn: () => {}, error: () => {} },
      now: () => new Date(Date.now() + clock),
    })
    inside = new AzureBlobStore('inside', settings)
  })
  afterAll(async () => {
    await inside?.close()
    await storage?.close()
    await db?.destroy()
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  it('presign, a fetch PUT, then commit; every bad upload fails its entry and leaves nothing', async () => {
    await expectDirectUploads({
      handler: createAttachHandler(storage),
      authorization: `Bearer ${signJwt('7', SECRET)}`,
      otherAuthorization: `Bearer ${signJwt('8', SECRET)}`,
      maxFileSize: 256 * 1024,
      lengthSignedByStore: false,
      rewriteRefusedByStore: true,
      expire: async () => {
        clock = 25 * 3600_000
        await storage.sweep()
      },
      keys: async () => {
        const out: string[] = []
        for await (const e of inside.list('')) out.push(e.key)
        return out
      },
    })
  })
})

function signJwt(sub: string, secret: string): string {
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  const now = Math.floor(Date.now() / 1000)
  const unsigned = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, iat: now, exp: now + 600 })}`
  return `${unsigned}.${createHmac('sha256', secret).update(unsigned).digest('base64url')}`
}
