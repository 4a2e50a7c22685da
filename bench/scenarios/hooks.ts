/**
 * 6. list (bench/list.ts, written beside this bench), 7. adapters (issue 6 item 5), 8. S3 (issue 5 item 8).
 */
import { existsSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { paddedJpeg } from '../lib/files.js'
import { request } from '../lib/http.js'
import { ROOT, startServer, type Server } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { fmtCpuPerReq, fmtRps, judge, MiB, target, type Context } from '../lib/report.js'
import { ensureWrk, wrkEach } from '../lib/wrk.js'
import { SMALL, wrkTimes } from './small-views.js'

interface ListFigure {
  name: string
  p50: number
  p99: number
  target: unknown
  ok: boolean
}

/** HOOK: bench/list.ts exports runListBench(); its figures join the table when the file is there. */
export async function listBench(ctx: Context): Promise<void> {
  const file = join(ROOT, 'bench', 'list.ts')
  if (!existsSync(file)) return ctx.skip('list', 'list', 'bench/list.ts (runListBench) is not there yet')
  // A computed specifier: the type check does not need the file to exist.
  const mod = (await import(pathToFileURL(file).href)) as { runListBench?: (opts?: { quick?: boolean }) => Promise<ListFigure[]> }
  if (typeof mod.runListBench !== 'function') return ctx.skip('list', 'list', 'bench/list.ts does not export runListBench()')
  // --quick: fewer rows (bench/list.ts reads BENCH_LIST_ROWS), unless the caller chose a count.
  const quickRows = ctx.quick && process.env.BENCH_LIST_ROWS === undefined
  if (quickRows) process.env.BENCH_LIST_ROWS = '20000'
  let figures: ListFigure[]
  try {
    figures = await mod.runListBench({ quick: ctx.quick })
  } finally {
    if (quickRows) delete process.env.BENCH_LIST_ROWS
  }
  for (const f of figures) {
    ctx.add({
      scenario: 'list',
      figure: f.name,
      subject: 'attach-storage',
      value: `p50 ${f.p50.toFixed(1)} ms, p99 ${f.p99.toFixed(1)} ms`,
      target: typeof f.target === 'number' ? `<= ${f.target} ms` : String(f.target),
      status: f.ok ? 'ok' : 'MISSED',
    })
  }
}

function resolvable(name: string): boolean {
  try {
    createRequire(join(ROOT, 'package.json')).resolve(name)
    return true
  } catch {
    return false
  }
}

/**
 * HOOK (issue 6 item 5): 50 KB views per second through the Express and Fastify adapters, each against
 * its framework's own static middleware (express.static; @fastify/static when installed). An adapter
 * joins when its example app (examples/<framework>-app/src/server.ts, the contract's reference server)
 * exists. The Hono adapter's row is views-50k (against Hono's serveStatic).
 */
export async function adaptersBench(ctx: Context): Promise<void> {
  const adapters = [
    { app: 'express-app', label: 'Express adapter', baseline: 'express-static', baselineLabel: 'express.static', needs: 'express' },
    { app: 'fastify-app', label: 'Fastify adapter', baseline: 'fastify-static', baselineLabel: '@fastify/static', needs: '@fastify/static' },
  ]
  const w = ensureWrk(ctx.log)
  for (const a of adapters) {
    const figure = `50 KB views/s, ${a.label}`
    if (!existsSync(join(ROOT, 'examples', a.app, 'src', 'server.ts'))) {
      ctx.skip('adapters', figure, `examples/${a.app}/src/server.ts is not there yet`)
      continue
    }
    if (!w.ok) {
      ctx.skip('adapters', figure, w.reason)
      continue
    }
    const dir = await mkdtemp(join(ctx.work, `adapter-${a.app}-`))
    const servers: Server[] = []
    try {
      const file = await paddedJpeg(join(dir, 'photo.jpg'), SMALL)
      const ours = await startReference(ctx.work, 100 * MiB, a.app, `attach-storage on ${a.label}`)
      servers.push(ours)
      const [rec] = await ours.save([file])
      const targets = [{ label: `attach-storage view/{id}, ${a.label}`, url: `${ours.base}/assets/storage/attach/view/${rec!.id}`, pid: ours.pid }]
      let baselineMissing: string | undefined
      if (resolvable(a.needs)) {
        const base = await startServer(a.baselineLabel, 'bench/servers/baseline.ts', {}, [a.baseline, dir])
        servers.push(base)
        targets.push({ label: a.baselineLabel, url: `${base.base}/photo.jpg`, pid: base.pid })
      } else {
        baselineMissing = `${a.needs} is not installed (not installed by the bench on purpose)`
      }
      for (const t of targets) {
        const r = await request(t.url, { keep: 1024 })
        if (r.status !== 200 || r.bytes !== SMALL) throw new Error(`${t.label}: ${r.status}, ${r.bytes} bytes`)
      }
      const res = await wrkEach(targets, { ...wrkTimes(ctx), log: ctx.log })
      const o = res[0]!
      ctx.add({ scenario: 'adapters', figure, subject: o.label, value: fmtRps(o.rps), rss: o.rssGrowth, cpu: fmtCpuPerReq(o.cpu, o.requests), status: '' })
      if (res[1]) {
        const ratio = o.rps / res[1].rps
        ctx.add({ scenario: 'adapters', figure, subject: res[1].label, value: fmtRps(res[1].rps), rss: res[1].rssGrowth, cpu: fmtCpuPerReq(res[1].cpu, res[1].requests), ratio, target: target('>=', 1.0), status: judge(ratio, '>=', 1.0) })
      } else {
        ctx.add({ scenario: 'adapters', figure, subject: a.baselineLabel, value: '', status: 'SKIPPED', note: baselineMissing })
      }
    } finally {
      for (const s of servers.reverse()) await s.stop()
      await rm(dir, { recursive: true, force: true })
    }
  }
}

/**
 * HOOK (issue 5 item 8): upload and view of a 256 MiB file through the S3 store against the S3 SDK alone
 * on the same server (target ratio >= 0.9), on s3rver on loopback. Not written yet: it needs
 * packages/store-s3 and its settings through ATTACH_CONFIG (contract), then the same shape as
 * scenarios/upload.ts and scenarios/view.ts with a baseline server using @aws-sdk/lib-storage's Upload and
 * GetObject.
 */
export async function s3Bench(ctx: Context): Promise<void> {
  const figure = 'upload + view 256 MiB via S3'
  const store = join(ROOT, 'packages', 'store-s3', 'src', 'index.ts')
  if (!existsSync(store)) return ctx.skip('s3', figure, 'packages/store-s3 is not there yet')
  if (!resolvable('s3rver')) return ctx.skip('s3', figure, 's3rver is not installed')
  ctx.skip('s3', figure, 'hook only: the S3 scenario is not written yet (bench/scenarios/hooks.ts, s3Bench)')
}
