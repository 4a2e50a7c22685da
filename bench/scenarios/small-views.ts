/**
 * 3. Views of a 50 KB file per second with wrk (keep-alive, 32 connections, 2 threads): our view by id
 * (record lookup and secure-access check included) against a bare node:http stat + createReadStream
 * server and Hono's serveStatic (@hono/node-server/serve-static), all on the same bytes.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { paddedJpeg } from '../lib/files.js'
import { request } from '../lib/http.js'
import { startServer, type Server } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { fmtCpuPerReq, fmtRps, judge, MiB, target, type Context } from '../lib/report.js'
import { ensureWrk, wrkEach } from '../lib/wrk.js'

export const SMALL = 50 * 1024

export function wrkTimes(ctx: Context): { seconds: number; warmSeconds: number } {
  return ctx.quick ? { seconds: 1, warmSeconds: 1 } : { seconds: 10, warmSeconds: 2 }
}

export async function smallViewsBench(ctx: Context): Promise<void> {
  const figure = '50 KB views/s'
  const w = ensureWrk(ctx.log)
  if (!w.ok) return ctx.skip('views-50k', figure, w.reason)
  const dir = await mkdtemp(join(ctx.work, 'small-'))
  const file = await paddedJpeg(join(dir, 'photo.jpg'), SMALL)
  const servers: Server[] = []
  try {
    const ours = await startReference(ctx.work, 100 * MiB)
    servers.push(ours)
    const [rec] = await ours.save([file])
    const bare = await startServer('bare', 'bench/servers/baseline.ts', {}, ['bare-view', dir])
    servers.push(bare)
    const hono = await startServer('hono serveStatic', 'bench/servers/baseline.ts', {}, ['hono-static', dir])
    servers.push(hono)
    const targets = [
      { label: 'attach-storage view/{id}', url: `${ours.base}/assets/storage/attach/view/${rec!.id}`, pid: ours.pid },
      { label: 'bare node:http stat + createReadStream', url: `${bare.base}/photo.jpg`, pid: bare.pid },
      { label: 'Hono serveStatic', url: `${hono.base}/photo.jpg`, pid: hono.pid },
    ]
    for (const t of targets) {
      const r = await request(t.url, { keep: 1024 })
      if (r.status !== 200 || r.bytes !== SMALL) throw new Error(`${t.label}: ${r.status}, ${r.bytes} bytes`)
    }
    const res = await wrkEach(targets, { ...wrkTimes(ctx), log: ctx.log })
    const [o, b, h] = res as [(typeof res)[0], (typeof res)[0], (typeof res)[0]]
    const lat = (x: typeof o) => `p50 ${x.latencyP50ms.toFixed(1)} ms, p99 ${x.latencyP99ms.toFixed(1)} ms`
    const cpu = (x: typeof o) => fmtCpuPerReq(x.cpu, x.requests)
    ctx.add({
      scenario: 'views-50k',
      figure,
      subject: o.label,
      value: fmtRps(o.rps),
      rss: o.rssGrowth,
      cpu: cpu(o),
      status: '',
      note: lat(o),
    })
    ctx.add({
      scenario: 'views-50k',
      figure,
      subject: b.label,
      value: fmtRps(b.rps),
      rss: b.rssGrowth,
      cpu: cpu(b),
      ratio: o.rps / b.rps,
      target: target('>=', 1.0),
      status: judge(o.rps / b.rps, '>=', 1.0),
    })
    ctx.add({
      scenario: 'views-50k',
      figure,
      subject: `${h.label} (info)`,
      value: fmtRps(h.rps),
      rss: h.rssGrowth,
      cpu: cpu(h),
      ratio: o.rps / h.rps,
      status: '',
      note: `bare / serveStatic = ${(b.rps / h.rps).toFixed(2)}`,
    })
  } finally {
    for (const s of servers.reverse()) await s.stop()
    await rm(dir, { recursive: true, force: true })
  }
}
