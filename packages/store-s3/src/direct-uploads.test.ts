/**
 * presignPut on s3rver: a plain fetch writes through the address, with exactly the declared length and
 * nothing else; and the whole direct-to-cloud flow of the service with this store as its temporary store.
 */
import { createHmac, randomBytes } from 'node:crypto'
import { Readable } from 'node:stream'
import { HeadObjectCommand } from '@aws-sdk/client-s3'
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { createAttachHandler, createAttachStorage, openDatabase } from 'attach-storage'
import { expectDirectUploads } from 'attach-storage/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { S3Store, type S3StoreOptions } from './index.js'
import { startS3rver, type TestS3Server } from './test-server.js'

let s3: TestS3Server
beforeAll(async () => {
  s3 = await startS3rver('attach-direct')
})
afterAll(async () => {
  await s3?.close()
})

describe('S3Store presignPut on s3rver', () => {
  let store: S3Store
  beforeAll(() => {
    store = new S3Store('s3', { ...s3.settings, prefix: 'p/' } as unknown as S3StoreOptions)
  })
  afterAll(() => store?.close())

  it('signs a PutObject that a plain fetch writes, with the length signed', async () => {
    const bytes = randomBytes(70_000)
    const put = await store.presignPut('up/a b+c.bin', { expiresIn: 60, contentLength: bytes.length })
    expect(put.method).toBe('PUT')
    const url = new URL(put.url)
    expect(`${url.origin}${url.pathname}`).toBe(`${s3.endpoint}/${s3.bucket}/p/up/a%20b%2Bc.bin`)
    expect(url.searchParams.get('X-Amz-SignedHeaders')?.split(';')).toContain('content-length')
    expect(url.searchParams.get('X-Amz-Expires')).toBe('60')
    const res = await fetch(put.url, { method: put.method, headers: put.headers, body: bytes })
    expect(res.status).toBe(200)
    expect((await readFile(s3.objectFile('p/up/a b+c.bin'))).equals(bytes)).toBe(true)
  })

  it('refuses another length, another method and another key', async () => {
    const put = await store.presignPut('up/exact.bin', { expiresIn: 60, contentLength: 10 })
    expect((await fetch(put.url, { method: 'PUT', body: randomBytes(11) })).status).toBe(403)
    expect((await fetch(put.url, { method: 'PUT', body: randomBytes(9) })).status).toBe(403)
    expect(await store.exists('up/exact.bin')).toBe(false)
    await store.put('up/exact.bin', Buffer.from('0123456789'))
    expect((await fetch(put.url)).status).toBe(403)
    expect((await fetch(put.url, { method: 'DELETE' })).status).toBe(403)
    expect((await fetch(put.url.replace('/up/exact.bin', '/up/other.bin'), { method: 'PUT', body: randomBytes(10) })).status).toBe(403)
    expect(await store.exists('up/other.bin')).toBe(false)
  })

  it('signs the content type, a download disposition and create-only: a client may send no other', async () => {
    const put = await store.presignPut('up/typed.txt', { expiresIn: 60, contentLength: 2, contentType: 'text/plain' })
    expect(put.headers).toEqual({ 'content-type': 'text/plain', 'content-disposition': 'attachment', 'if-none-match': '*' })
    expect(new URL(put.url).searchParams.get('X-Amz-SignedHeaders')?.split(';').sort()).toEqual(
      ['content-disposition', 'content-length', 'content-type', 'host', 'if-none-match'].sort(),
    )
    const without = (name: string) => Object.fromEntries(Object.entries(put.headers).filter(([k]) => k !== name))
    expect((await fetch(put.url, { method: 'PUT', headers: { ...put.headers, 'content-type': 'text/html' }, body: 'hi' })).status).toBe(403)
    expect((await fetch(put.url, { method: 'PUT', headers: { ...put.headers, 'content-disposition': 'inline' }, body: 'hi' })).status).toBe(
      403,
    )
    expect((await fetch(put.url, { method: 'PUT', headers: without('content-disposition'), body: 'hi' })).status).toBe(403)
    expect((await fetch(put.url, { method: 'PUT', headers: without('if-none-match'), body: 'hi' })).status).toBe(403)
    expect(await store.exists('up/typed.txt')).toBe(false)
    expect((await fetch(put.url, { method: 'PUT', headers: put.headers, body: 'hi' })).status).toBe(200)
    const head = await store.client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: 'p/up/typed.txt' }))
    expect([head.ContentType, head.ContentDisposition]).toEqual(['text/plain', 'attachment'])
  })

  it('never signs an active type: HTML (or no type) is uploaded as application/octet-stream', async () => {
    for (const contentType of ['text/html', 'image/svg+xml', undefined]) {
      const put = await store.presignPut('up/page.html', { expiresIn: 60, contentLength: 2, ...(contentType ? { contentType } : {}) })
      expect(put.headers['content-type'], contentType).toBe('application/octet-stream')
    }
  })

  it('sends If-None-Match: * with the write, which s3rver 3.7.1 ignores (real S3 answers 412 once an object is at the key)', async () => {
    const put = await store.presignPut('up/once.bin', { expiresIn: 60, contentLength: 4 })
    expect((await fetch(put.url, { method: 'PUT', headers: put.headers, body: 'once' })).status).toBe(200)
    // What s3rver does: it overwrites. The header cannot be dropped (it is signed); S3 itself enforces it.
    const again = await fetch(put.url, { method: 'PUT', headers: put.headers, body: 'evil' })
    expect(again.status).toBe(200)
  })

  it('stores active content as a download of a type no browser runs; other types as given', async () => {
    const head = (key: string) => store.client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: `p/${key}` }))
    for (const type of ['text/html', 'image/svg+xml', 'application/xml', 'text/javascript; charset=utf-8']) {
      await store.put('saved/page', Buffer.from('<html><script>alert(1)</script></html>'), { contentType: type })
      const h = await head('saved/page')
      expect([h.ContentType, h.ContentDisposition], type).toEqual(['application/octet-stream', 'attachment'])
    }
    // Streamed, past one PutObject: the multipart upload takes the same headers.
    await store.put('saved/big', Readable.from([Buffer.alloc(6 * 1024 * 1024, 0x20)]), { contentType: 'text/html' })
    const big = await head('saved/big')
    expect([big.ContentType, big.ContentDisposition]).toEqual(['application/octet-stream', 'attachment'])
    await store.put('saved/photo', Buffer.from('not really a png'), { contentType: 'image/png' })
    const photo = await head('saved/photo')
    expect([photo.ContentType, photo.ContentDisposition]).toEqual(['image/png', undefined])
  })

  it('refuses bad keys, lengths and validities before signing', async () => {
    await expect(store.presignPut('../x', { expiresIn: 60, contentLength: 1 })).rejects.toMatchObject({ code: 'bad-key' })
    await expect(store.presignPut('x', { expiresIn: 0, contentLength: 1 })).rejects.toThrow(/expiresIn must be 1 to 604800 seconds/)
    await expect(store.presignPut('x', { expiresIn: 60, contentLength: -1 })).rejects.toThrow(
      /contentLength must be a non-negative integer/,
    )
  })
})

/** The temporary store on S3 (presigned uploads land there too), or local with S3 as `presign-store` only. */
const LAYOUTS: Array<[string, Record<string, unknown>]> = [
  ['S3 as the temporary store', { defaultStore: 's3', tmpStore: 's3' }],
  ['S3 as presign-store, temporary and saved files on the local disk', { presignStore: 's3' }],
]

for (const [layout, stores] of LAYOUTS) {
  describe(`direct-to-cloud uploads through the service: ${layout}`, () => {
    const SECRET = 'a-test-secret-of-32-characters!!'
    let dir: string
    let db: Awaited<ReturnType<typeof openDatabase>>
    let storage: Awaited<ReturnType<typeof createAttachStorage>>
    let clock = 0
    let inside: S3Store

    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'attach-s3-direct-'))
      db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
      const settings = { ...s3.settings, prefix: `svc-${randomBytes(3).toString('hex')}/` }
      storage = await createAttachStorage({
        config: {
          directory: { baseDir: join(dir, 'files'), tmpDir: join(dir, 'tmp') },
          ...stores,
          stores: { s3: settings },
          upload: { maxFileSize: 256 * 1024 },
          domains: { demo: { categories: { default: {}, image: { filters: ['image'] } } } },
        },
        db,
        jwt: { secret: SECRET },
        logger: { info: () => {}, warn: () => {}, error: () => {} },
        now: () => new Date(Date.now() + clock),
      })
      inside = new S3Store('inside', settings as unknown as S3StoreOptions)
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
        lengthSignedByStore: true,
        // s3rver 3.7.1 ignores If-None-Match on PUT (real S3 refuses with 412): the second write lands, is never committed.
        rewriteRefusedByStore: false,
        expire: async () => {
          clock = 25 * 3600_000
          await storage.sweep()
        },
        keys: async () => {
          const out: string[] = []
          for await (const e of inside.list('')) out.push(e.key)
          const local = await readdir(join(dir, 'tmp'), { recursive: true, withFileTypes: true }).catch(() => [])
          for (const e of local) if (e.isFile()) out.push(relative(join(dir, 'tmp'), join(e.parentPath, e.name)))
          return out
        },
      })
    })
  })
}

function signJwt(sub: string, secret: string): string {
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  const now = Math.floor(Date.now() / 1000)
  const unsigned = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, iat: now, exp: now + 600 })}`
  return `${unsigned}.${createHmac('sha256', secret).update(unsigned).digest('base64url')}`
}
