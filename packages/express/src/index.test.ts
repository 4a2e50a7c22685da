import { mkdtemp, rm } from 'node:fs/promises'
import { request as httpRequest, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import express from 'express'
import { SignJWT } from 'jose'
import { createAttachStorage, type AttachStorage } from 'attach-storage'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { attachErrorHandler, attachStorageRouter, mountAttachStorage } from './index.js'

const SECRET = 'express-adapter-test-secret-0123'

describe('mountAttachStorage on a listening Express app', () => {
  let dir: string
  let storage: AttachStorage
  let server: Server
  let base: string
  let auth: { authorization: string }
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-express-'))
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
    const app = express()
    // A host's own body parsers, mounted before attach-storage.
    app.use(express.json({ limit: '4kb' }))
    app.use(express.urlencoded({ extended: true }))
    app.get('/health', (_req, res) => void res.send('ok'))
    app.post('/host/echo', (req, res) => void res.json({ body: req.body }))
    mountAttachStorage(app, storage)
    server = app.listen(0, '127.0.0.1')
    await new Promise((r) => server.once('listening', r))
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    const token = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('5')
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode(SECRET))
    auth = { authorization: `Bearer ${token}` }
  })
  afterAll(async () => {
    server?.closeAllConnections()
    await new Promise((r) => server?.close(r))
    await storage?.close()
    await rm(dir, { recursive: true, force: true })
  })

  const call = (path: string, init: RequestInit = {}) => fetch(base + path, init)
  const json = (path: string, method: string, body: unknown) =>
    call(path, { method, body: JSON.stringify(body), headers: { ...auth, 'content-type': 'application/json' } })

  it('mounts both groups under the configured prefixes and leaves the host routes and parsers alone', async () => {
    expect(await (await call('/health')).text()).toBe('ok')
    expect(await (await json('/host/echo', 'POST', { a: 1 })).json()).toEqual({ body: { a: 1 } })
    const cfg = await call('/files/api/config', { headers: auth })
    expect(await cfg.json()).toMatchObject({ cdnUrl: null, domains: { demo: { store: 'local', categories: ['default'] } } })
    expect((await call('/api/storage/config', { headers: auth })).status).toBe(404)
  })

  it('uploads (never read by the host parsers), saves through a parsed JSON body, serves and updates', async () => {
    const fd = new FormData()
    fd.set('refDomain', 'demo')
    fd.set('file', new Blob(['via express']), 'e.txt')
    const up = await call('/files/api/attach/tmp', { method: 'POST', body: fd, headers: auth })
    expect(up.status).toBe(200)
    const name = (await up.json()).files[0].name
    // express.json() has read this body before the handler: it goes on from req.body.
    const saved = await json('/files/api/attach/demo/1', 'POST', { default: [{ savedName: name, displayName: 'é.txt' }] })
    expect(saved.status).toBe(200)
    const rec = (await saved.json()).attachList[0]
    expect(rec).toMatchObject({ url: '/files/raw/attach/view/demo/1/default/0', displayName: 'é.txt' })
    const view = await call(rec.url)
    expect(await view.text()).toBe('via express')
    const head = await call(rec.url, { method: 'HEAD' })
    expect(head.headers.get('content-length')).toBe('11')
    // The query string survives the mount, and PUT keeps its trailing slash.
    const list = await call(`/files/api/attach?refDomain=demo&refKeyList=1`, { headers: auth })
    expect((await list.json()).map((r: { id: number }) => r.id)).toEqual([rec.id])
    expect(await (await json('/files/api/attach/', 'PUT', [{ id: rec.id, ext: 'x' }])).json()).toEqual({ success: true, count: 1 })
  })

  it('answers JSON errors from the mounted groups, also for a body a host parser turned into a form', async () => {
    const res = await call('/files/api/attach/demo/1')
    expect(res.status).toBe(401)
    expect((await res.json()).code).toBe('unauthorized')
    const nf = await call('/files/raw/attach/view/424242')
    expect(nf.status).toBe(404)
    expect((await nf.json()).code).toBe('not-found')
    const form = await call('/files/api/attach/demo/1', { method: 'POST', body: new URLSearchParams({ a: 'b' }), headers: auth })
    expect(form.status).toBe(400)
    expect(await form.json()).toMatchObject({ code: 'bad-request', message: 'The body must be application/json' })
    const bad = await call('/files/api/attach/demo/%zz', { headers: auth })
    expect(bad.status).toBe(400)
  })

  it("answers a host body parser's refusal under the prefixes as JSON {code, message}, not Express's HTML page", async () => {
    const cases: Array<[RequestInit, number, string, string]> = [
      [{ body: '{"x":', headers: { ...auth, 'content-type': 'application/json' } }, 400, 'bad-request', 'The body is not valid JSON'],
      [
        { body: JSON.stringify({ x: 'y'.repeat(8000) }), headers: { ...auth, 'content-type': 'application/json' } },
        413,
        'too-large',
        'The request body is too large',
      ],
      [
        { body: '{}', headers: { ...auth, 'content-type': 'application/json; charset=koi8-r' } },
        415,
        'unsupported-media-type',
        'The content type is not supported',
      ],
    ]
    for (const [init, status, code, message] of cases) {
      const res = await call('/files/api/attach/demo/1', { method: 'POST', ...init })
      expect([res.status, res.headers.get('content-type')]).toEqual([status, 'application/json; charset=utf-8'])
      expect(await res.json()).toEqual({ code, message })
    }
  })

  it('answers a method the handlers never see (TRACE, WebDAV) with 404 JSON, never a 400 or 500', async () => {
    for (const method of ['TRACE', 'PROPFIND', 'SEARCH']) {
      const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
        const port = new URL(base).port
        httpRequest({ host: '127.0.0.1', port, path: '/files/api/config', method, headers: auth }, (r) => {
          let body = ''
          r.on('data', (d) => (body += d))
          r.on('end', () => resolve({ status: r.statusCode!, body }))
        })
          .on('error', reject)
          .end()
      })
      expect([method, res.status, JSON.parse(res.body)]).toEqual([method, 404, { code: 'not-found', message: 'No such route' }])
    }
  })

  it('attachErrorHandler answers Express failures as JSON with stable codes; other errors as a logged 500', async () => {
    const logged: unknown[] = []
    const app = express()
    app.post('/parse', express.json(), (_req, res) => void res.json({ ok: true }))
    app.get('/boom', () => {
      throw new Error('boom')
    })
    app.get('/teapot', () => {
      throw Object.assign(new Error('short and stout'), { status: 418 })
    })
    app.use(attachErrorHandler({ error: (...args: unknown[]) => logged.push(args) }))
    const srv = app.listen(0, '127.0.0.1')
    await new Promise((r) => srv.once('listening', r))
    const at = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`
    try {
      const bad = await fetch(`${at}/parse`, { method: 'POST', body: '{', headers: { 'content-type': 'application/json' } })
      expect([bad.status, await bad.json()]).toEqual([400, { code: 'bad-request', message: 'The body is not valid JSON' }])
      const boom = await fetch(`${at}/boom`)
      expect([boom.status, await boom.json()]).toEqual([500, { code: 'internal-error', message: 'An internal error occurred' }])
      expect(logged).toHaveLength(1)
      const teapot = await fetch(`${at}/teapot`)
      expect([teapot.status, await teapot.json()]).toEqual([418, { code: 'bad-request', message: 'The request is not valid' }])
    } finally {
      srv.closeAllConnections()
      await new Promise((r) => srv.close(r))
    }
  })

  it('attachStorageRouter gives a Router a host can mount itself', async () => {
    const app = express()
    app.use(attachStorageRouter(storage))
    const srv = app.listen(0, '127.0.0.1')
    await new Promise((r) => srv.once('listening', r))
    try {
      const res = await fetch(`http://127.0.0.1:${(srv.address() as AddressInfo).port}/files/api/config`, { headers: auth })
      expect(res.status).toBe(200)
    } finally {
      srv.closeAllConnections()
      await new Promise((r) => srv.close(r))
    }
  })
})
