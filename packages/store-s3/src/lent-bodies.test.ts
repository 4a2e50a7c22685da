/**
 * Large GetObject bodies written into a destination from the connection's own buffers (`writeInto`), on
 * s3rver: every byte in order into a destination that holds each chunk a while before its callback (so a
 * buffer filled again too early would show), no new buffer per read, ranges, short bodies piped as
 * before, a destination that fails, a connection cut half way, and views through the Node fast path.
 */
import { createHash, randomBytes } from 'node:crypto'
import http from 'node:http'
import { mkdtemp, rm } from 'node:fs/promises'
import { type AddressInfo, createServer, type Server, Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import { createAttachHandler, createAttachStorage, openDatabase } from 'attach-storage'
import { createFastViews, createNodeHandler } from 'attach-storage/node'
import { type WritesInto, writeInto } from 'attach-storage/store-kit'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { S3Store } from './index.js'
import { LEND_FROM_BYTES } from './lent-bodies.js'
import { READ_BUFFER_BYTES } from './read-buffer-agents.js'
import { startS3rver, type TestS3Server } from './test-server.js'

const MiB = 1024 * 1024
const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')
const BIG = randomBytes(20 * MiB + 4321)

/**
 * A destination that keeps a copy of each chunk made when its callback runs, after `delay` ms every
 * few chunks: a buffer the source fills again before that callback changes what is kept.
 */
class SlowSink extends Writable {
  readonly parts: Buffer[] = []
  readonly buffers = new Set<ArrayBufferLike>()
  writes = 0
  constructor(
    readonly delay = 2,
    readonly failAfter = Number.POSITIVE_INFINITY,
  ) {
    super({ highWaterMark: 16 * 1024 })
  }
  override _write(chunk: Buffer, _enc: BufferEncoding, cb: (err?: Error | null) => void): void {
    this.buffers.add(chunk.buffer)
    this.writes++
    const keep = () => {
      this.parts.push(Buffer.from(chunk))
      if (this.bytes > this.failAfter) cb(new Error('the destination failed'))
      else cb()
    }
    if (this.writes % 3 === 0) setTimeout(keep, this.delay)
    else setImmediate(keep)
  }
  get bytes(): number {
    return this.parts.reduce((n, p) => n + p.length, 0)
  }
  get body(): Buffer {
    return Buffer.concat(this.parts)
  }
}

/** A TCP relay in front of s3rver that can cut its connections after `cutAfter` bytes of answer. */
async function relay(target: number): Promise<{ port: number; cutAfter: number; server: Server; close(): Promise<void> }> {
  const sockets = new Set<Socket>()
  const state = {
    port: 0,
    cutAfter: Number.POSITIVE_INFINITY,
    server: createServer((client) => {
      const upstream = new Socket()
      sockets.add(client).add(upstream)
      let answered = 0
      upstream.connect(target, '127.0.0.1')
      client.pipe(upstream)
      upstream.on('data', (d: Buffer) => {
        answered += d.length
        if (answered > state.cutAfter) {
          client.destroy()
          upstream.destroy()
        } else client.write(d)
      })
      const end = () => {
        client.destroy()
        upstream.destroy()
      }
      client.on('error', end).on('close', end)
      upstream.on('error', end).on('close', end)
    }),
    close: async () => {
      for (const s of sockets) s.destroy()
      await new Promise((resolve) => state.server.close(resolve))
    },
  }
  await new Promise<void>((resolve) => state.server.listen(0, '127.0.0.1', resolve))
  state.port = (state.server.address() as AddressInfo).port
  return state
}
const intoOf = (stream: unknown) => (stream as Partial<WritesInto>)[writeInto]

describe('S3 GetObject bodies written from the connection buffers', () => {
  let s3: TestS3Server
  let store: S3Store
  beforeAll(async () => {
    s3 = await startS3rver()
    store = new S3Store('s3', s3.settings as never)
    await store.put('lent/big', BIG)
    await store.put('lent/small', BIG.subarray(0, LEND_FROM_BYTES - 1))
  })
  afterAll(async () => {
    await store?.close()
    await s3?.close()
  })

  it('writes every byte of 20 MiB in order into a slow destination, from a few buffers of the connection', async () => {
    const stream = await store.get('lent/big')
    const into = intoOf(stream)
    expect(typeof into).toBe('function')
    const sink = new SlowSink()
    await into!.call(stream, sink)
    expect(sink.writableFinished).toBe(true)
    expect(sink.bytes).toBe(BIG.length)
    expect(sha(sink.body)).toBe(sha(BIG))
    // The reads came as views of the connection's two buffers; the few others are what the HTTP client
    // had read before the body was taken from it.
    const lent = [...sink.buffers].filter((b) => b.byteLength === READ_BUFFER_BYTES)
    expect(lent.length).toBeGreaterThanOrEqual(2)
    expect(lent.length).toBeLessThanOrEqual(4)
    expect(sink.buffers.size).toBeLessThan(12)
    expect(sink.writes).toBeGreaterThan(40)
    // The store goes on: the next GetObject (on a new connection) reads as before.
    const again = new SlowSink(0)
    const next = await store.get('lent/big')
    await intoOf(next)!.call(next, again)
    expect(sha(again.body)).toBe(sha(BIG))
  })

  it('writes an exact range of 9 MiB, and the same body still reads as a plain stream', async () => {
    const range = { start: MiB + 7, end: 10 * MiB + 6 }
    const stream = await store.get('lent/big', range)
    const sink = new SlowSink()
    await intoOf(stream)!.call(stream, sink)
    expect(sink.body.equals(BIG.subarray(range.start, range.end + 1))).toBe(true)

    const plain = await store.get('lent/big', range)
    expect(typeof intoOf(plain)).toBe('function')
    const parts: Buffer[] = []
    for await (const part of plain) parts.push(part as Buffer)
    expect(Buffer.concat(parts).equals(BIG.subarray(range.start, range.end + 1))).toBe(true)
  })

  it('leaves a body shorter than 8 MiB, or a range that shorter, to a pipe on the kept-alive connection', async () => {
    expect(intoOf(await drained(store.get('lent/small')))).toBeUndefined()
    expect(intoOf(await drained(store.get('lent/big', { start: 0, end: LEND_FROM_BYTES - 2 })))).toBeUndefined()
  })

  it("pipes a body that came through other agents (a clientConfig's requestHandler) into the destination", async () => {
    const agent = new http.Agent({ keepAlive: true })
    const other = new S3Store('s3', { ...s3.settings, clientConfig: { requestHandler: { httpAgent: agent } } } as never)
    try {
      const stream = await other.get('lent/big')
      const sink = new SlowSink()
      await intoOf(stream)!.call(stream, sink)
      expect(sha(sink.body)).toBe(sha(BIG))
      // Node's own reads: a new buffer for each, none of the store's.
      expect([...sink.buffers].some((b) => b.byteLength === READ_BUFFER_BYTES)).toBe(false)
      expect(sink.buffers.size).toBeGreaterThan(40)
    } finally {
      await other.close()
      agent.destroy()
    }
  })

  it('rejects when the destination fails, and the store serves the next read', async () => {
    const stream = await store.get('lent/big')
    const sink = new SlowSink(1, 5 * MiB)
    await expect(intoOf(stream)!.call(stream, sink)).rejects.toThrow('the destination failed')
    const next = await store.get('lent/big')
    const ok = new SlowSink(0)
    await intoOf(next)!.call(next, ok)
    expect(sha(ok.body)).toBe(sha(BIG))
  })

  it('rejects, never finishing the destination, when the connection is cut half way through the body', async () => {
    const cut = await relay(s3.port)
    const via = new S3Store('s3', { ...s3.settings, endpoint: `http://127.0.0.1:${cut.port}` } as never)
    try {
      const stream = await via.get('lent/big')
      cut.cutAfter = 6 * MiB
      const sink = new SlowSink(0)
      await expect(intoOf(stream)!.call(stream, sink)).rejects.toThrow(/closed after \d+ of the body's 20975841 bytes/)
      expect(sink.writableFinished).toBe(false)
      expect(sink.bytes).toBeLessThan(BIG.length)
      cut.cutAfter = Number.POSITIVE_INFINITY
      const whole = await via.get('lent/big')
      const ok = new SlowSink(0)
      await intoOf(whole)!.call(whole, ok)
      expect(sha(ok.body)).toBe(sha(BIG))
    } finally {
      await via.close()
      await cut.close()
    }
  })
})

/** Reads a body to its end (so its connection goes back to the agent) and answers the stream. */
async function drained<T extends AsyncIterable<unknown>>(pending: Promise<T>): Promise<T> {
  const stream = await pending
  for await (const _ of stream) {
    // read through
  }
  return stream
}

describe('views of large S3 records through the Node fast path', () => {
  let s3: TestS3Server
  let dir: string
  let storage: Awaited<ReturnType<typeof createAttachStorage>>
  let db: Awaited<ReturnType<typeof openDatabase>>
  let server: http.Server
  let base: string

  beforeAll(async () => {
    s3 = await startS3rver()
    dir = await mkdtemp(join(tmpdir(), 'attach-s3-lent-'))
    db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
    storage = await createAttachStorage({
      config: {
        directory: { 'base-dir': join(dir, 'files'), 'tmp-dir': join(dir, 'tmp') },
        stores: { s3: s3.fileSettings() },
        'default-store': 's3',
        'tmp-store': 's3',
        domains: { demo: {} },
      },
      db,
      authenticate: () => ({ id: 7 }),
      logger: { info: () => {}, warn: () => {}, error: () => {} },
    })
    server = http.createServer(createNodeHandler(createAttachHandler(storage).fetch, { fast: createFastViews(storage) }))
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(async () => {
    server?.closeAllConnections()
    await new Promise((resolve) => server?.close(resolve))
    await storage?.close()
    await db?.destroy()
    await s3?.close()
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  /** Uploads and saves BIG as record `demo/<refKey>`; answers its id. */
  async function saved(refKey: string): Promise<number> {
    const form = new FormData()
    form.append('refDomain', 'demo')
    form.append('file', new Blob([new Uint8Array(BIG)]), 'big.bin')
    const up = await fetch(`${base}/api/storage/attach/tmp`, { method: 'POST', body: form })
    expect(up.status).toBe(200)
    const tmp = ((await up.json()) as { files: Array<Record<string, unknown>> }).files[0]!
    const res = await fetch(`${base}/api/storage/attach/demo/${refKey}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        refDomain: 'demo',
        default: [{ savedName: tmp.name, displayName: tmp.displayName, fileSize: tmp.size, fileType: tmp.type }],
      }),
    })
    expect(res.status).toBe(200)
    return ((await res.json()) as { attachList: Array<{ id: number }> }).attachList[0]!.id
  }

  /** GET through node:http, reading slowly when asked (a pause of 10 ms after each 512 KiB). */
  function get(
    path: string,
    headers: Record<string, string> = {},
    slow = false,
    origin = base,
  ): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: Buffer }> {
    return new Promise((resolve, reject) => {
      http
        .get(`${origin}${path}`, { headers, agent: false }, (res) => {
          const parts: Buffer[] = []
          let since = 0
          res.on('data', (d: Buffer) => {
            parts.push(d)
            since += d.length
            if (slow && since >= MiB / 2) {
              since = 0
              res.pause()
              setTimeout(() => res.resume(), 10)
            }
          })
          res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(parts) }))
          res.on('error', reject)
        })
        .on('error', reject)
    })
  }

  it('serves a 20 MiB view whole, to a slow reader, and a 12 MiB range, byte for byte', async () => {
    const id = await saved('70')
    const whole = await get(`/assets/storage/attach/view/${id}`)
    expect(whole.status).toBe(200)
    expect(whole.headers['content-length']).toBe(String(BIG.length))
    expect(sha(whole.body)).toBe(sha(BIG))
    const slow = await get(`/assets/storage/attach/view/${id}`, {}, true)
    expect(sha(slow.body)).toBe(sha(BIG))
    const ranged = await get(`/assets/storage/attach/view/${id}`, { range: 'bytes=1000-12583911' })
    expect(ranged.status).toBe(206)
    expect(ranged.headers['content-range']).toBe(`bytes 1000-12583911/${BIG.length}`)
    expect(ranged.body.equals(BIG.subarray(1000, 12_583_912))).toBe(true)
  })

  it('serves a download through the fast path and a view through the handlers (the Node bridge alone)', async () => {
    const id = await saved('72')
    const download = await get(`/assets/storage/attach/download/${id}`, {}, true)
    expect(download.status).toBe(200)
    expect(download.headers['content-disposition']).toContain('big.bin')
    expect(sha(download.body)).toBe(sha(BIG))
    const bridge = http.createServer(createNodeHandler(createAttachHandler(storage).fetch))
    await new Promise<void>((resolve) => bridge.listen(0, '127.0.0.1', resolve))
    try {
      const viaHandlers = await get(
        `/assets/storage/attach/view/${id}`,
        {},
        true,
        `http://127.0.0.1:${(bridge.address() as AddressInfo).port}`,
      )
      expect(viaHandlers.status).toBe(200)
      expect(sha(viaHandlers.body)).toBe(sha(BIG))
    } finally {
      bridge.closeAllConnections()
      await new Promise((resolve) => bridge.close(resolve))
    }
  })

  it('goes on serving after a client that leaves in the middle of a view', async () => {
    const id = await saved('71')
    await new Promise<void>((resolve, reject) => {
      const req = http.get(`${base}/assets/storage/attach/view/${id}`, { agent: false }, (res) => {
        let got = 0
        res.on('data', (d: Buffer) => {
          got += d.length
          if (got > 3 * MiB) {
            req.destroy()
            resolve()
          }
        })
      })
      req.on('error', (err) => (req.destroyed ? resolve() : reject(err)))
    })
    await sleep(50)
    const after = await get(`/assets/storage/attach/view/${id}`)
    expect(after.status).toBe(200)
    expect(sha(after.body)).toBe(sha(BIG))
  })
})
