/**
 * The S3 store's agents on real loopback servers (node:http and node:https with a self-signed
 * certificate made for these tests): every byte arrives, in order, through reads into one buffer per
 * connection, with a slow reader, keep-alive reuse, bodies of every framing, and a connection cut in the
 * middle of a body; a long body's reads taken from the HTTP client and written into a destination.
 */
import { createHash, randomBytes } from 'node:crypto'
import http from 'node:http'
import https from 'node:https'
import type { AddressInfo } from 'node:net'
import { Writable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { type WritesInto, writeInto } from 'attach-storage/store-kit'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { S3Store } from './index.js'
import { LEND_FROM_BYTES, lendingBody } from './lent-bodies.js'
import { READ_BUFFER_BYTES, ReadBufferHttpAgent, ReadBufferHttpsAgent } from './read-buffer-agents.js'
import { startS3rver, type TestS3Server } from './test-server.js'

/** A certificate for 127.0.0.1 and localhost, valid until 2126, made for these tests alone. */
const CERT = `-----BEGIN CERTIFICATE-----
MIIBnDCCAUGgAwIBAgIULXTgFYIe6KBPBjBYZkJdunJBSGIwCgYIKoZIzj0EAwIw
FDESMBAGA1UEAwwJbG9jYWxob3N0MCAXDTI2MTEyOTE3MTc0NVoYDzIxMjYxMTA1
MTcxNzQ1WjAUMRIwEAYDVQQDDAlsb2NhbGhvc3QwWTATBgcqhkjOPQIBBggqhkjO
PQMBBwNCAATxbJay70TGJr6ggkQ2gfmppr7dTsYVsLt/YncbT8K7OZYR3cMiahcg
TH09PXIbxmv3RB98lccJH6H/CIgtibD5o28wbTAdBgNVHQ4EFgQUGABS0OuLk6cf
aF5J8XRPT8Pd+mkwHwYDVR0jBBgwFoAUGABS0OuLk6cfaF5J8XRPT8Pd+mkwDwYD
VR0TAQH/BAUwAwEB/zAaBgNVHREEEzARhwR/AAABgglsb2NhbGhvc3QwCgYIKoZI
zj0EAwIDSQAwRgIhANZ74oeLseLp7srSx4GKzEK38Ug/lVn3wii350Y2uQwZAiEA
0f42+282dHB00dXEUQDnBKcXSrEJiq6uQ+cCRrfc8ns=
-----END CERTIFICATE-----`
const KEY = `-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgjNbK5zE/P92Hz7IP
8pa9Z/hHcGBU7xWgrMdAOA8Gjz+hRANCAATxbJay70TGJr6ggkQ2gfmppr7dTsYV
sLt/YncbT8K7OZYR3cMiahcgTH09PXIbxmv3RB98lccJH6H/CIgtibD5
-----END PRIVATE KEY-----`

const MiB = 1024 * 1024
const BODY = randomBytes(6 * MiB + 12_345)
const LONG = randomBytes(LEND_FROM_BYTES + 3 * MiB + 17)
const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex')

/** What the test servers answer, by path. */
function answer(req: http.IncomingMessage, res: http.ServerResponse): void {
  const path = req.url ?? '/'
  if (path === '/body' || path === '/long') {
    // In pieces of uneven sizes, so reads end anywhere in the body.
    const body = path === '/body' ? BODY : LONG
    res.writeHead(200, { 'content-length': String(body.length) })
    let at = 0
    const next = () => {
      while (at < body.length) {
        const end = Math.min(body.length, at + 1000 + ((at * 7919) % 300_000))
        const more = res.write(body.subarray(at, end))
        at = end
        if (!more) return void res.once('drain', next)
      }
      res.end()
    }
    next()
  } else if (path === '/chunked') {
    res.writeHead(200, { 'content-type': 'application/octet-stream' })
    res.write(BODY.subarray(0, 3 * MiB))
    setImmediate(() => res.end(BODY.subarray(3 * MiB)))
  } else if (path.startsWith('/small/')) {
    const n = Number(path.slice(7))
    res.writeHead(200, { 'content-length': String(n) }).end(BODY.subarray(0, n))
  } else if (path === '/empty') {
    res.writeHead(204).end()
  } else if (path === '/cut') {
    res.writeHead(200, { 'content-length': String(BODY.length) })
    res.write(BODY.subarray(0, 2 * MiB), () => setTimeout(() => res.socket?.destroy(), 20))
  } else {
    res.writeHead(404).end()
  }
}

type Get = (
  path: string,
  options?: { method?: string; slow?: boolean },
) => Promise<{ status: number; body: Buffer; reused: boolean; reads: Set<ArrayBufferLike> }>

/** GETs through `agent` on `base`; `reads` are the buffers the socket's `data` listeners were given. */
function getter(base: string, agent: http.Agent, request: typeof http.request): Get {
  return (path, options = {}) =>
    new Promise((resolve, reject) => {
      const reads = new Set<ArrayBufferLike>()
      const req = request(`${base}${path}`, { agent, method: options.method ?? 'GET', ca: CERT } as https.RequestOptions, (res) => {
        const parts: Buffer[] = []
        let since = 0
        res.on('data', (part: Buffer) => {
          parts.push(part)
          since += part.length
          // A slow reader: a pause of 5 ms after each MiB, so the socket is paused and resumed mid-body.
          if (options.slow && since >= MiB) {
            since = 0
            res.pause()
            setTimeout(() => res.resume(), 5)
          }
        })
        res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(parts), reused: req.reusedSocket, reads }))
        res.on('aborted', () => reject(new Error('aborted')))
        res.on('error', reject)
      })
      req.on('socket', (socket) => {
        const seen = (d: Buffer) => reads.add(d.buffer)
        socket.on('data', seen)
        req.once('close', () => socket.off('data', seen))
      })
      req.on('error', reject)
      req.end()
    })
}

for (const [scheme, Agent] of [
  ['http', ReadBufferHttpAgent],
  ['https', ReadBufferHttpsAgent],
] as const) {
  describe(`${Agent.name} on a node:${scheme} server`, () => {
    let server: http.Server
    let agent: http.Agent
    let get: Get
    let base: string
    beforeAll(async () => {
      server = scheme === 'http' ? http.createServer(answer) : https.createServer({ cert: CERT, key: KEY }, answer)
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
      agent = new Agent()
      base = `${scheme}://127.0.0.1:${(server.address() as AddressInfo).port}`
      get = getter(base, agent, scheme === 'http' ? http.request : https.request)
    })
    afterAll(async () => {
      agent.destroy()
      server.closeAllConnections()
      await new Promise((resolve) => server.close(resolve))
    })

    it('keeps connections alive, at most 50 of them, as the SDK does', () => {
      expect((agent as http.Agent & { keepAlive: boolean }).keepAlive).toBe(true)
      expect(agent.maxSockets).toBe(50)
      expect(new Agent({ maxSockets: 4 }).maxSockets).toBe(4)
    })

    it('delivers every byte of a 6 MiB body in order, every read in the one buffer of the connection', async () => {
      const r = await get('/body')
      expect(r.status).toBe(200)
      expect(r.body.length).toBe(BODY.length)
      expect(sha(r.body)).toBe(sha(BODY))
      expect(r.reads.size).toBe(1)
      expect([...r.reads][0]!.byteLength).toBe(READ_BUFFER_BYTES)
    })

    it('delivers every byte to a reader that pauses, and reuses the connection for the next request', async () => {
      const first = await get('/body', { slow: true })
      expect(sha(first.body)).toBe(sha(BODY))
      const second = await get('/chunked', { slow: true })
      expect(second.reused).toBe(true)
      expect(sha(second.body)).toBe(sha(BODY))
    })

    it('answers 40 keep-alive requests of every size, a HEAD and a 204 on the same connections', async () => {
      for (let i = 0; i < 40; i++) {
        const n = [0, 1, 17, 65_535, 65_536, 65_537, READ_BUFFER_BYTES - 1, READ_BUFFER_BYTES + 1][i % 8]!
        const r = await get(`/small/${n}`)
        expect(r.status).toBe(200)
        expect(r.body.equals(BODY.subarray(0, n))).toBe(true)
      }
      const head = await get('/body', { method: 'HEAD' })
      expect(head).toMatchObject({ status: 200, reused: true })
      expect(head.body.length).toBe(0)
      expect(await get('/empty')).toMatchObject({ status: 204, reused: true })
      expect(await get('/nothing')).toMatchObject({ status: 404 })
    })

    it('writes a long body from the connection buffers into a destination slower than the reads', async () => {
      const requester = scheme === 'http' ? http.request : https.request
      const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
        requester(`${base}/long`, { agent, ca: CERT } as https.RequestOptions, resolve)
          .on('error', reject)
          .end()
      })
      const body = lendingBody(res, Number(res.headers['content-length']))
      const into = (body as Partial<WritesInto>)[writeInto]
      expect(typeof into).toBe('function')
      const parts: Buffer[] = []
      const buffers = new Set<ArrayBufferLike>()
      let writes = 0
      const sink = new Writable({
        highWaterMark: 1024,
        write(chunk: Buffer, _enc, cb) {
          buffers.add(chunk.buffer)
          // The copy is made when the callback runs: a buffer filled again before it would show.
          const keep = () => {
            parts.push(Buffer.from(chunk))
            cb()
          }
          if (++writes % 2 === 0) setTimeout(keep, 2)
          else setImmediate(keep)
        },
      })
      await into!.call(body, sink)
      expect(sha(Buffer.concat(parts))).toBe(sha(LONG))
      const lent = [...buffers].filter((b) => b.byteLength === READ_BUFFER_BYTES)
      expect(lent.length).toBeGreaterThanOrEqual(2)
      expect(lent.length).toBeLessThanOrEqual(4)
      // The connection is closed after the body: the next request goes on a new one.
      expect((await get('/small/1000')).reused).toBe(false)
    })

    it('fails a body whose connection is cut, and serves the next request on a new connection', async () => {
      await expect(get('/cut')).rejects.toThrow(/aborted|socket hang up|ECONNRESET/)
      await sleep(10)
      const r = await get('/small/1000')
      expect(r.body.equals(BODY.subarray(0, 1000))).toBe(true)
    })
  })
}

describe('S3Store reads through its agents', () => {
  let s3: TestS3Server
  beforeAll(async () => {
    s3 = await startS3rver()
  })
  afterAll(async () => {
    await s3?.close()
  })

  it('streams a stored object of 5 MiB through a ReadBufferHttpAgent connection, whole and in ranges', async () => {
    const store = new S3Store('s3', s3.settings as never)
    const connect = vi.spyOn(ReadBufferHttpAgent.prototype, 'createConnection')
    try {
      const bytes = randomBytes(5 * MiB + 3)
      await store.put('agents/five', bytes)
      const whole: Buffer[] = []
      for await (const part of await store.get('agents/five')) whole.push(part as Buffer)
      expect(sha(Buffer.concat(whole))).toBe(sha(bytes))
      const parts: Buffer[] = []
      for await (const part of await store.get('agents/five', { start: MiB, end: 4 * MiB - 1 })) parts.push(part as Buffer)
      expect(Buffer.concat(parts).equals(bytes.subarray(MiB, 4 * MiB))).toBe(true)
      expect(connect).toHaveBeenCalled()
    } finally {
      connect.mockRestore()
      await store.close()
    }
  })
})
