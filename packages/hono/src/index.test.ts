import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Hono } from 'hono'
import { SignJWT } from 'jose'
import { createAttachStorage, type AttachStorage } from 'attach-storage'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { mountAttachStorage } from './index.js'

const SECRET = 'hono-adapter-test-secret-0123'

describe('mountAttachStorage', () => {
  let dir: string
  let storage: AttachStorage
  let app: Hono
  let token: string
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-hono-'))
    storage = await createAttachStorage({
      config: {
        directory: { baseDir: join(dir, 'files'), tmpDir: join(dir, 'tmp') },
        'api-prefix': '/files/api',
        'assets-prefix': '/files/raw',
        domains: { demo: {} },
      },
      jwt: { secret: SECRET },
      logger: { info() {}, warn() {}, error() {} },
    })
    app = new Hono()
    app.get('/health', (c) => c.text('ok'))
    mountAttachStorage(app, storage)
    token = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('5')
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode(SECRET))
  })
  afterAll(async () => {
    await storage.close()
    await rm(dir, { recursive: true, force: true })
  })

  it('mounts both groups under the configured prefixes and leaves other routes alone', async () => {
    expect(await (await app.request('/health')).text()).toBe('ok')
    const cfg = await app.request('/files/api/config', { headers: { authorization: `Bearer ${token}` } })
    expect(await cfg.json()).toEqual({
      cdnUrl: null,
      domains: { demo: { store: 'local', categories: ['default'] }, editor: { store: 'local', categories: ['default'] } },
    })
    expect((await app.request('/api/storage/config')).status).toBe(404)
  })

  it('uploads, saves and serves through the Hono app', async () => {
    const fd = new FormData()
    fd.set('refDomain', 'demo')
    fd.set('file', new Blob(['via hono']), 'h.txt')
    const up = await app.request('/files/api/attach/tmp', { method: 'POST', body: fd, headers: { authorization: `Bearer ${token}` } })
    const name = (await up.json()).files[0].name
    const saved = await app.request('/files/api/attach/demo/1', {
      method: 'POST',
      body: JSON.stringify({ default: [{ savedName: name }] }),
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    })
    const rec = (await saved.json()).attachList[0]
    expect(rec.url).toBe('/files/raw/attach/view/demo/1/default/0')
    const view = await app.request(rec.url)
    expect(await view.text()).toBe('via hono')
    // PUT needs the trailing slash, which Hono routing keeps.
    const put = await app.request('/files/api/attach/', {
      method: 'PUT',
      body: JSON.stringify([{ id: rec.id, ext: 'x' }]),
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
    })
    expect(await put.json()).toEqual({ success: true, count: 1 })
  })

  it('answers JSON 401 and 404 bodies from the mounted groups', async () => {
    const res = await app.request('/files/api/attach/demo/1')
    expect(res.status).toBe(401)
    expect((await res.json()).code).toBe('unauthorized')
    const nf = await app.request('/files/raw/attach/view/424242')
    expect(nf.status).toBe(404)
    expect((await nf.json()).code).toBe('not-found')
  })

  it('answers a method the handlers never serve (WebDAV, ...) with 404 JSON before authentication, like the Node adapters', async () => {
    for (const method of ['PROPFIND', 'SEARCH', 'MKCOL']) {
      for (const path of ['/files/api/config', '/files/raw/attach/view/1']) {
        const res = await app.request(path, { method })
        expect([method, path, res.status, await res.json()]).toEqual([method, path, 404, { code: 'not-found', message: 'No such route' }])
      }
    }
    // The methods it does serve still reach the handlers (authentication first in the JSON group).
    expect((await app.request('/files/api/config', { method: 'DELETE' })).status).toBe(401)
  })
})
