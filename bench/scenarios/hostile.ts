/**
 * 9. Hostile requests against the reference server. First what each big body costs the server in memory:
 * a 60 MB JSON body to `POST /board` (with its Content-Length, and chunked without one), and three
 * multipart uploads of 100 text parts of 1 MiB each; each must be refused (413 / 400) with the server's
 * peak RSS growth at most 16 MiB. Then a row per finding of issue 20 (hostile-bounds.ts,
 * hostile-ops.ts), each with the server's event-loop delay while it runs (bench/lib/loop-probe.ts).
 */
import http from 'node:http'
import { HostileServer } from '../lib/hostile-kit.js'
import { PeakMemory } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { judge, MiB, type Context } from '../lib/report.js'
import { early413Rows, quotaRows, resizeRows, saveEntriesRows, scratch, variantCountRow, zipRows } from './hostile-bounds.js'
import { opsRows } from './hostile-ops.js'

/** Sends `size` bytes of `chunk` repeated as the body; resolves with the status once answered. */
function send(
  url: string,
  headers: Record<string, string>,
  parts: { head: Buffer; chunk: Buffer; count: number; tail: Buffer },
  withLength: boolean,
): Promise<number> {
  const length = parts.head.length + parts.chunk.length * parts.count + parts.tail.length
  return new Promise<number>((resolve, reject) => {
    const req = http.request(url, {
      method: 'POST',
      headers: { ...headers, ...(withLength ? { 'content-length': String(length) } : { 'transfer-encoding': 'chunked' }) },
      agent: false,
    })
    let answered = false
    req.on('response', (res) => {
      answered = true
      res.resume()
      res.on('end', () => resolve(res.statusCode ?? 0))
    })
    // The server may answer and close before the whole body went out: that is the point.
    req.on('error', (err) => (answered ? undefined : reject(err)))
    let i = 0
    const pump = () => {
      if (!req.writable || answered) return
      if (i === 0 && !req.write(parts.head)) {
        req.once('drain', () => {
          i = 1
          pump()
        })
        return
      }
      if (i === 0) i = 1
      while (i <= parts.count) {
        i++
        if (!req.write(parts.chunk)) return void req.once('drain', pump)
        if (answered) return
      }
      req.end(parts.tail)
    }
    pump()
  })
}

export async function hostileBench(ctx: Context): Promise<void> {
  await bodyMemoryRows(ctx)
  // HOSTILE_ONLY=1,3 runs only those findings' rows (a rerun of noisy rows).
  const only = process.env.HOSTILE_ONLY?.split(',').map((x) => x.trim())
  const want = (n: string) => !only || only.includes(n)
  const { dir, done } = await scratch(ctx)
  const hs = new HostileServer(ctx)
  try {
    // The noise floor: the same probe on the idle server (other processes share the cores).
    await hs.row('0 idle server, 3 s (the floor on this machine)', 'nothing', async () => {
      await new Promise((r) => setTimeout(r, 3000))
      return { value: 'no request' }
    })
    if (want('1')) await saveEntriesRows(ctx, hs, dir)
    if (want('3')) await zipRows(ctx, hs, dir)
    if (want('4')) await resizeRows(ctx, hs, dir)
    if (want('4')) await variantCountRow(ctx, hs, dir)
    if (want('5')) await quotaRows(ctx, hs)
    if (want('8')) await early413Rows(ctx, hs)
    await hs.stop()
    await opsRows(ctx, hs, dir, want)
  } finally {
    await hs.stop()
    await done()
  }
}

async function bodyMemoryRows(ctx: Context): Promise<void> {
  if (process.env.HOSTILE_ONLY) return
  const server = await startReference(ctx.work, 100 * MiB)
  try {
    const auth = { authorization: `Bearer ${server.bearer}` }
    const jsonBody = { head: Buffer.from('{"title":"big","body":"'), chunk: Buffer.alloc(MiB, 'x'), count: 60, tail: Buffer.from('"}') }
    const boundary = 'hostileboundary'
    const field = (i: number) =>
      Buffer.concat([
        Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="f${i}"\r\n\r\n`),
        Buffer.alloc(MiB, 'y'),
        Buffer.from('\r\n'),
      ])
    const cases: Array<{ figure: string; run: () => Promise<number[]> }> = [
      {
        figure: 'POST /board, 60 MB JSON with Content-Length',
        run: async () => [await send(`${server.base}/board`, { ...auth, 'content-type': 'application/json' }, jsonBody, true)],
      },
      {
        figure: 'POST /board, 60 MB JSON chunked',
        run: async () => [await send(`${server.base}/board`, { ...auth, 'content-type': 'application/json' }, jsonBody, false)],
      },
      {
        figure: '3 multipart uploads of 100 text parts of 1 MiB',
        run: async () => {
          const parts = {
            head: Buffer.from(`--${boundary}\r\ncontent-disposition: form-data; name="refDomain"\r\n\r\ndemo\r\n`),
            chunk: field(0),
            count: 100,
            tail: Buffer.from(`--${boundary}--\r\n`),
          }
          const headers = { ...auth, 'content-type': `multipart/form-data; boundary=${boundary}` }
          return Promise.all([0, 1, 2].map(() => send(`${server.base}/api/storage/attach/tmp`, headers, parts, false)))
        },
      },
    ]
    for (const c of cases) {
      ctx.log(`hostile: ${c.figure}`)
      const probe = new PeakMemory(server.pid)
      probe.start()
      const statuses = await c.run()
      const mem = probe.stop()
      const refused = statuses.every((s) => s === 413 || s === 400)
      ctx.add({
        scenario: 'hostile',
        figure: c.figure,
        subject: 'attach-storage (reference server)',
        value: `answered ${statuses.join(', ')}`,
        rss: mem.growth,
        target: 'refused, RSS+ <= 16 MiB',
        status: refused ? judge(mem.growth / MiB, '<=', 16) : 'MISSED',
      })
    }
  } finally {
    await server.stop()
  }
}
