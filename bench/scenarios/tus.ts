/**
 * Resumable upload (tus 1.0) of one large file (512 MiB; --quick: 16 MiB) in PATCH chunks of 8 MiB into
 * the reference server's local temporary store, against the multipart temporary upload of the same file
 * (each on its own server, so that each one's peak memory is its own). Then a resumed upload: the
 * connection is cut half way through a chunk, the client asks HEAD where the server stands and goes on
 * from there; the bytes sent twice must be no more than that one unacknowledged chunk.
 */
import { execFileSync } from 'node:child_process'
import { createReadStream } from 'node:fs'
import http from 'node:http'
import { join } from 'node:path'
import { bigFile, removeFiles } from '../lib/files.js'
import { median, mibps, request, uploadMultipart } from '../lib/http.js'
import { PeakMemory, type Server } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { fmtCpuPerGiB, fmtMiB, fmtRate, judge, MiB, target, type Context } from '../lib/report.js'

const CHUNK = 8 * MiB
const agent = new http.Agent({ keepAlive: true, maxSockets: 1 })

/** One PATCH of `[start, end)` of the file; `cutAfter` bytes into it, the connection is destroyed. */
function patch(
  url: string,
  headers: Record<string, string>,
  path: string,
  start: number,
  end: number,
  cutAfter?: number,
): Promise<{ status: number; offset: number; sent: number }> {
  return new Promise((resolve, reject) => {
    let sent = 0
    const req = http.request(
      url,
      {
        method: 'PATCH',
        agent: cutAfter === undefined ? agent : false,
        headers: {
          ...headers,
          'tus-resumable': '1.0.0',
          'content-type': 'application/offset+octet-stream',
          'upload-offset': String(start),
          'content-length': String(end - start),
        },
      },
      (res) => {
        res.resume()
        res.on('end', () => resolve({ status: res.statusCode ?? 0, offset: Number(res.headers['upload-offset']), sent }))
      },
    )
    req.on('error', (err) => (cutAfter === undefined ? reject(err) : resolve({ status: 0, offset: NaN, sent })))
    const body = createReadStream(path, { start, end: end - 1, highWaterMark: 1 * MiB })
    body.on('data', (chunk) => {
      sent += chunk.length
      if (cutAfter !== undefined && sent >= cutAfter) {
        body.destroy()
        req.destroy()
      }
    })
    body.pipe(req)
  })
}

/** A whole tus upload of `path` (creation, then PATCHes of CHUNK); answers its location, time and bytes sent. */
async function tusUpload(
  base: string,
  bearer: string,
  path: string,
  size: number,
  cut?: { chunk: number },
): Promise<{ location: string; seconds: number; sent: number; resumedAt?: number; acknowledged?: number }> {
  const headers = { authorization: `Bearer ${bearer}` }
  const started = performance.now()
  const meta = `filename ${Buffer.from('big.bin').toString('base64')},refDomain ${Buffer.from('demo').toString('base64')}`
  const created = await request(`${base}/api/storage/attach/tus`, {
    method: 'POST',
    headers: { ...headers, 'tus-resumable': '1.0.0', 'upload-length': String(size), 'upload-metadata': meta },
  })
  if (created.status !== 201) throw new Error(`tus creation answered ${created.status}: ${created.body?.toString()}`)
  const location = `${base}${created.headers.location}`
  let offset = 0
  let sent = 0
  let resumedAt: number | undefined
  let acknowledged: number | undefined
  for (let i = 0; offset < size; i++) {
    const end = Math.min(offset + CHUNK, size)
    if (cut && i === cut.chunk && resumedAt === undefined) {
      acknowledged = offset
      const r = await patch(location, headers, path, offset, end, Math.floor((end - offset) / 2))
      sent += r.sent
      const h = await request(location, { method: 'HEAD', headers: { ...headers, 'tus-resumable': '1.0.0' } })
      resumedAt = Number(h.headers['upload-offset'])
      offset = resumedAt
      continue
    }
    const r = await patch(location, headers, path, offset, end)
    if (r.status !== 204) throw new Error(`tus PATCH answered ${r.status}`)
    sent += r.sent
    offset = r.offset
  }
  return { location, seconds: (performance.now() - started) / 1000, sent, resumedAt, acknowledged }
}

export async function tusBench(ctx: Context): Promise<void> {
  const size = (Number(process.env.BENCH_UPLOAD_MIB) || (ctx.quick ? 16 : 512)) * MiB
  const reps = ctx.quick ? 1 : 3
  const figure = `tus upload ${fmtMiB(size).replace('.0 ', ' ')} (8 MiB PATCHes)`
  ctx.log(`tus: generating a ${fmtMiB(size)} file`)
  const file = await bigFile(ctx.work, size)
  const warmFile = await bigFile(ctx.work, 1 * MiB)
  const servers: Server[] = []
  try {
    const tusServer = await startReference(ctx.work, size + 64 * MiB, 'hono-app', 'attach-storage tus')
    servers.push(tusServer)
    const multipart = await startReference(ctx.work, size + 64 * MiB, 'hono-app', 'attach-storage multipart')
    servers.push(multipart)
    const tmpOf = (s: typeof tusServer) => join(s.dataDir, 'tmp')
    // Each measured upload is terminated afterwards (tus DELETE), as a client gives one up: it frees the
    // user's pending-upload quota (2 GB by default), which four 512 MiB uploads would fill.
    const terminate = async (location: string) => {
      const r = await request(location, {
        method: 'DELETE',
        headers: { authorization: `Bearer ${tusServer.bearer}`, 'tus-resumable': '1.0.0' },
      })
      if (r.status !== 204) throw new Error(`tus termination answered ${r.status}`)
    }
    const runTus = async (path: string, n: number) => {
      const r = await tusUpload(tusServer.base, tusServer.bearer, path, n)
      await terminate(r.location)
      return r.seconds
    }
    const runMultipart = async (path: string) => {
      const r = await uploadMultipart(
        `${multipart.base}/api/storage/attach/tmp`,
        { refDomain: 'demo', refCategory: 'default' },
        [{ field: 'file', path }],
        { authorization: `Bearer ${multipart.bearer}` },
      )
      if (r.status !== 200) throw new Error(`multipart upload answered ${r.status}`)
      return r.seconds
    }
    await runTus(warmFile, 1 * MiB)
    await runMultipart(warmFile)
    const probes = [new PeakMemory(tusServer.pid), new PeakMemory(multipart.pid)]
    for (const p of probes) p.start()
    const rates: number[][] = [[], []]
    for (let rep = 0; rep < reps; rep++) {
      ctx.log(`tus: run ${rep + 1}/${reps}`)
      execFileSync('sync')
      rates[0]!.push(mibps(size, await runTus(file, size)))
      await removeFiles(tmpOf(tusServer))
      execFileSync('sync')
      rates[1]!.push(mibps(size, await runMultipart(file)))
      await removeFiles(tmpOf(multipart))
    }
    const mem = probes.map((p) => p.stop())
    const rate = rates.map(median)
    const ratio = rate[0]! / rate[1]!
    ctx.add({
      scenario: 'tus',
      figure,
      subject: 'attach-storage (tus, local store)',
      value: fmtRate(rate[0]!),
      rss: mem[0]!.growth,
      cpu: fmtCpuPerGiB(mem[0]!.cpu, size * reps),
      target: 'RSS+ <= 64 MiB',
      status: judge(mem[0]!.growth / MiB, '<=', 64),
    })
    ctx.add({
      scenario: 'tus',
      figure,
      subject: 'attach-storage (multipart tmp upload)',
      value: fmtRate(rate[1]!),
      rss: mem[1]!.growth,
      cpu: fmtCpuPerGiB(mem[1]!.cpu, size * reps),
      ratio,
      target: target('>=', 0.8),
      status: judge(ratio, '>=', 0.8),
    })
    ctx.log(
      `tus: median of ${reps}; runs (MiB/s): tus ${rates[0]!.map((x) => x.toFixed(0)).join('/')}, multipart ${rates[1]!.map((x) => x.toFixed(0)).join('/')}`,
    )

    // A resumed upload: cut half way through the middle chunk, resumed from HEAD's offset.
    const chunks = Math.ceil(size / CHUNK)
    const r = await tusUpload(tusServer.base, tusServer.bearer, file, size, { chunk: Math.floor(chunks / 2) })
    const resent = r.sent - size
    const hash = await request(r.location, {
      method: 'HEAD',
      headers: { authorization: `Bearer ${tusServer.bearer}`, 'tus-resumable': '1.0.0' },
    })
    if (Number(hash.headers['upload-offset']) !== size) throw new Error('the resumed upload did not complete')
    await terminate(r.location)
    ctx.add({
      scenario: 'tus',
      figure: `resumed tus upload, cut in chunk ${Math.floor(chunks / 2) + 1} of ${chunks}`,
      subject: 'bytes sent twice',
      value: fmtMiB(Math.max(0, resent)),
      target: `<= ${fmtMiB(CHUNK)} (one chunk)`,
      status: judge(resent / MiB, '<=', CHUNK / MiB),
      note: `resumed at ${r.resumedAt} (acknowledged ${r.acknowledged})`,
    })
    await removeFiles(tmpOf(tusServer))
  } finally {
    for (const s of servers.reverse()) await s.stop()
  }
}
