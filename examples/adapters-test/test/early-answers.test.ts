/**
 * Early answers on the three reference servers, each started as its own process (`src/server.ts`, as
 * `npm start` runs it): a 401 or 413 sent before a large body was read reaches a client of Node's http
 * client that is still sending it (no EPIPE, no reset), and `Expect: 100-continue` gets its `100` only
 * after authentication.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { SignJWT } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { floodOfEarlyAnswers } from '../../../test/early-answers.js'

const SECRET = 'early-answers-secret-0123456789ab'
const here = dirname(fileURLToPath(import.meta.url))
const sign = (sub: string) =>
  new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(sub).setExpirationTime('1h').sign(new TextEncoder().encode(SECRET))

/** One reference server as its own process, on a free port. */
async function startServer(name: string): Promise<{ port: number; stop(): Promise<void> }> {
  const dataDir = await mkdtemp(join(tmpdir(), `attach-early-${name}-`))
  const child: ChildProcessWithoutNullStreams = spawn(
    process.execPath,
    ['--conditions=@attach-storage/source', '--import', 'tsx', 'src/server.ts'],
    {
      cwd: join(here, '..', '..', `${name}-app`),
      env: { ...process.env, PORT: '0', ATTACH_DATA_DIR: dataDir, ATTACH_JWT_SECRET: SECRET, LOG_LEVEL: 'error' },
    },
  )
  const port = await new Promise<number>((resolve, reject) => {
    let out = ''
    child.stdout.on('data', (d) => {
      out += d
      const m = /^listening on http:\/\/127\.0\.0\.1:(\d+)$/m.exec(out)
      if (m) resolve(Number(m[1]))
    })
    child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)))
    setTimeout(() => reject(new Error(`no listening line: ${out}`)), 60_000)
  })
  return {
    port,
    async stop() {
      child.kill('SIGTERM')
      await new Promise((r) => child.once('exit', r))
      await rm(dataDir, { recursive: true, force: true })
    },
  }
}

/**
 * A POST with `Expect: 100-continue` on a raw socket: the body is sent only once `100 Continue` came.
 * Returns the status lines received, in order, and whether the server closed the connection.
 */
async function expectContinue(port: number, path: string, token: string, body: string, type = 'application/json') {
  const socket = connect(port, '127.0.0.1')
  let text = ''
  let sent = false
  let closed = false
  socket.on('error', () => {})
  socket.on('close', () => (closed = true))
  socket.on('data', (d) => {
    text += d.toString('latin1')
    if (!sent && text.startsWith('HTTP/1.1 100 ')) {
      sent = true
      socket.write(body)
    }
  })
  socket.write(
    `POST ${path} HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\ncontent-type: ${type}\r\n` +
      `content-length: ${Buffer.byteLength(body)}\r\nexpect: 100-continue\r\n\r\n`,
  )
  const end = Date.now() + 15_000
  while (!closed && (text.match(/HTTP\/1\.1 [2-5]\d\d/g) ?? []).length < 1 && Date.now() < end) await new Promise((r) => setTimeout(r, 25))
  await new Promise((r) => setTimeout(r, 100))
  socket.destroy()
  return { statuses: [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1])), sent, closed }
}

const NAMES = ['hono', 'express', 'fastify'] as const
type Server = Awaited<ReturnType<typeof startServer>>

/**
 * The three servers, started side by side before any test (a start under tsx takes seconds; side by side
 * the starts use both cores), and none while another one's tests run, which would load the machine.
 */
const servers = new Map<string, Server>()
let token: string
beforeAll(async () => {
  const started = await Promise.allSettled(NAMES.map((name) => startServer(name)))
  for (const [i, s] of started.entries()) if (s.status === 'fulfilled') servers.set(NAMES[i]!, s.value)
  const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected')
  if (failed) throw failed.reason
  token = await sign('1')
}, 120_000)
afterAll(async () => {
  await Promise.all([...servers.values()].map((s) => s.stop()))
})

describe.each(NAMES)('the %s reference server (its own process)', (name) => {
  let server: Server
  beforeAll(() => {
    server = servers.get(name)!
  })

  it("answers 40 POST /board of 5 MiB (over its 2 MiB JSON limit) from Node's http client with 413, none with EPIPE", async () => {
    expect(await floodOfEarlyAnswers(server.port, '/board', { headers: { authorization: `Bearer ${token}` } })).toEqual({
      '413 too-large': 40,
    })
  })

  it('answers the JSON group and the binary group the same way: 413 and 401 before a 5 MiB body was read reach every client', async () => {
    const outcomes = {
      'JSON group, 413': await floodOfEarlyAnswers(server.port, '/api/storage/attach/demo/1', {
        headers: { authorization: `Bearer ${token}` },
      }),
      'JSON group, 401': await floodOfEarlyAnswers(server.port, '/api/storage/attach/demo/1'),
      'board, 401': await floodOfEarlyAnswers(server.port, '/board', { headers: { authorization: 'Bearer nope' } }),
      'binary group, 413': await floodOfEarlyAnswers(server.port, '/assets/storage/attach/download'),
      // Connection: close (a new connection per request): the body is still read before the close.
      'board, 413, Connection: close': await floodOfEarlyAnswers(server.port, '/board', {
        headers: { authorization: `Bearer ${token}` },
        agent: false,
        count: 20,
      }),
    }
    expect(outcomes).toEqual({
      'JSON group, 413': { '413 too-large': 40 },
      'JSON group, 401': { '401 unauthorized': 40 },
      'board, 401': { '401 unauthorized': 40 },
      'binary group, 413': { '413 too-large': 40 },
      'board, 413, Connection: close': { '413 too-large': 20 },
    })
  })

  it('sends 100 Continue only after authentication: a bad token gets 401 alone, a good one 100 then the answer', async () => {
    const multipart =
      '--b\r\nContent-Disposition: form-data; name="refDomain"\r\n\r\ndemo\r\n' +
      '--b\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nhello\r\n--b--\r\n'
    const post = JSON.stringify({ title: 'continued' })
    // Each on its own connection, all at once: each waits 100 ms after its answer for a close.
    const asked = {
      'board, bad token': expectContinue(server.port, '/board', 'bad', post),
      'board, good token': expectContinue(server.port, '/board', token, post),
      'save, bad token': expectContinue(server.port, '/api/storage/attach/demo/1', 'bad', '{}'),
      'save, good token': expectContinue(server.port, '/api/storage/attach/demo/1', token, '{}'),
      'upload, bad token': expectContinue(server.port, '/api/storage/attach/tmp', 'bad', multipart, 'multipart/form-data; boundary=b'),
      'upload, good token': expectContinue(server.port, '/api/storage/attach/tmp', token, multipart, 'multipart/form-data; boundary=b'),
    }
    const seen = Object.fromEntries(await Promise.all(Object.entries(asked).map(async ([k, p]) => [k, await p] as const)))
    expect(seen).toEqual({
      'board, bad token': { statuses: [401], sent: false, closed: true },
      'board, good token': { statuses: [100, 201], sent: true, closed: false },
      'save, bad token': { statuses: [401], sent: false, closed: true },
      'save, good token': { statuses: [100, 200], sent: true, closed: false },
      'upload, bad token': { statuses: [401], sent: false, closed: true },
      'upload, good token': { statuses: [100, 200], sent: true, closed: false },
    })
  })
})
