/**
 * One suite, three reference apps (Hono, Express, Fastify), each through a real listening server: the
 * same flows and the same bad input, answered with identical status codes and JSON bodies.
 */
import { spawn } from 'node:child_process'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { METHODS, createServer, request as httpRequest, type Server } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { Readable } from 'node:stream'
import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import { mountAttachStorage as mountHono } from '@attach-storage/hono'
import express from 'express'
import Fastify from 'fastify'
import { SignJWT } from 'jose'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { mountAttachStorage } from '@attach-storage/express'
import { attachStorage } from '@attach-storage/fastify'
import type { Reference } from '@attach-storage/example-reference'
import { answerClientError, deferContinue } from 'attach-storage/node'
import * as honoApp from '../../hono-app/src/app.js'
import * as expressApp from '../../express-app/src/app.js'
import * as fastifyApp from '../../fastify-app/src/app.js'

const SECRET = 'adapters-test-secret-0123456789'
const ORIGIN = 'https://app.example.com'
const MAX_FILE = 1024 * 1024
const here = dirname(fileURLToPath(import.meta.url))
const quiet = { info() {}, warn() {}, error() {} }

const sign = (sub: string, secret = SECRET) =>
  new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(sub).setExpirationTime('1h').sign(new TextEncoder().encode(secret))

interface Running {
  ref: Reference
  server: Server
  base: string
  port: number
  dataDir: string
  close(): Promise<void>
}

type Env = Record<string, string>
const listening = async (server: Server) => {
  if (!server.listening) await new Promise((r) => server.once('listening', r))
  return (server.address() as AddressInfo).port
}

/** Closes a server and every connection it holds. */
function stopServer(server: Server): Promise<void> {
  return new Promise<void>((r) => {
    server.closeAllConnections()
    server.close(() => r())
  })
}

/** Each app started in-process on port 0, the way its src/server.ts starts it. */
const APPS = {
  async hono(env: Env) {
    const ref = await honoApp.createReferenceApp(env, quiet)
    const server = deferContinue(serve({ fetch: ref.app.fetch, port: 0, hostname: '127.0.0.1' }) as Server)
    server.on('clientError', answerClientError)
    ref.viewsFirst(server)
    return {
      ref,
      server,
      port: await listening(server),
      stop: () => stopServer(server),
    }
  },
  async express(env: Env) {
    const ref = await expressApp.createReferenceApp(env, quiet)
    const server = deferContinue(createServer(ref.app)).on('clientError', answerClientError)
    ref.viewsFirst(server)
    server.listen(0, '127.0.0.1')
    return {
      ref,
      server,
      port: await listening(server),
      stop: () => stopServer(server),
    }
  },
  async fastify(env: Env) {
    const ref = await fastifyApp.createReferenceApp(env, quiet)
    ref.viewsFirst(ref.app.server)
    await ref.app.listen({ port: 0, host: '127.0.0.1' })
    // Fastify's close() only ends the connections idle at that moment: end the kept-alive ones too.
    const stop = async () => {
      const closing = ref.app.close()
      ref.app.server.closeAllConnections()
      await closing
    }
    return { ref, server: ref.app.server, port: (ref.app.server.address() as AddressInfo).port, stop }
  },
} as const
type AppName = keyof typeof APPS
const NAMES = Object.keys(APPS) as AppName[]

async function start(name: AppName, env: Env = {}): Promise<Running> {
  const dataDir = await mkdtemp(join(tmpdir(), `attach-${name}-`))
  const { ref, server, port, stop } = await APPS[name]({ ATTACH_DATA_DIR: dataDir, ATTACH_JWT_SECRET: SECRET, ...env })
  return {
    ref,
    server,
    port,
    base: `http://127.0.0.1:${port}`,
    dataDir,
    async close() {
      await stop()
      await ref.close()
      await rm(dataDir, { recursive: true, force: true })
    },
  }
}

async function files(dir: string): Promise<string[]> {
  try {
    const entries = await readdir(dir, { withFileTypes: true, recursive: true })
    return entries
      .filter((e) => e.isFile())
      .map((e) => join(e.parentPath, e.name))
      .sort()
  } catch {
    return []
  }
}
const wait = (ms: number) => new Promise((r) => setTimeout(r, ms))
async function until(check: () => Promise<boolean>, ms = 10_000): Promise<void> {
  const end = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > end) throw new Error('timed out')
    await wait(25)
  }
}

/** GET with the path sent byte for byte (fetch would resolve `..` segments first). */
const rawGet = (port: number, path: string) =>
  new Promise<{ status: number; body: unknown }>((resolve, reject) => {
    httpRequest({ host: '127.0.0.1', port, path }, (res) => {
      let text = ''
      res.setEncoding('utf8')
      res.on('data', (d) => (text += d))
      res.on('end', () => resolve({ status: res.statusCode!, body: JSON.parse(text) }))
    })
      .on('error', reject)
      .end()
  })

/** Starts a multipart upload on a raw socket, sends half of a file, and leaves. */
async function abandonUpload(port: number, token: string, tmpDir: string): Promise<void> {
  const before = await files(tmpDir)
  const boundary = 'xABANDONx'
  const head =
    `--${boundary}\r\nContent-Disposition: form-data; name="refDomain"\r\n\r\ndemo\r\n` +
    `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="half.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`
  const size = MAX_FILE - 1024
  const socket = await new Promise<Socket>((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => resolve(s))
    s.once('error', reject)
  })
  socket.on('error', () => {})
  socket.write(
    `POST /api/storage/attach/tmp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\n` +
      `content-type: multipart/form-data; boundary=${boundary}\r\ncontent-length: ${Buffer.byteLength(head) + size + 64}\r\n\r\n` +
      head,
  )
  socket.write(Buffer.alloc(size / 2, 1))
  // The file is on its way into tmp/ when the client goes away.
  await until(async () => (await files(tmpDir)).length > before.length)
  socket.destroy()
  await until(async () => (await files(tmpDir)).length === before.length)
  expect(await files(tmpDir)).toEqual(before)
}

/** One answer read off a raw socket. */
interface RawAnswer {
  status: number
  headers: Record<string, string>
  body: string
}

/**
 * A raw keep-alive connection: writes bytes as they are given, parses the answers as they come
 * (Content-Length or chunked bodies; 1xx answers are kept too), and records when the server closed it.
 */
class RawConnection {
  readonly answers: RawAnswer[] = []
  closed = false
  #buffer = Buffer.alloc(0)
  #socket: Socket
  #waiters: Array<() => void> = []
  private constructor(socket: Socket) {
    this.#socket = socket
    socket.on('data', (chunk: Buffer) => {
      this.#buffer = Buffer.concat([this.#buffer, chunk])
      this.#parse()
    })
    socket.on('error', () => {})
    socket.on('close', () => {
      this.closed = true
      this.#wake()
    })
  }
  static open(port: number): Promise<RawConnection> {
    return new Promise((resolve, reject) => {
      const s = connect(port, '127.0.0.1', () => resolve(new RawConnection(s)))
      s.once('error', reject)
    })
  }
  write(data: string | Buffer): void {
    if (!this.#socket.destroyed) this.#socket.write(data)
  }
  destroy(): void {
    this.#socket.destroy()
  }
  #wake() {
    for (const w of this.#waiters.splice(0)) w()
  }
  /** Waits until `check` holds, failing after a generous time. */
  async until(check: () => boolean, what: string, ms = 15_000): Promise<void> {
    const end = Date.now() + ms
    while (!check()) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}; got ${JSON.stringify(this.answers)} closed=${this.closed}`)
      await new Promise<void>((r) => {
        this.#waiters.push(r)
        setTimeout(r, 50)
      })
    }
  }
  #parse() {
    for (;;) {
      const end = this.#buffer.indexOf('\r\n\r\n')
      if (end < 0) return
      const [statusLine, ...lines] = this.#buffer.subarray(0, end).toString('latin1').split('\r\n')
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(statusLine!)?.[1])
      const headers: Record<string, string> = {}
      for (const line of lines) {
        const i = line.indexOf(':')
        headers[line.slice(0, i).trim().toLowerCase()] = line.slice(i + 1).trim()
      }
      let rest = this.#buffer.subarray(end + 4)
      let body = ''
      if (status >= 200 && headers['transfer-encoding'] === 'chunked') {
        const parts: Buffer[] = []
        let at = 0
        for (;;) {
          const eol = rest.indexOf('\r\n', at)
          if (eol < 0) return
          const size = parseInt(rest.subarray(at, eol).toString('latin1'), 16)
          if (rest.length < eol + 2 + size + 2) return
          if (size === 0) {
            at = eol + 4
            break
          }
          parts.push(rest.subarray(eol + 2, eol + 2 + size))
          at = eol + 2 + size + 2
        }
        body = Buffer.concat(parts).toString('utf8')
        rest = rest.subarray(at)
      } else if (status >= 200) {
        const length = Number(headers['content-length'] ?? 0)
        if (rest.length < length) return
        body = rest.subarray(0, length).toString('utf8')
        rest = rest.subarray(length)
      }
      this.answers.push({ status, headers, body })
      this.#buffer = rest
      this.#wake()
    }
  }
}

const final = (c: RawConnection) => c.answers.filter((a) => a.status >= 200)
const codeOf = (a: RawAnswer | undefined) => {
  try {
    return JSON.parse(a?.body ?? '').code as string
  } catch {
    return undefined
  }
}

/**
 * Sends `first` (a request whose answer may come before its body was read), then a second request on
 * the same connection. Either both are answered on it, or the first answer says `Connection: close`
 * and the server closes the connection, after which a new connection is served. Returns which.
 */
async function earlyAnswerThenNext(
  port: number,
  first: Array<string | Buffer>,
  next: string,
): Promise<[number, string | undefined, 'kept' | 'closed']> {
  const conn = await RawConnection.open(port)
  try {
    for (const part of first) conn.write(part)
    await conn.until(() => final(conn).length >= 1, 'the first answer')
    conn.write(next)
    await conn.until(() => final(conn).length >= 2 || conn.closed, 'the second answer or the close')
    const [a, b] = final(conn)
    if (b) {
      expect(a!.headers.connection).not.toBe('close')
      expect(b.status).toBeLessThan(500)
      return [a!.status, codeOf(a), 'kept']
    }
    expect(a!.headers.connection).toBe('close')
    // A new connection is served.
    const again = await RawConnection.open(port)
    try {
      again.write(next)
      await again.until(() => final(again).length >= 1, 'an answer on a new connection')
      expect(final(again)[0]!.status).toBeLessThan(500)
    } finally {
      again.destroy()
    }
    return [a!.status, codeOf(a), 'closed']
  } finally {
    conn.destroy()
  }
}

/** What each app answered to each case: compared across the apps at the end. */
const transcripts: Partial<Record<AppName, Record<string, unknown>>> = {}

for (const name of NAMES) {
  describe(`${name} reference app`, () => {
    let srv: Running
    let alice: string
    let bob: string
    const log: Record<string, unknown> = {}
    beforeAll(async () => {
      srv = await start(name, { ATTACH_MAX_FILE_SIZE: String(MAX_FILE), ATTACH_CORS_ORIGINS: ORIGIN })
      alice = await sign('1')
      bob = await sign('2')
      transcripts[name] = log
    })
    afterAll(async () => {
      await srv?.close()
    })

    const call = (path: string, init: RequestInit & { token?: string | null } = {}) => {
      const { token, ...rest } = init
      const headers = new Headers(rest.headers)
      if (token !== null) headers.set('authorization', `Bearer ${token ?? alice}`)
      if (typeof rest.body === 'string' && !headers.has('content-type')) headers.set('content-type', 'application/json')
      return fetch(srv.base + path, { ...rest, headers })
    }
    const upload = (fields: Record<string, string>, file?: [Blob, string], token?: string | null) => {
      const fd = new FormData()
      for (const [k, v] of Object.entries(fields)) fd.set(k, v)
      if (file) fd.set('file', file[0], file[1])
      return call('/api/storage/attach/tmp', { method: 'POST', body: fd, token })
    }
    const tmpDir = () => join(srv.dataDir, 'tmp')

    it('saves a board post with its attachments in one request, then serves them', async () => {
      const photo = await sharp({ create: { width: 20, height: 10, channels: 3, background: '#f80' } })
        .jpeg()
        .toBuffer()
      const img = (await (await upload({ refDomain: 'board', refCategory: 'image' }, [new Blob([new Uint8Array(photo)]), 'p.jpg'])).json())
        .files[0]
      const doc = (await (await upload({ refDomain: 'board' }, [new Blob(['minutes']), 'minutes.txt'])).json()).files[0]
      const res = await call('/board', {
        method: 'POST',
        body: JSON.stringify({
          title: 'Post',
          body: 'hello',
          attachContainer: {
            refDomain: 'board',
            default: [{ savedName: doc.name, displayName: 'minutes.txt' }],
            image: [{ savedName: img.name, displayName: 'p.jpg' }],
          },
        }),
      })
      expect(res.status).toBe(201)
      const post = await res.json()
      const got = await (await call(`/board/${post.id}`)).json()
      expect(got).toMatchObject({ id: post.id, title: 'Post', body: 'hello', createdBy: 1 })
      const view = await fetch(srv.base + got.attachContainer.image[0].url)
      expect(view.headers.get('content-type')).toBe('image/jpeg')
      expect(Buffer.from(await view.arrayBuffer()).equals(photo)).toBe(true)
      const dl = await fetch(srv.base + got.attachContainer.default[0].url.replace('/view/', '/download/'))
      expect(dl.headers.get('content-disposition')).toMatch(/^attachment; filename="minutes.txt"/)
      expect(await dl.text()).toBe('minutes')
      const head = await fetch(srv.base + got.attachContainer.default[0].url, { method: 'HEAD' })
      expect([head.status, head.headers.get('content-length'), await head.text()]).toEqual([200, '7', ''])
      const range = await fetch(srv.base + got.attachContainer.default[0].url, { headers: { range: 'bytes=1-3' } })
      expect([range.status, await range.text()]).toEqual([206, 'inu'])
      log.flow = {
        post: Object.keys(post).sort(),
        got: Object.keys(got).sort(),
        image: Object.keys(got.attachContainer.image[0]).sort(),
      }
    })

    it('answers GET /healthz and GET /readyz without authentication', async () => {
      const health = await fetch(`${srv.base}/healthz`)
      const ready = await fetch(`${srv.base}/readyz`)
      const body = await ready.json()
      expect([health.status, await health.json(), ready.status, body.status, ready.headers.get('cache-control')]).toEqual([
        200,
        { status: 'ok' },
        200,
        'ready',
        'no-store',
      ])
      log.health = [health.status, ready.status, body.status, Object.keys(body.stores).sort()]
      // Prometheus's text format: the service's requests by route (the readyz above is not one of them)
      // and the process's own metrics.
      expect((await fetch(`${srv.base}/api/storage/config`)).status).toBe(401)
      const metrics = await fetch(`${srv.base}/metrics`)
      const text = await metrics.text()
      expect(metrics.status).toBe(200)
      expect(metrics.headers.get('content-type')).toContain('text/plain')
      expect(text).toMatch(/^attach_storage_requests_total\{[^}]*route="[^"]+"[^}]*\} \d+$/m)
      expect(text).toMatch(/^process_cpu_user_seconds_total \d/m)
      log.metrics = [metrics.status, /# TYPE attach_storage_store_calls_total counter/.test(text)]
    })

    it('serves the board page at / with its CSP, and changes and deletes a post (PUT, DELETE /board/:id) for its author only', async () => {
      const page: Record<string, unknown> = {}
      for (const path of ['/', '/page/app.css', '/page/app.js', '/page/dev-token', '/page/nope']) {
        const res = await fetch(srv.base + path, { redirect: 'manual' })
        const body = await res.text()
        page[path] = [res.status, res.headers.get('content-type'), res.headers.get('content-security-policy')]
        if (path === '/') expect(body).toContain('<attach-field name="attachContainer" domain="board"')
        if (path === '/page/app.js') expect(body).toContain('attach-field')
        if (res.status >= 400) page[path] = [res.status, JSON.parse(body).code]
      }
      expect(page['/']).toEqual([200, 'text/html; charset=utf-8', expect.not.stringContaining('unsafe-inline')])
      // Not the development secret: no development token.
      expect(page['/page/dev-token']).toEqual([404, 'not-found'])

      const created = await (await call('/board', { method: 'POST', body: JSON.stringify({ title: 'Edit me' }) })).json()
      const fd = new FormData()
      fd.set('refDomain', 'board')
      fd.set('file', new Blob(['later']), 'later.txt')
      const up = await (await call('/api/storage/attach/tmp', { method: 'POST', body: fd })).json()
      const put = (token: string, body: unknown) => call(`/board/${created.id}`, { method: 'PUT', token, body: JSON.stringify(body) })
      const bag = { refDomain: 'board', default: [{ savedName: up.files[0].name, displayName: 'later.txt' }] }
      const byBob = await put(bob, { title: 'Taken', attachContainer: bag })
      page.putByOther = [byBob.status, (await byBob.json()).code]
      const edited = await put(alice, { title: 'Edited', attachContainer: bag })
      const got = await edited.json()
      page.put = [edited.status, got.title, got.attachContainer.default.map((r: { displayName: string }) => r.displayName)]
      page.putBad = (await put(alice, { title: '' })).status
      const byBobDel = await call(`/board/${created.id}`, { method: 'DELETE', token: bob })
      page.deleteByOther = [byBobDel.status, (await byBobDel.json()).code]
      const del = await call(`/board/${created.id}`, { method: 'DELETE' })
      page.delete = [del.status, await del.json()]
      page.after = (await call(`/board/${created.id}`)).status
      expect(page).toMatchObject({
        putByOther: [403, 'forbidden'],
        put: [200, 'Edited', ['later.txt']],
        putBad: 400,
        deleteByOther: [403, 'forbidden'],
        delete: [200, { success: true, id: created.id, count: 1 }],
        after: 404,
      })
      log.page = page
    })

    it('lists board posts by the list and pagination convention (GET /board)', async () => {
      for (const title of ['L1', 'L2']) expect((await call('/board', { method: 'POST', body: JSON.stringify({ title }) })).status).toBe(201)
      const res = await call('/board?_usePaging=true&currentPage=1&dataPerPage=2&sortBy=id:asc', { headers: { origin: ORIGIN } })
      expect(res.status).toBe(200)
      const rows = (await res.json()) as Array<{ title: string; positionIdx?: number }>
      const page = {
        total: res.headers.get('x-app-total-count'),
        page: res.headers.get('x-app-page'),
        count: res.headers.get('x-app-data-count'),
        rows: rows.map((r) => [r.title, r.positionIdx]),
      }
      expect(page).toMatchObject({
        total: '3',
        page: '1',
        count: '2',
        rows: [
          ['Post', 1],
          ['L1', 2],
        ],
      })
      log.list = page
      const odd = await call('/board?_usePaging=true&currentPage=0&dataPerPage=x')
      log['list odd paging'] = [odd.status, await odd.json()]
      const unauth = await call('/board', { token: null })
      expect(unauth.status).toBe(401)
      log['list without token'] = [unauth.status, await unauth.json()]
    })

    it('refuses bad input with the contract status codes and JSON bodies', async () => {
      const priv = (await (await upload({ refDomain: 'demo', refCategory: 'private' }, [new Blob(['secret']), 's.txt'])).json()).files[0]
      const cases: Array<[string, string, RequestInit & { token?: string | null }, number, string]> = [
        ['no token', '/api/storage/config', { token: null }, 401, 'unauthorized'],
        ['wrong secret', '/api/storage/config', { token: await sign('1', 'another-secret-0123456789') }, 401, 'unauthorized'],
        ['board without token', '/board', { method: 'POST', body: '{}', token: null }, 401, 'unauthorized'],
        ['board get without token', '/board/1', { token: null }, 401, 'unauthorized'],
        ['malformed confirmed save', '/api/storage/attach/demo/1', { method: 'POST', body: '{"x":' }, 400, 'bad-request'],
        [
          'confirmed save as text',
          '/api/storage/attach/demo/1',
          { method: 'POST', body: 'x', headers: { 'content-type': 'text/plain' } },
          400,
          'bad-request',
        ],
        ['confirmed save unknown domain', '/api/storage/attach/nope/1', { method: 'POST', body: '{}' }, 400, 'unknown-domain'],
        ['malformed board', '/board', { method: 'POST', body: '{"title":' }, 400, 'bad-request'],
        [
          'board of another domain',
          '/board',
          { method: 'POST', body: JSON.stringify({ title: 'x', attachContainer: { refDomain: 'demo' } }) },
          400,
          'bad-request',
        ],
        [
          'board unknown category',
          '/board',
          { method: 'POST', body: JSON.stringify({ title: 'x', attachContainer: { refDomain: 'board', nope: [] } }) },
          400,
          'unknown-category',
        ],
        ['board id', '/board/abc', {}, 400, 'bad-request'],
        ['list without refDomain', '/api/storage/attach?refKeyList=1', {}, 400, 'bad-request'],
        ['bad percent-encoding', '/api/storage/attach/demo/%zz', {}, 400, 'bad-request'],
        ['private temp without token', `/assets/storage/attach-temp/view/demo/private/${priv.name}`, { token: null }, 403, 'forbidden'],
        ['no such record', '/assets/storage/attach/view/424242', { token: null }, 404, 'not-found'],
        ['no such post', '/board/999999', {}, 404, 'not-found'],
        ['no such route', '/nowhere', {}, 404, 'not-found'],
        ['no such api route', '/api/storage/nope', {}, 404, 'not-found'],
        ['assets by PUT', '/assets/storage/attach/view/1', { method: 'PUT', body: '{}' }, 404, 'not-found'],
        ['traversal %2F', '/assets/storage/attach-temp/view/demo/default/..%2F..%2Fattach.db', { token: null }, 404, 'not-found'],
        ['traversal %2e', '/assets/storage/attach-temp/view/demo/default/%2e%2e%2f%2e%2e%2fattach.db', { token: null }, 404, 'not-found'],
        [
          'traversal direct path',
          '/assets/storage/attach-direct/view/demo/default?path=../../attach.db',
          { token: null },
          404,
          'not-found',
        ],
        ['traversal refKey', '/assets/storage/attach/view/demo/..%5c..%5cx/default', { token: null }, 400, 'bad-request'],
        ['traversal category', '/assets/storage/attach/view/demo/x/..%2f', { token: null }, 400, 'unknown-category'],
      ]
      for (const [label, path, init, status, code] of cases) {
        const res = await call(path, init)
        const body = await res.json()
        expect([label, res.status, body.code]).toEqual([label, status, code])
        log[label] = [res.status, body]
      }
      const uploads: Array<[string, Record<string, string>, [Blob, string] | undefined, number, string]> = [
        ['upload unknown domain', { refDomain: 'nope' }, [new Blob(['x']), 'x.txt'], 400, 'unknown-domain'],
        ['upload unknown category', { refDomain: 'demo', refCategory: 'nope' }, [new Blob(['x']), 'x.txt'], 400, 'unknown-category'],
        ['upload without domain', {}, [new Blob(['x']), 'x.txt'], 400, 'bad-request'],
        ['upload without file', { refDomain: 'demo' }, undefined, 400, 'no-file'],
      ]
      for (const [label, fields, file, status, code] of uploads) {
        const res = await upload(fields, file)
        const body = await res.json()
        expect([label, res.status, body.code]).toEqual([label, status, code])
        log[label] = [res.status, body]
      }
      const nonImage = await (await upload({ refDomain: 'demo', refCategory: 'image' }, [new Blob(['not an image']), 'fake.png'])).json()
      log['upload non-image'] = nonImage.files.map((f: { error?: unknown }) => f.error)
      // A path sent as is, `..` segments and all: never leaves the groups.
      for (const path of ['/assets/storage/../../attach.db', '/assets/storage/attach-temp/view/demo/default/../../../../attach.db']) {
        const res = await rawGet(srv.port, path)
        expect(res.status).toBe(404)
        log[`raw ${path}`] = res
      }
    })

    it('cuts an upload over ATTACH_MAX_FILE_SIZE off with 413 and leaves nothing behind', async () => {
      const tmpBefore = await files(tmpDir())
      const savedBefore = await files(join(srv.dataDir, 'files'))
      const res = await upload({ refDomain: 'demo' }, [new Blob([new Uint8Array(3 * MAX_FILE)]), 'big.bin'])
      expect(res.status).toBe(413)
      const body = await res.json()
      expect(body.code).toBe('too-large')
      log['413'] = [res.status, body]
      await until(async () => (await files(tmpDir())).length === tmpBefore.length, 5_000)
      expect(await files(tmpDir())).toEqual(tmpBefore)
      expect(await files(join(srv.dataDir, 'files'))).toEqual(savedBefore)
    })

    it('leaves nothing in tmp/ when the client disconnects mid-upload', async () => {
      await abandonUpload(srv.port, alice, tmpDir())
      // The server still serves afterwards.
      expect((await call('/api/storage/config')).status).toBe(200)
    })

    it('answers every method the routes do not serve with JSON {code, message}, never a 5xx', async () => {
      const paths = ['/api/storage/config', '/api/storage/attach/demo/1', '/assets/storage/attach/view/1', '/board', '/board/1', '/nowhere']
      const seen: Record<string, string> = {}
      for (const method of METHODS.filter((m) => m !== 'CONNECT')) {
        for (const path of paths) {
          for (const token of [null, alice]) {
            const res = await new Promise<{ status: number; text: string }>((resolve, reject) => {
              const headers: Record<string, string> = { connection: 'close' }
              if (token) headers.authorization = `Bearer ${token}`
              httpRequest({ host: '127.0.0.1', port: srv.port, path, method, headers }, (r) => {
                let text = ''
                r.setEncoding('utf8')
                r.on('data', (d) => (text += d))
                r.on('end', () => resolve({ status: r.statusCode!, text }))
              })
                .on('error', reject)
                .end()
            })
            const label = `${method} ${path}${token ? ' (token)' : ''}`
            expect([label, res.status < 500]).toEqual([label, true])
            if (res.status >= 400 && method !== 'HEAD') {
              const body = JSON.parse(res.text)
              expect([label, typeof body.code, typeof body.message]).toEqual([label, 'string', 'string'])
              seen[label] = `${res.status} ${body.code}`
            } else seen[label] = String(res.status)
            if (!['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'].includes(method)) {
              expect([label, seen[label]]).toEqual([label, '404 not-found'])
            }
          }
        }
      }
      expect(seen['TRACE /api/storage/config (token)']).toBe('404 not-found')
      expect(seen['TRACE /assets/storage/attach/view/1']).toBe('404 not-found')
      log.methods = seen
    })

    it("bounds how long a request may take to arrive with Node's limits, on every app", () => {
      const limits = { request: srv.server.requestTimeout, headers: srv.server.headersTimeout, keepAlive: srv.server.keepAliveTimeout }
      expect(limits.request).toBeGreaterThan(0)
      expect(limits.headers).toBeGreaterThan(0)
      log['server limits'] = limits
    })

    it('closes a CONNECT request and keeps serving', async () => {
      const conn = await RawConnection.open(srv.port)
      conn.write('CONNECT 127.0.0.1:1 HTTP/1.1\r\nhost: 127.0.0.1:1\r\n\r\n')
      await conn.until(() => conn.closed, 'the close')
      expect(final(conn).every((a) => a.status < 500)).toBe(true)
      expect((await call('/api/storage/config')).status).toBe(200)
    })

    it('never wedges a keep-alive connection with an answer sent before the body was read', async () => {
      const next = `GET /api/storage/config HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${alice}\r\n\r\n`
      const json = (size: number) => JSON.stringify({ title: 'x', body: 'y'.repeat(size) })
      const post = (path: string, body: string | Buffer, headers = '') => [
        `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\n${headers}\r\n`,
        body,
      ]
      const boundary = 'xEARLYx'
      const multipart = Buffer.concat([
        Buffer.from(
          `--${boundary}\r\nContent-Disposition: form-data; name="refDomain"\r\n\r\ndemo\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="b.bin"\r\n\r\n`,
        ),
        Buffer.alloc(600 * 1024, 7),
        Buffer.from(`\r\n--${boundary}--\r\n`),
      ])
      const outcomes: Record<string, unknown> = {}
      // 401 before a 600 KB body was read: the case found on the reference server.
      outcomes['board 600 KB without token'] = await earlyAnswerThenNext(srv.port, post('/board', json(600 * 1024)), next)
      outcomes['board 10 KB without token'] = await earlyAnswerThenNext(srv.port, post('/board', json(10 * 1024)), next)
      outcomes['confirmed save 600 KB without token'] = await earlyAnswerThenNext(
        srv.port,
        post('/api/storage/attach/demo/1', json(600 * 1024)),
        next,
      )
      outcomes['upload 600 KB without token'] = await earlyAnswerThenNext(
        srv.port,
        [
          `POST /api/storage/attach/tmp HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: multipart/form-data; boundary=${boundary}\r\ncontent-length: ${multipart.length}\r\n\r\n`,
          multipart,
        ],
        next,
      )
      outcomes['unknown route 600 KB'] = await earlyAnswerThenNext(
        srv.port,
        post('/nowhere', json(600 * 1024), `authorization: Bearer ${alice}\r\n`),
        next,
      )
      outcomes['assets POST 600 KB'] = await earlyAnswerThenNext(srv.port, post('/assets/storage/attach/view/1', json(600 * 1024)), next)
      // The answer goes out while the body is still on its way: the client sends the rest afterwards.
      const big = json(600 * 1024)
      const [head, body] = post('/board', big)
      outcomes['board 600 KB sent after the answer'] = await (async () => {
        const conn = await RawConnection.open(srv.port)
        try {
          conn.write(head!)
          await conn.until(() => final(conn).length >= 1, 'the early answer')
          conn.write(body!)
          conn.write(next)
          await conn.until(() => final(conn).length >= 2 || conn.closed, 'the second answer or the close')
          return [final(conn)[0]!.status, final(conn)[0]!.headers.connection, final(conn).length]
        } finally {
          conn.destroy()
        }
      })()
      // The unread body is read and discarded (within bounds) and the connection kept: a client still
      // sending it reads the answer instead of a reset.
      expect(outcomes).toMatchObject({
        'board 600 KB without token': [401, 'unauthorized', 'kept'],
        'board 10 KB without token': [401, 'unauthorized', 'kept'],
        'confirmed save 600 KB without token': [401, 'unauthorized', 'kept'],
        'upload 600 KB without token': [401, 'unauthorized', 'kept'],
        'unknown route 600 KB': [404, 'not-found', 'kept'],
        'assets POST 600 KB': [404, 'not-found', 'kept'],
        'board 600 KB sent after the answer': [401, 'keep-alive', 2],
      })
      log['early answers'] = outcomes
      expect((await call('/api/storage/config')).status).toBe(200)
    })

    it('closes the connection after a 413 cut an upload off, and keeps serving', async () => {
      const boundary = 'xBIGx'
      const head = `--${boundary}\r\nContent-Disposition: form-data; name="refDomain"\r\n\r\ndemo\r\n--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n\r\n`
      const size = 3 * MAX_FILE
      const tail = `\r\n--${boundary}--\r\n`
      const next = `GET /api/storage/config HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${alice}\r\n\r\n`
      const outcome = await earlyAnswerThenNext(
        srv.port,
        [
          `POST /api/storage/attach/tmp HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${alice}\r\ncontent-type: multipart/form-data; boundary=${boundary}\r\n` +
            `content-length: ${Buffer.byteLength(head) + size + Buffer.byteLength(tail)}\r\n\r\n${head}`,
          Buffer.alloc(size, 3),
          tail,
        ],
        next,
      )
      // Closed, or kept when the whole body had arrived (and was discarded) before the answer went out.
      expect(outcome.slice(0, 2)).toEqual([413, 'too-large'])
      log['413 connection'] = outcome.slice(0, 2)
    })

    it('answers a header-only chunked request, Expect: 100-continue and a duplicate Content-Length', async () => {
      const seen: Record<string, unknown> = {}
      const next = `GET /api/storage/config HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${alice}\r\n\r\n`
      // Chunked, headers only, nothing after: refused before the body is awaited, and closed once no
      // byte of the body came for DRAIN_IDLE_MS (5 s).
      {
        const conn = await RawConnection.open(srv.port)
        conn.write('POST /board HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n')
        await conn.until(() => final(conn).length >= 1 && conn.closed, 'the answer and the close')
        seen['chunked headers only, no token'] = [final(conn)[0]!.status, codeOf(final(conn)[0]), conn.closed]
      }
      // Chunked with only the last chunk: an empty body, read, refused as JSON; the connection goes on.
      seen['chunked empty body'] = await earlyAnswerThenNext(
        srv.port,
        [
          `POST /board HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${alice}\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n`,
        ],
        next,
      )
      // Expect: 100-continue with a token: 100, then the body, then 201.
      {
        const conn = await RawConnection.open(srv.port)
        const body = JSON.stringify({ title: 'continued' })
        conn.write(
          `POST /board HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${alice}\r\ncontent-type: application/json\r\n` +
            `content-length: ${body.length}\r\nexpect: 100-continue\r\n\r\n`,
        )
        await conn.until(() => conn.answers.length >= 1, 'the 100 Continue')
        conn.write(body)
        conn.write(next)
        await conn.until(() => final(conn).length >= 2, 'both answers')
        seen['expect 100-continue'] = conn.answers.map((a) => a.status)
        conn.destroy()
      }
      // Expect: 100-continue without a token: refused without a 100 (the client was never asked for its
      // body), with Connection: close; a body sent anyway is not taken for a next request.
      {
        const conn = await RawConnection.open(srv.port)
        const body = JSON.stringify({ title: 'refused' })
        conn.write(
          `POST /board HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\nexpect: 100-continue\r\n\r\n`,
        )
        await conn.until(() => final(conn).length >= 1, 'the refusal')
        conn.write(body)
        conn.write(next)
        await conn.until(() => final(conn).length >= 2 || conn.closed, 'the second answer or the close')
        seen['expect 100-continue without token'] = conn.answers.map((a) => a.status)
        conn.destroy()
      }
      // Two different Content-Length headers: Node's parser refuses it; the answer is JSON like the rest.
      for (const [label, bytes] of [
        ['duplicate content-length', 'POST /board HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}'],
        ['bad chunk size', 'POST /board HTTP/1.1\r\nhost: 127.0.0.1\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n'],
      ] as const) {
        const conn = await RawConnection.open(srv.port)
        conn.write(bytes)
        await conn.until(() => final(conn).length >= 1 && conn.closed, 'the refusal and the close')
        seen[label] = [final(conn)[0]!.status, JSON.parse(final(conn)[0]!.body)]
      }
      expect(seen).toMatchObject({
        'chunked headers only, no token': [401, 'unauthorized', true],
        'chunked empty body': [400, 'bad-request', 'kept'],
        'expect 100-continue': [100, 201, 200],
        'expect 100-continue without token': [401],
        'duplicate content-length': [400, { code: 'bad-request' }],
        'bad chunk size': [400, { code: 'bad-request' }],
      })
      log['odd framing'] = seen
      expect((await call('/api/storage/config')).status).toBe(200)
    })

    it('leaves nothing behind when a client goes away mid-body on a JSON route, and keeps serving', async () => {
      const count = async () => Number((await call('/board?_usePaging=true&currentPage=1&dataPerPage=1')).headers.get('x-app-total-count'))
      const before = await count()
      for (const path of ['/board', '/api/storage/attach/demo/abandoned']) {
        const conn = await RawConnection.open(srv.port)
        conn.write(
          `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${alice}\r\ncontent-type: application/json\r\ncontent-length: 200000\r\n\r\n{"title":"half`,
        )
        conn.write('a'.repeat(50_000))
        await wait(100)
        conn.destroy()
      }
      await wait(200)
      expect(await count()).toBe(before)
      const lookup = await call('/api/storage/attach/demo/abandoned')
      const bag = (await lookup.json()) as Record<string, unknown>
      expect([lookup.status, Object.values(bag).flatMap((v) => (Array.isArray(v) ? v : []))]).toEqual([200, []])
    })

    it('answers the OpenAPI document and its page without authentication, the page with its files from this server', async () => {
      const doc = await call('/api/storage/openapi.json', { token: null })
      expect(doc.status).toBe(200)
      expect(Object.keys((await doc.json()).paths)).toEqual(expect.arrayContaining(['/board', '/api/storage/attach/tmp']))
      const page = await call('/api/storage/docs', { token: null })
      expect(page.status).toBe(200)
      expect(await page.text()).toContain('docs/swagger-ui-bundle.js')
      for (const file of ['swagger-ui-bundle.js', 'swagger-ui.css', 'init.js']) {
        expect((await call(`/api/storage/docs/${file}`, { token: null })).status).toBe(200)
      }
      expect((await call('/api/storage/docs/package.json', { token: null })).status).toBe(404)
      expect((await call('/api/storage/config', { token: null })).status).toBe(401)
    })

    it('answers CORS preflights without authentication for the configured origin only', async () => {
      const preflight = (origin: string) =>
        fetch(`${srv.base}/api/storage/attach/tmp`, {
          method: 'OPTIONS',
          headers: { origin, 'access-control-request-method': 'PUT', 'access-control-request-headers': 'authorization,content-type' },
        })
      const ok = await preflight(ORIGIN)
      const list = (h: string | null) => (h ?? '').split(',').map((s) => s.trim().toLowerCase())
      const seen = {
        status: ok.status,
        origin: ok.headers.get('access-control-allow-origin'),
        methods: list(ok.headers.get('access-control-allow-methods')),
        headers: list(ok.headers.get('access-control-allow-headers')),
        maxAge: ok.headers.get('access-control-max-age'),
      }
      expect(seen).toMatchObject({ status: 204, origin: ORIGIN, maxAge: '600' })
      expect(seen.methods).toEqual(expect.arrayContaining(['get', 'post', 'put']))
      expect(seen.headers).toEqual(expect.arrayContaining(['authorization', 'content-type']))
      expect((await preflight('https://evil.example.com')).headers.get('access-control-allow-origin')).toBeNull()
      const actual = await call('/api/storage/config', { headers: { origin: ORIGIN } })
      expect(actual.headers.get('access-control-allow-origin')).toBe(ORIGIN)
      expect(list(actual.headers.get('access-control-expose-headers'))).toEqual(
        expect.arrayContaining(['x-app-total-count', 'content-disposition']),
      )
      const other = await call('/api/storage/config', { headers: { origin: 'https://evil.example.com' } })
      expect(other.headers.get('access-control-allow-origin')).toBeNull()
      // A view by id (the adapters' fast path writes it on Node's response) carries the CORS headers too.
      const t = (await (await upload({ refDomain: 'demo', refCategory: 'default' }, [new Blob(['cors']), 'c.txt'])).json()).files[0]
      const rec = (
        await (
          await call('/api/storage/attach/demo/78', { method: 'POST', body: JSON.stringify({ default: [{ savedName: t.name }] }) })
        ).json()
      ).attachList[0]
      const view = await fetch(`${srv.base}/assets/storage/attach/download/${rec.id}`, { headers: { origin: ORIGIN } })
      expect(await view.text()).toBe('cors')
      expect(view.headers.get('access-control-allow-origin')).toBe(ORIGIN)
      expect(list(view.headers.get('access-control-expose-headers'))).toEqual(expect.arrayContaining(['content-disposition']))
      expect(view.headers.get('content-disposition')).toMatch(/^attachment; filename="c.txt"/)
      log.cors = seen
    })

    it('takes resumable uploads (tus) through the adapter, with their CORS headers', async () => {
      const tus = { 'tus-resumable': '1.0.0' }
      const meta = `filename ${Buffer.from('r.txt').toString('base64')},refDomain ${Buffer.from('demo').toString('base64')}`
      const created = await call('/api/storage/attach/tus', {
        method: 'POST',
        headers: { ...tus, 'upload-length': '10', 'upload-metadata': meta, origin: ORIGIN },
      })
      expect(created.status).toBe(201)
      const list = (h: string | null) => (h ?? '').split(',').map((x) => x.trim().toLowerCase())
      expect(list(created.headers.get('access-control-expose-headers'))).toEqual(expect.arrayContaining(['location', 'upload-offset']))
      const location = created.headers.get('location')!
      const first = await call(location, {
        method: 'PATCH',
        headers: { ...tus, 'content-type': 'application/offset+octet-stream', 'upload-offset': '0' },
        body: 'resum',
      })
      expect([first.status, first.headers.get('upload-offset')]).toEqual([204, '5'])
      const head = await call(location, { method: 'HEAD', headers: tus })
      expect([head.status, head.headers.get('upload-offset'), head.headers.get('upload-length')]).toEqual([200, '5', '10'])
      const last = await call(location, {
        method: 'PATCH',
        headers: { ...tus, 'content-type': 'application/offset+octet-stream', 'upload-offset': '5' },
        body: 'ables',
      })
      expect(last.status).toBe(204)
      const name = location.split('/').pop()!
      const saved = await call('/api/storage/attach/demo/79', { method: 'POST', body: JSON.stringify({ default: [{ savedName: name }] }) })
      const rec = (await saved.json()).attachList[0]
      expect([rec.displayName, rec.fileSize]).toEqual(['r.txt', 10])
      const preflight = await fetch(`${srv.base}${location}`, {
        method: 'OPTIONS',
        headers: {
          origin: ORIGIN,
          'access-control-request-method': 'PATCH',
          'access-control-request-headers': 'authorization,tus-resumable,upload-offset,content-type',
        },
      })
      expect(list(preflight.headers.get('access-control-allow-methods'))).toEqual(expect.arrayContaining(['patch', 'head', 'delete']))
      expect(list(preflight.headers.get('access-control-allow-headers'))).toEqual(
        expect.arrayContaining(['tus-resumable', 'upload-offset', 'upload-length', 'upload-metadata']),
      )
    })

    it('guards the private category by the token in the header or access_token, and the creator', async () => {
      const t = (await (await upload({ refDomain: 'demo', refCategory: 'private' }, [new Blob(['mine']), 'm.txt'])).json()).files[0]
      const saved = await call('/api/storage/attach/demo/77', {
        method: 'POST',
        body: JSON.stringify({ private: [{ savedName: t.name }] }),
      })
      const rec = (await saved.json()).attachList[0]
      const url = `${srv.base}/assets/storage/attach/view/${rec.id}`
      const status = async (u: string, token?: string) => {
        const res = await fetch(u, token ? { headers: { authorization: `Bearer ${token}` } } : {})
        await res.arrayBuffer()
        return res.status
      }
      const statuses = [
        await status(url),
        await status(`${url}?access_token=${bob}`),
        await status(url, bob),
        await status(`${url}?access_token=${alice}`),
        await status(url, alice),
      ]
      expect(statuses).toEqual([403, 403, 403, 200, 200])
      log.private = statuses
    })
  })
}

describe('identical answers across the three apps', () => {
  it('has the same status codes and JSON bodies in every case', () => {
    expect(Object.keys(transcripts)).toEqual(NAMES)
    expect(Object.keys(transcripts.hono!).length).toBeGreaterThan(30)
    expect(transcripts.express).toEqual(transcripts.hono)
    expect(transcripts.fastify).toEqual(transcripts.hono)
  })
})

describe('host middleware around the adapters', () => {
  let srv: Running
  let auth: { authorization: string }
  beforeAll(async () => {
    srv = await start('express')
    auth = { authorization: `Bearer ${await sign('3')}` }
  })
  afterAll(async () => {
    await srv?.close()
  })

  /** Upload, then a JSON confirmed save, through an app of the host's making. */
  async function uploadAndSave(base: string, key: string) {
    const fd = new FormData()
    fd.set('refDomain', 'demo')
    fd.set('file', new Blob(['host bytes']), 'h.txt')
    const up = await fetch(`${base}/api/storage/attach/tmp`, { method: 'POST', body: fd, headers: auth })
    expect(up.status).toBe(200)
    const name = (await up.json()).files[0].name
    const saved = await fetch(`${base}/api/storage/attach/demo/${key}`, {
      method: 'POST',
      body: JSON.stringify({ default: [{ savedName: name }] }),
      headers: { ...auth, 'content-type': 'application/json' },
    })
    expect(saved.status).toBe(200)
    const rec = (await saved.json()).attachList[0]
    expect(await (await fetch(base + rec.url)).text()).toBe('host bytes')
  }

  it('Express: the host body parsers mounted before the mount break neither uploads nor JSON routes', async () => {
    const app = express()
    app.use(express.json())
    app.use(express.urlencoded({ extended: true }))
    app.post('/host/echo', (req, res) => void res.json(req.body))
    mountAttachStorage(app, srv.ref.storage)
    const server = createServer(app).listen(0, '127.0.0.1')
    const base = `http://127.0.0.1:${await listening(server)}`
    try {
      await uploadAndSave(base, 'express-host')
      const echo = await fetch(`${base}/host/echo`, { method: 'POST', body: new URLSearchParams({ a: '1' }) })
      expect(await echo.json()).toEqual({ a: '1' })
      await abandonUpload(await listening(server), auth.authorization.slice(7), join(srv.dataDir, 'tmp'))
    } finally {
      server.closeAllConnections()
      await new Promise((r) => server.close(r))
    }
  })

  it("Hono on @hono/node-server: an upload streams from Node's own request, or from the Web body once a middleware touched it, the same bytes either way", async () => {
    const bytes = Buffer.alloc(700 * 1024)
    for (let i = 0; i < bytes.length; i++) bytes[i] = (i * 31 + (i >> 9)) & 255
    const toWeb = vi.spyOn(Readable, 'toWeb')
    const app = new Hono()
    mountHono(app, srv.ref.storage)
    const server = serve({ fetch: app.fetch, port: 0, hostname: '127.0.0.1' }) as Server
    const base = `http://127.0.0.1:${await listening(server)}`
    const upload = async (url: string) => {
      const fd = new FormData()
      fd.set('refDomain', 'demo')
      fd.set('file', new Blob([bytes]), 'n.bin')
      const up = await fetch(url, { method: 'POST', body: fd, headers: auth })
      expect(up.status).toBe(200)
      const [file] = (await up.json()).files
      expect(file.size).toBe(bytes.length)
      return file.name as string
    }
    try {
      toWeb.mockClear()
      const name = await upload(`${base}/api/storage/attach/tmp`)
      expect(toWeb).not.toHaveBeenCalled()
      // A resumable upload's PATCH too.
      const created = await fetch(`${base}/api/storage/attach/tus`, {
        method: 'POST',
        headers: {
          ...auth,
          'tus-resumable': '1.0.0',
          'upload-length': String(bytes.length),
          'upload-metadata': `filename ${Buffer.from('t.bin').toString('base64')},refDomain ${Buffer.from('demo').toString('base64')}`,
        },
      })
      expect(created.status).toBe(201)
      toWeb.mockClear()
      const patched = await fetch(`${base}${created.headers.get('location')}`, {
        method: 'PATCH',
        headers: { ...auth, 'tus-resumable': '1.0.0', 'upload-offset': '0', 'content-type': 'application/offset+octet-stream' },
        body: new Uint8Array(bytes),
      })
      expect([patched.status, patched.headers.get('upload-offset')]).toEqual([204, String(bytes.length)])
      expect(toWeb).not.toHaveBeenCalled()
      const saved = await fetch(`${base}/api/storage/attach/demo/hono-node-body`, {
        method: 'POST',
        body: JSON.stringify({ default: [{ savedName: name }] }),
        headers: { ...auth, 'content-type': 'application/json' },
      })
      const rec = (await saved.json()).attachList[0]
      expect(Buffer.from(await (await fetch(base + rec.url)).arrayBuffer()).equals(bytes)).toBe(true)
      await abandonUpload(await listening(server), auth.authorization.slice(7), join(srv.dataDir, 'tmp'))
    } finally {
      server.closeAllConnections()
      await new Promise((r) => server.close(r))
    }
    // The same mount behind a host middleware that made the Web Request (its signal) first: the body is
    // then read through it, never taken from under it.
    const outer = new Hono()
    outer.use('*', async (c, next) => {
      void c.req.raw.signal
      await next()
    })
    mountHono(outer, srv.ref.storage)
    const server2 = serve({ fetch: outer.fetch, port: 0, hostname: '127.0.0.1' }) as Server
    const base2 = `http://127.0.0.1:${await listening(server2)}`
    try {
      toWeb.mockClear()
      const name = await upload(`${base2}/api/storage/attach/tmp`)
      expect(toWeb).toHaveBeenCalled()
      const saved = await fetch(`${base2}/api/storage/attach/demo/hono-web-body`, {
        method: 'POST',
        body: JSON.stringify({ default: [{ savedName: name }] }),
        headers: { ...auth, 'content-type': 'application/json' },
      })
      const rec = (await saved.json()).attachList[0]
      expect(Buffer.from(await (await fetch(base2 + rec.url)).arrayBuffer()).equals(bytes)).toBe(true)
    } finally {
      toWeb.mockRestore()
      server2.closeAllConnections()
      await new Promise((r) => server2.close(r))
    }
  })

  it('Fastify: the host routes keep their parsers beside the plugin', async () => {
    const app = Fastify()
    app.post('/host/echo', async (request) => ({ parsed: request.body }))
    await app.register(attachStorage, { storage: srv.ref.storage })
    const base = await app.listen({ port: 0, host: '127.0.0.1' })
    try {
      await uploadAndSave(base, 'fastify-host')
      const echo = await fetch(`${base}/host/echo`, {
        method: 'POST',
        body: JSON.stringify({ a: 1 }),
        headers: { 'content-type': 'application/json' },
      })
      expect(await echo.json()).toEqual({ parsed: { a: 1 } })
    } finally {
      const closing = app.close()
      app.server.closeAllConnections()
      await closing
    }
  })
})

describe.each(['express', 'fastify'])('npm run start:%s', (name) => {
  it('prints the listening line, serves, and stops cleanly on SIGTERM', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), `attach-start-${name}-`))
    const child = spawn(process.execPath, ['--conditions=@attach-storage/source', '--import', 'tsx', 'src/server.ts'], {
      cwd: join(here, '..', '..', `${name}-app`),
      env: { ...process.env, PORT: '0', ATTACH_DATA_DIR: dataDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    try {
      const port = await new Promise<string>((resolve, reject) => {
        let out = ''
        child.stdout.on('data', (d) => {
          out += d
          const m = /^listening on http:\/\/127\.0\.0\.1:(\d+)$/m.exec(out)
          if (m) resolve(m[1]!)
        })
        child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)))
        setTimeout(() => reject(new Error(`no listening line: ${out}`)), 30_000)
      })
      const res = await fetch(`http://127.0.0.1:${port}/api/storage/config`)
      expect(res.status).toBe(401)
      expect(await res.json()).toMatchObject({ code: 'unauthorized' })
    } finally {
      child.kill('SIGTERM')
      const code = await new Promise((r) => child.once('exit', r))
      await rm(dataDir, { recursive: true, force: true })
      expect(code).toBe(0)
    }
  })
})
