/**
 * Offload modes: views and downloads whose bytes another server sends once this process has checked
 * access. `x-accel-redirect` runs through a real nginx and `x-sendfile` through a real lighttpd in front
 * of the server; `redirect`'s answer and the start-up refusals are checked at the handler (the S3 and
 * Azure stores' own tests follow the redirect to s3rver and Azurite).
 */
import { createHash } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LocalStore } from '../stores/local-store.js'
import type { PresignGetOptions, Store } from '../stores/store.js'
import { type Kit, makeKit, png, saveFile, token } from '../testing/handler-kit.js'
import { type FrontServer, type NodeUpstream, serveOnNode, startLighttpd, startNginx } from '../testing/front-servers.js'

const ASSETS = '/assets/storage'
const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')

describe('serve: x-accel-redirect, through nginx', () => {
  let kit: Kit
  let server: NodeUpstream
  let nginx: FrontServer
  const bytes = new Uint8Array(300 * 1024).map((_, i) => (i * 7) % 251)
  let id: number
  let privateId: number
  let imageId: number

  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      config: { stores: { local: { type: 'local', serve: 'x-accel-redirect', 'serve-location': '/_attach/local/' } } },
    })
    id = (await saveFile(kit, new Blob([bytes]), '보고서 final.bin', '1')).id
    privateId = (await saveFile(kit, new Blob([bytes]), 'secret.bin', '1', 'private')).id
    imageId = (await saveFile(kit, await png(40, 30), 'photo.png', '2', 'image')).id
    server = await serveOnNode(kit.handler.fetch)
    nginx = await startNginx({
      upstreamPort: server.port,
      prefixes: ['/api/storage', ASSETS],
      internal: { '/_attach/local/': kit.baseDir },
    })
  })
  afterAll(async () => {
    await nginx?.stop()
    await server?.stop()
    await kit?.cleanup()
  })

  it('the server answers headers and X-Accel-Redirect only; nginx sends the bytes', async () => {
    const direct = await kit.call(`${ASSETS}/attach/view/${id}`)
    expect(direct.status).toBe(200)
    expect(direct.headers.get('x-accel-redirect')).toMatch(/^\/_attach\/local\/demo\/\d{4}\/\d{2}\/1\/[0-9a-f-]{36}\.bin$/)
    expect((await direct.arrayBuffer()).byteLength).toBe(0)

    const res = await fetch(`${nginx.url}${ASSETS}/attach/view/${id}`)
    expect(res.status).toBe(200)
    const body = new Uint8Array(await res.arrayBuffer())
    expect(sha(body)).toBe(sha(bytes))
    expect(res.headers.get('content-length')).toBe(String(bytes.length))
    expect(res.headers.get('content-type')).toBe('application/octet-stream')
    expect(res.headers.get('content-disposition')).toMatch(/^inline; /)
    expect(res.headers.get('x-content-type-options')).toBe('nosniff')
    expect(res.headers.get('cache-control')).toBe('public, max-age=31536000, immutable')
    expect(res.headers.get('x-accel-redirect')).toBeNull()
  })

  it('lets nginx keep its connection to the server open across views (an empty body of known length)', async () => {
    const direct = await kit.call(`${ASSETS}/attach/view/${id}`)
    expect(direct.headers.get('content-length')).toBe('0')
    const before = server.connections()
    for (let i = 0; i < 20; i++) {
      const res = await fetch(`${nginx.url}${ASSETS}/attach/view/${id}`)
      expect(sha(new Uint8Array(await res.arrayBuffer()))).toBe(sha(bytes))
    }
    // One at a time, nginx (one worker) reuses the connection its first view opened.
    expect(server.connections() - before).toBeLessThanOrEqual(1)
  })

  it('keeps the download name (RFC 6266, UTF-8) and serves by reference too', async () => {
    const res = await fetch(`${nginx.url}${ASSETS}/attach/download/demo/1/default`)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-disposition')).toBe(
      `attachment; filename="___ final.bin"; filename*=UTF-8''${encodeURIComponent('보고서 final.bin')}`,
    )
    expect(sha(new Uint8Array(await res.arrayBuffer()))).toBe(sha(bytes))
  })

  it('answers Range with 206 and conditional requests with 304, from nginx', async () => {
    const ranged = await fetch(`${nginx.url}${ASSETS}/attach/view/${id}`, { headers: { range: 'bytes=100-199' } })
    expect(ranged.status).toBe(206)
    expect(ranged.headers.get('content-range')).toBe(`bytes 100-199/${bytes.length}`)
    expect(new Uint8Array(await ranged.arrayBuffer())).toEqual(bytes.subarray(100, 200))

    const first = await fetch(`${nginx.url}${ASSETS}/attach/view/${id}`)
    await first.arrayBuffer()
    const etag = first.headers.get('etag')
    expect(etag).toBeTruthy()
    const again = await fetch(`${nginx.url}${ASSETS}/attach/view/${id}`, { headers: { 'if-none-match': etag! } })
    expect(again.status).toBe(304)
    const since = await fetch(`${nginx.url}${ASSETS}/attach/view/${id}`, {
      headers: { 'if-modified-since': first.headers.get('last-modified')! },
    })
    expect(since.status).toBe(304)
  })

  it('refuses a guarded file without access (403 JSON from the server) and serves it with access', async () => {
    const refused = await fetch(`${nginx.url}${ASSETS}/attach/view/${privateId}`)
    expect(refused.status).toBe(403)
    expect(await refused.json()).toMatchObject({ code: 'forbidden', message: expect.any(String) })
    const ok = await fetch(`${nginx.url}${ASSETS}/attach/view/${privateId}`, { headers: { authorization: `Bearer ${await token('7')}` } })
    expect(ok.status).toBe(200)
    expect(ok.headers.get('cache-control')).toBe('private, max-age=31536000, immutable')
    expect(sha(new Uint8Array(await ok.arrayBuffer()))).toBe(sha(bytes))
  })

  it('never serves the internal location from outside, and refuses traversal', async () => {
    const key = (await kit.call(`${ASSETS}/attach/view/${id}`)).headers.get('x-accel-redirect')!
    const outside = await fetch(`${nginx.url}${key}`)
    expect(outside.status).toBe(404)
    await outside.arrayBuffer()
    for (const path of [
      `${ASSETS}/attach/view/demo/..%2F..%2F..%2Fetc/passwd/default`,
      `${ASSETS}/attach/view/demo/1/..%2F..%2Fdefault`,
      `${ASSETS}/attach-direct/view/demo/default?path=/demo/../../etc/passwd`,
    ]) {
      const res = await fetch(`${nginx.url}${path}`)
      expect(res.status, path).toBeGreaterThanOrEqual(400)
      expect(res.status, path).toBeLessThan(500)
      expect(await res.json()).toMatchObject({ code: expect.any(String), message: expect.any(String) })
    }
  })

  it('hands a stored resized variant to nginx too; the request that makes it answers from memory', async () => {
    const made = await fetch(`${nginx.url}${ASSETS}/attach/view/${imageId}?w=20`)
    expect(made.status).toBe(200)
    expect(made.headers.get('content-type')).toBe('image/png')
    const first = new Uint8Array(await made.arrayBuffer())
    // Answered from its bytes while the write went on; once written, nginx sends it.
    await kit.storage.resizer.settled()
    const header = await kit.call(`${ASSETS}/attach/view/${imageId}?w=20`)
    expect(header.headers.get('x-accel-redirect')).toMatch(new RegExp(`/_v/${imageId}/20x0$`))
    const stored = await fetch(`${nginx.url}${ASSETS}/attach/view/${imageId}?w=20`)
    expect(new Uint8Array(await stored.arrayBuffer())).toEqual(first)
  })
})

/** A local store that also signs addresses, as an object store does (beside the real S3 and Azure tests). */
class SigningLocalStore extends LocalStore {
  readonly signed: Array<{ key: string; options: PresignGetOptions }> = []
  async presignGet(key: string, options: PresignGetOptions): Promise<string> {
    this.signed.push({ key, options })
    return `https://bucket.example/${key}?expires=${options.expiresIn}`
  }
}

describe('serve: redirect and x-sendfile at the handler', () => {
  it('redirect: a 302 to the store address with the type and download name signed in; guarded categories stream unless allowed', async () => {
    let store: SigningLocalStore | undefined
    const dir = await mkdtemp(join(tmpdir(), 'attach-signing-'))
    const kit = await makeKit('sqlite', {
      storeFactories: {
        signing: (name) => {
          store = new SigningLocalStore(name, { baseDir: dir })
          return store
        },
      },
      config: { defaultStore: 'signed', stores: { signed: { type: 'signing', serve: 'redirect', 'redirect-ttl': '90s' } } },
      registrar: (registry) => {
        registry.registerCategory('demo', 'shared', { secureAccess: () => true, allowRedirect: true })
      },
    })
    try {
      const { id } = await saveFile(kit, new Blob(['hello']), 'a b.txt', '1')
      const res = await kit.call(`${ASSETS}/attach/download/${id}`)
      expect(res.status).toBe(302)
      expect(res.headers.get('location')).toMatch(/^https:\/\/bucket\.example\/demo\/.*\?expires=90$/)
      expect(res.headers.get('cache-control')).toBe('private, no-store')
      expect(store!.signed.at(-1)!.options).toEqual({
        expiresIn: 90,
        contentType: 'text/plain',
        contentDisposition: `attachment; filename="a b.txt"; filename*=UTF-8''a%20b.txt`,
      })
      // A client that has the bytes already gets 304, and no address is signed for it.
      const signedBefore = store!.signed.length
      const unchanged = await kit.call(`${ASSETS}/attach/download/${id}`, {
        headers: { 'if-none-match': `"${sha(new TextEncoder().encode('hello'))}"` },
      })
      expect(unchanged.status).toBe(304)
      expect(store!.signed.length).toBe(signedBefore)

      // A guarded category streams through the process...
      const secret = await saveFile(kit, new Blob(['secret']), 's.txt', '1', 'private')
      const guarded = await kit.call(`${ASSETS}/attach/view/${secret.id}`, { headers: { authorization: `Bearer ${await token('7')}` } })
      expect(guarded.status).toBe(200)
      expect(await guarded.text()).toBe('secret')
      // ...unless the category allows presigned addresses.
      const shared = await saveFile(kit, new Blob(['shared']), 'x.txt', '1', 'shared')
      const allowed = await kit.call(`${ASSETS}/attach/view/${shared.id}`)
      expect(allowed.status).toBe(302)
      expect(store!.signed.at(-1)!.options.contentDisposition).toMatch(/^inline; /)
    } finally {
      await kit.cleanup()
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('x-sendfile: the absolute path of the file, inside the store, and no body', async () => {
    const kit = await makeKit('sqlite', { config: { stores: { local: { type: 'local', serve: 'x-sendfile' } } } })
    try {
      const { id } = await saveFile(kit, new Blob(['hello']), 'a.txt', '1')
      const res = await kit.call(`${ASSETS}/attach/view/${id}`)
      expect(res.status).toBe(200)
      expect(res.headers.get('x-sendfile')!.startsWith(`${kit.baseDir}/demo/`)).toBe(true)
      expect(res.headers.get('content-type')).toBe('text/plain')
      expect(res.headers.get('content-disposition')).toMatch(/^inline; /)
      expect(await res.text()).toBe('')
    } finally {
      await kit.cleanup()
    }
  })

  it('refuses at start a serve mode the store cannot do, naming the setting', async () => {
    const refused = async (store: Record<string, unknown>, message: RegExp, factories?: Record<string, (name: string) => Store>) => {
      await expect(makeKit('sqlite', { storeFactories: factories, config: { stores: { local: store } } })).rejects.toMatchObject({
        code: 'config-invalid',
        message: expect.stringMatching(message),
      })
    }
    await refused({ type: 'local', serve: 'x-accel-redirect' }, /attach\.stores\.local\.serve-location is required/)
    await refused({ type: 'local', serve: 'x-accel-redirect', 'serve-location': 'relative/' }, /serve-location|serveLocation/)
    await refused({ type: 'local', serve: 'redirect' }, /serve: redirect needs a store that signs addresses/)
    await refused({ type: 'local', serve: 'sometimes' }, /must be one of stream, x-accel-redirect, x-sendfile, redirect/)
    // A store with no file system behind it (the real remote stores are tested in their packages).
    const remote = (name: string): Store => {
      const none = () => Promise.reject(new Error('not used'))
      const list = () => ({ [Symbol.asyncIterator]: () => ({ next: none }) })
      return {
        name,
        type: 'remote',
        put: none,
        get: none,
        stat: none,
        exists: none,
        move: none,
        copy: none,
        delete: none,
        list,
        close: async () => {},
      }
    }
    await refused({ type: 'remote', serve: 'x-sendfile' }, /x-sendfile needs a store on the local file system/, { remote })
  })
})

describe('serve: x-sendfile, through lighttpd', () => {
  let kit: Kit
  let server: NodeUpstream
  let lighttpd: FrontServer
  const bytes = new Uint8Array(200 * 1024).map((_, i) => (i * 13) % 253)
  let id: number
  let privateId: number

  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: { stores: { local: { type: 'local', serve: 'x-sendfile' } } } })
    id = (await saveFile(kit, new Blob([bytes]), 'résumé.bin', '1')).id
    privateId = (await saveFile(kit, new Blob([bytes]), 'secret.bin', '1', 'private')).id
    server = await serveOnNode(kit.handler.fetch)
    lighttpd = await startLighttpd({ upstreamPort: server.port, docroots: [kit.baseDir] })
  })
  afterAll(async () => {
    await lighttpd?.stop()
    await server?.stop()
    await kit?.cleanup()
  })

  it('lighttpd sends the file with the server headers: type, download name, nosniff, cache policy', async () => {
    const res = await fetch(`${lighttpd.url}${ASSETS}/attach/download/${id}`)
    expect(res.status).toBe(200)
    expect(sha(new Uint8Array(await res.arrayBuffer()))).toBe(sha(bytes))
    expect(res.headers.get('content-length')).toBe(String(bytes.length))
    expect(res.headers.get('content-disposition')).toBe(`attachment; filename="resume.bin"; filename*=UTF-8''r%C3%A9sum%C3%A9.bin`)
    expect(res.headers.get('x-content-type-options')).toBe('nosniff')
    expect(res.headers.get('cache-control')).toBe('public, max-age=31536000, immutable')
    expect(res.headers.get('x-sendfile')).toBeNull()
  })

  it('answers Range with 206 and a guarded file without access with 403 JSON', async () => {
    const ranged = await fetch(`${lighttpd.url}${ASSETS}/attach/view/${id}`, { headers: { range: 'bytes=-100' } })
    expect(ranged.status).toBe(206)
    expect(new Uint8Array(await ranged.arrayBuffer())).toEqual(bytes.subarray(bytes.length - 100))
    const refused = await fetch(`${lighttpd.url}${ASSETS}/attach/view/${privateId}`)
    expect(refused.status).toBe(403)
    expect(await refused.json()).toMatchObject({ code: 'forbidden', message: expect.any(String) })
    const ok = await fetch(`${lighttpd.url}${ASSETS}/attach/view/${privateId}`, {
      headers: { authorization: `Bearer ${await token('7')}` },
    })
    expect(ok.status).toBe(200)
    expect(sha(new Uint8Array(await ok.arrayBuffer()))).toBe(sha(bytes))
  })
})
