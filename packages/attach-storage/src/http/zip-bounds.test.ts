/**
 * The bounds of a ZIP download, through a real `node:http` server and real clients: ids de-duplicated,
 * at most `zip.concurrency` archives streaming (503 `busy` with `Retry-After` past them, counted before
 * the first await), a slot freed as soon as its client goes away, `zip.max-bytes` (413 `too-large`
 * before anything streams), and a client that reads nothing holds the writer after a bounded amount.
 */
import { randomBytes } from 'node:crypto'
import { type ClientRequest, type IncomingMessage, request as httpRequest } from 'node:http'
import type { Readable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import * as zipMedia from '../media/zip.js'
import { nodeBodyOf } from './node-body.js'
import { type NodeUpstream, serveOnNode } from '../testing/front-servers.js'
import { type Kit, makeKit, saveFile } from '../testing/handler-kit.js'

const ASSETS = '/assets/storage'
const MB = 1024 * 1024
/** A 20 MB text file that deflates about a thousand to one: the amplification case. */
const LOG = Buffer.from(
  '2026-11-27 08:30:00 INFO the same line of a very repetitive log file\n'.repeat(Math.ceil((20 * MB) / 69)),
).subarray(0, 20 * MB)
const wait = (ms: number) => new Promise((r) => setTimeout(r, ms))

interface Answer {
  req: ClientRequest
  res: IncomingMessage
}

describe('ZIP bounds through a real server', () => {
  let kit: Kit
  let server: NodeUpstream
  /** The ZIP streams the handler answered, in order. */
  const zips: Readable[] = []
  let log: { id: number; savedDir: string; savedName: string }
  /** Fifteen records of the one 20 MB log file (itself and fourteen reuses): 300 MB of input. */
  let logs: number[] = []
  let noise: { id: number }
  const open: ClientRequest[] = []

  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: { zip: { concurrency: 4, maxBytes: '300MB' } } })
    server = await serveOnNode(async (request) => {
      const response = await kit.handler.fetch(request)
      const stream = nodeBodyOf(response)
      if (stream) zips.push(stream)
      return response
    })
    log = await saveFile(kit, new Blob([LOG], { type: 'text/plain' }), 'server.log', '1')
    // Random bytes do not deflate: a client that reads nothing fills its socket with them.
    noise = await saveFile(kit, new Blob([randomBytes(24 * MB)]), 'noise.bin', '2')
    const reuse = Array.from({ length: 14 }, (_, i) => ({ savedName: log.savedName, savedDir: log.savedDir, displayName: `copy-${i}.log` }))
    const res = await kit.call('/api/storage/attach/demo/3', { method: 'POST', body: JSON.stringify({ default: reuse }) })
    expect(res.status).toBe(200)
    logs = [log.id, ...(await res.json()).attachList.map((r: { id: number }) => r.id)]
    expect(logs).toHaveLength(15)
  }, 120_000)
  afterAll(async () => {
    for (const req of open) req.destroy()
    await server?.stop()
    await kit?.cleanup()
  })

  /**
   * A ZIP request on its own connection, its headers sent; `send()` sends the body and resolves at the
   * status line, reading nothing of the answer's body.
   */
  const prepare = async (ids: number[]): Promise<{ send(): Promise<Answer> }> => {
    const body = JSON.stringify({ ids })
    const req = httpRequest(`${server.url}${ASSETS}/attach/download`, {
      method: 'POST',
      agent: false,
      headers: { 'content-type': 'application/json', 'content-length': String(Buffer.byteLength(body)) },
    })
    open.push(req)
    const answer = new Promise<Answer>((resolve, reject) => {
      req.once('error', reject)
      req.once('response', (res) => resolve({ req, res }))
    })
    req.flushHeaders()
    await new Promise<void>((resolve) => req.once('socket', (s) => (s.connecting ? s.once('connect', () => resolve()) : resolve())))
    return {
      send() {
        req.end(body)
        return answer
      },
    }
  }
  const post = async (ids: number[]): Promise<Answer> => (await prepare(ids)).send()
  const read = async (res: IncomingMessage): Promise<Buffer> => {
    const chunks: Buffer[] = []
    for await (const c of res) chunks.push(c as Buffer)
    return Buffer.concat(chunks)
  }
  const json = async (res: IncomingMessage) => JSON.parse((await read(res)).toString())
  /** Entries of an archive, from its end-of-central-directory record. */
  const entries = (zip: Buffer) => zip.readUInt16LE(zip.length - 22 + 10)

  it('de-duplicates ids: 25 copies of one id make one entry', async () => {
    const cpu = process.cpuUsage()
    const { res } = await post(Array.from({ length: 25 }, () => log.id))
    expect(res.statusCode).toBe(200)
    const zip = await read(res)
    const used = process.cpuUsage(cpu)
    console.log(
      `ZIP of {ids: [id x 25]} (${JSON.stringify({ ids: Array.from({ length: 25 }, () => log.id) }).length} request bytes): ${zip.length} bytes, ` +
        `${(zipMedia.zipProgress?.(zips.at(-1)!)?.read ?? Number.NaN) / MB} MB deflated, ${((used.user + used.system) / 1000).toFixed(0)} ms CPU`,
    )
    expect(entries(zip)).toBe(1)
  }, 60_000)

  it('streams exactly zip.concurrency (4) of 40 simultaneous ZIPs; the rest answer 503 busy with Retry-After', async () => {
    // Forty connections open with their headers sent; the bodies leave together, so every request
    // reaches the service before the first one's awaits are done.
    const prepared = await Promise.all(Array.from({ length: 40 }, () => prepare([noise.id])))
    const answers = await Promise.all(prepared.map((p) => p.send()))
    const streaming = answers.filter((a) => a.res.statusCode === 200)
    const refused = answers.filter((a) => a.res.statusCode !== 200)
    console.log(`40 ZIP requests at once: ${streaming.length} x 200, ${refused.length} x 503`)
    expect(streaming).toHaveLength(4)
    for (const { res } of refused) {
      expect(res.statusCode).toBe(503)
      expect(res.headers['retry-after']).toMatch(/^\d+$/)
      const body = await json(res)
      expect(body.code).toBe('busy')
      expect(typeof body.message).toBe('string')
    }
    // Still held (their clients read nothing): one more is refused too.
    await wait(200)
    const again = await post([noise.id])
    expect(again.res.statusCode).toBe(503)
    await read(again.res)

    // A client that goes away frees its slot at once: the next request streams.
    streaming[0]!.req.destroy()
    const started = performance.now()
    let next: Answer
    for (;;) {
      next = await post([noise.id])
      if (next.res.statusCode === 200 || performance.now() - started > 2000) break
      await read(next.res)
      await wait(10)
    }
    expect(next.res.statusCode).toBe(200)
    expect(performance.now() - started).toBeLessThan(500)
    // The archive it streams is whole once read.
    expect(entries(await read(next.res))).toBe(1)
    for (const { req } of streaming) req.destroy()
    await wait(100)
  }, 60_000)

  it('takes the slot before the first await: 40 calls in one tick, 4 streams, 36 busy', async () => {
    const access = { user: null, request: null }
    const settled = await Promise.allSettled(Array.from({ length: 40 }, () => kit.storage.zip({ ids: [noise.id] }, access)))
    const streams = settled.flatMap((s) => (s.status === 'fulfilled' ? [s.value.stream] : []))
    const refused = settled.flatMap((s) => (s.status === 'rejected' ? [s.reason] : []))
    expect(streams).toHaveLength(4)
    expect(refused).toHaveLength(36)
    for (const err of refused) expect(err).toMatchObject({ code: 'busy', status: 503 })
    // A stream destroyed (its reader gone) frees its slot; the others still hold theirs.
    streams[0]!.destroy()
    await new Promise((r) => streams[0]!.once('close', r))
    const next = await kit.storage.zip({ ids: [noise.id] }, access)
    await expect(kit.storage.zip({ ids: [noise.id] }, access)).rejects.toMatchObject({ code: 'busy' })
    for (const s of [...streams, next.stream]) s.destroy()
    await wait(50)
    // All free again: a failed preparation (every id unknown: 404) gives its slot back too.
    for (let i = 0; i < 6; i++) await expect(kit.storage.zip({ ids: [99_999_999] }, access)).rejects.toMatchObject({ code: 'not-found' })
    const last = await kit.storage.zip({ ids: [log.id] }, access)
    last.stream.destroy()
  })

  it('answers 413 too-large before streaming when the files add up past zip.max-bytes', async () => {
    // 15 x 20 MB = 300 MB: at the limit, allowed. One 24 MB file more: past it.
    const { res } = await post([...logs, noise.id])
    expect(res.statusCode).toBe(413)
    expect(res.headers['content-type']).toContain('application/json')
    const body = await json(res)
    expect(body.code).toBe('too-large')
    expect(body.message).toContain(`at most ${300 * MB}`)
  })

  it('holds the writer while its client reads nothing: the deflated input stays bounded (300 MB asked)', async () => {
    const before = zips.length
    const cpu = process.cpuUsage()
    const { req, res } = await post(logs)
    expect(res.statusCode).toBe(200)
    const stream = zips[before]!
    const readSoFar = () => zipMedia.zipProgress?.(stream)?.read ?? Number.NaN
    // Until the writer has read nothing more for half a second (or 15 s have passed).
    const started = performance.now()
    let last = -1
    while (readSoFar() !== last && performance.now() - started < 15_000) {
      last = readSoFar()
      await wait(500)
    }
    const progress = zipMedia.zipProgress?.(stream)
    const used = process.cpuUsage(cpu)
    console.log(
      `ZIP of 15 x 20 MB, client reads nothing: ${((used.user + used.system) / 1000).toFixed(0)} ms CPU in ` +
        `${((performance.now() - started) / 1000).toFixed(1)} s; writer read ${((progress?.read ?? Number.NaN) / MB).toFixed(1)} MB, ` +
        `wrote ${((progress?.written ?? Number.NaN) / MB).toFixed(2)} MB`,
    )
    expect(progress).toBeDefined()
    // Held far short of the 300 MB asked, within 16 x what was written plus 8 MiB.
    expect(progress!.read).toBeLessThan(120 * MB)
    expect(progress!.read).toBeLessThanOrEqual(16 * progress!.written + 8 * MB + MB)
    // Reading it now gets the whole archive.
    const zip = await read(res)
    expect(entries(zip)).toBe(15)
    expect(zipMedia.zipProgress?.(stream)?.read).toBe(300 * MB)
    req.destroy()
  }, 60_000)
})
