import { mkdtemp, rm } from 'node:fs/promises'
import { request as httpRequest } from 'node:http'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import Fastify, { type FastifyInstance } from 'fastify'
import { SignJWT } from 'jose'
import { createAttachStorage, type AttachStorage } from 'attach-storage'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import {
  acceptRawBodies,
  attachErrorHandler,
  attachStorage,
  fromWebHandler,
  notFoundHandler,
  refuseOtherMethods,
  webRequest,
} from './index.js'

const SECRET = 'fastify-adapter-test-secret-0123'

describe('attachStorage plugin on a listening Fastify app', () => {
  let dir: string
  let storage: AttachStorage
  let app: FastifyInstance
  let base: string
  let auth: { authorization: string }
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-fastify-'))
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
    app = Fastify()
    // Host routes registered before and after the plugin keep Fastify's own parsers.
    app.post('/host/before', async (request) => ({ body: request.body }))
    await app.register(attachStorage, { storage })
    app.post('/host/after', async (request) => ({ body: request.body }))
    app.addContentTypeParser('application/x-custom', { parseAs: 'string' }, (_r, body, done) => done(null, { custom: body }))
    app.post('/host/custom', async (request) => ({ body: request.body }))
    // A host route of its own on a Web handler, in its own raw-body scope.
    await app.register(async (scope) => {
      acceptRawBodies(scope)
      scope.post('/host/web', async (request, reply) => reply.send(new Response(await webRequest(request, reply).text())))
    })
    base = await app.listen({ port: 0, host: '127.0.0.1' })
    const token = await new SignJWT({})
      .setProtectedHeader({ alg: 'HS256' })
      .setSubject('5')
      .setExpirationTime('1h')
      .sign(new TextEncoder().encode(SECRET))
    auth = { authorization: `Bearer ${token}` }
  })
  afterAll(async () => {
    await app?.close()
    await storage?.close()
    await rm(dir, { recursive: true, force: true })
  })

  const call = (path: string, init: RequestInit = {}) => fetch(base + path, init)
  const json = (path: string, method: string, body: unknown) =>
    call(path, { method, body: JSON.stringify(body), headers: { ...auth, 'content-type': 'application/json' } })

  it('keeps the host routes parsing their bodies with their own parsers', async () => {
    expect(await (await json('/host/before', 'POST', { a: 1 })).json()).toEqual({ body: { a: 1 } })
    expect(await (await json('/host/after', 'POST', { b: 2 })).json()).toEqual({ body: { b: 2 } })
    const bad = await call('/host/after', { method: 'POST', body: '{"x":', headers: { 'content-type': 'application/json' } })
    expect(bad.status).toBe(400)
    const custom = await call('/host/custom', { method: 'POST', body: 'hi', headers: { 'content-type': 'application/x-custom' } })
    expect(await custom.json()).toEqual({ body: { custom: 'hi' } })
    expect(await (await call('/host/web', { method: 'POST', body: 'raw text', headers: { 'content-type': 'text/plain' } })).text()).toBe(
      'raw text',
    )
  })

  it('mounts both groups under the configured prefixes', async () => {
    const cfg = await call('/files/api/config', { headers: auth })
    expect(await cfg.json()).toMatchObject({ cdnUrl: null, domains: { demo: { store: 'local', categories: ['default'] } } })
    expect((await call('/api/storage/config', { headers: auth })).status).toBe(404)
  })

  it('uploads, saves, serves and updates through the Fastify app', async () => {
    const fd = new FormData()
    fd.set('refDomain', 'demo')
    fd.set('file', new Blob(['via fastify']), 'f.txt')
    const up = await call('/files/api/attach/tmp', { method: 'POST', body: fd, headers: auth })
    expect(up.status).toBe(200)
    const name = (await up.json()).files[0].name
    const saved = await json('/files/api/attach/demo/1', 'POST', { default: [{ savedName: name }] })
    const rec = (await saved.json()).attachList[0]
    expect(rec.url).toBe('/files/raw/attach/view/demo/1/default/0')
    const view = await call(rec.url)
    expect(view.headers.get('content-type')).toMatch(/^text\/plain/)
    expect(await view.text()).toBe('via fastify')
    const head = await call(rec.url, { method: 'HEAD' })
    expect(head.status).toBe(200)
    expect(head.headers.get('content-length')).toBe('11')
    const list = await call(`/files/api/attach?refDomain=demo&refKeyList=1`, { headers: auth })
    expect((await list.json()).map((r: { id: number }) => r.id)).toEqual([rec.id])
    expect(await (await json('/files/api/attach/', 'PUT', [{ id: rec.id, ext: 'x' }])).json()).toEqual({ success: true, count: 1 })
  })

  it('streams an upload past Fastify bodyLimit (the upload settings apply, not Fastify parsers)', async () => {
    const size = 3 * 1024 * 1024
    const fd = new FormData()
    fd.set('refDomain', 'demo')
    fd.set('file', new Blob([new Uint8Array(size)]), 'big.bin')
    const up = await call('/files/api/attach/tmp', { method: 'POST', body: fd, headers: auth })
    expect(up.status).toBe(200)
    expect((await up.json()).files[0].size).toBe(size)
  })

  it('answers the handlers own JSON errors, not Fastify parser errors', async () => {
    const res = await call('/files/api/attach/demo/1')
    expect(res.status).toBe(401)
    expect((await res.json()).code).toBe('unauthorized')
    const nf = await call('/files/raw/attach/view/424242')
    expect(nf.status).toBe(404)
    expect((await nf.json()).code).toBe('not-found')
    // Malformed or empty JSON, a body without a content type and an unknown type reach the handler unparsed.
    const cases: Array<[RequestInit, string]> = [
      [{ body: '{"x":', headers: { ...auth, 'content-type': 'application/json' } }, 'The body is not valid JSON'],
      [{ body: '', headers: { ...auth, 'content-type': 'application/json' } }, 'The body is not valid JSON'],
      [{ body: 'x', headers: { ...auth, 'content-type': 'text/plain' } }, 'The body must be application/json'],
      [
        { body: new Uint8Array([1, 2]), headers: { ...auth, 'content-type': 'application/octet-stream' } },
        'The body must be application/json',
      ],
    ]
    for (const [init, message] of cases) {
      const r = await call('/files/api/attach/demo/1', { method: 'POST', ...init })
      expect(r.status, message).toBe(400)
      expect(await r.json()).toMatchObject({ code: 'bad-request', message })
    }
  })

  /** A request with any method (fetch refuses TRACE), read to its end. */
  const raw = (path: string, method: string, headers: Record<string, string> = {}) =>
    new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
      const url = new URL(base + path)
      httpRequest({ host: url.hostname, port: url.port, path, method, headers }, (r) => {
        let body = ''
        r.on('data', (d) => (body += d))
        r.on('end', () => resolve({ status: r.statusCode!, headers: r.headers, body }))
      })
        .on('error', reject)
        .end()
    })

  it('answers TRACE and other methods the handlers never see with 404 JSON, never a 500', async () => {
    for (const method of ['TRACE', 'QUERY']) {
      for (const path of ['/files/api/config', '/files/raw/attach/view/1']) {
        const res = await raw(path, method, auth)
        expect([method, path, res.status, JSON.parse(res.body)]).toEqual([
          method,
          path,
          404,
          { code: 'not-found', message: 'No such route' },
        ])
      }
    }
  })

  it("answers the plugin scope's failures as JSON {code, message} (a host hook's refusal on its routes)", async () => {
    const app = Fastify()
    app.addHook('preHandler', async (request) => {
      if (request.headers['x-refuse']) throw Object.assign(new Error('refused'), { statusCode: Number(request.headers['x-refuse']) })
    })
    await app.register(attachStorage, { storage })
    const at = await app.listen({ port: 0, host: '127.0.0.1' })
    try {
      for (const [status, code] of [
        [415, 'unsupported-media-type'],
        [413, 'too-large'],
        [405, 'method-not-allowed'],
        [500, 'internal-error'],
      ] as const) {
        const res = await fetch(`${at}/files/api/config`, { headers: { ...auth, 'x-refuse': String(status) } })
        expect([res.status, (await res.json()).code]).toEqual([status, code])
      }
    } finally {
      await app.close()
    }
  })

  it("a host's app with attachErrorHandler and notFoundHandler answers Fastify's own refusals as {code, message}", async () => {
    const app = Fastify({ bodyLimit: 1024 })
    app.setErrorHandler(attachErrorHandler({ error() {} }))
    app.setNotFoundHandler(notFoundHandler)
    app.addHook('onRequest', refuseOtherMethods)
    app.post('/json', async (request) => ({ body: request.body }))
    app.get(
      '/web',
      fromWebHandler(async () => new Response('twelve bytes', { headers: { 'content-type': 'text/plain', 'content-length': '12' } })),
    )
    const at = await app.listen({ port: 0, host: '127.0.0.1' })
    try {
      const send = (body: string, type: string) => fetch(`${at}/json`, { method: 'POST', body, headers: { 'content-type': type } })
      const cases: Array<[Promise<Response>, number, string, string]> = [
        [send('{"x":', 'application/json'), 400, 'bad-request', 'The body is not valid JSON'],
        [send(JSON.stringify({ x: 'y'.repeat(4000) }), 'application/json'), 413, 'too-large', 'The request body is too large'],
        [send('x', 'application/x-unknown'), 415, 'unsupported-media-type', 'The content type is not supported'],
        [fetch(`${at}/nowhere`), 404, 'not-found', 'No such route'],
        [fetch(`${at}/json`), 404, 'not-found', 'No such route'],
      ]
      for (const [pending, status, code, message] of cases) {
        const res = await pending
        expect([res.status, await res.json()]).toEqual([status, { code, message }])
      }
      for (const method of ['TRACE', 'SEARCH', 'QUERY']) {
        const res = await new Promise<{ status: number; body: string }>((resolve, reject) => {
          const url = new URL(at)
          httpRequest({ host: url.hostname, port: url.port, path: '/json', method }, (r) => {
            let body = ''
            r.on('data', (d) => (body += d))
            r.on('end', () => resolve({ status: r.statusCode!, body }))
          })
            .on('error', reject)
            .end()
        })
        expect([method, res.status, JSON.parse(res.body).code]).toEqual([method, 404, 'not-found'])
      }
      // HEAD on a GET route served by a Web handler: Fastify's own HEAD route could not measure a Response.
      const head = await fetch(`${at}/web`, { method: 'HEAD' })
      expect([head.status, head.headers.get('content-length'), await head.text()]).toEqual([200, '12', ''])
    } finally {
      await app.close()
    }
  })
})
