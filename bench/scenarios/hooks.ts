/**
 * 6. list (bench/list.ts, written beside this bench), 7. adapters (issue 6 item 5), 8. S3 (issue 5 item 8).
 */
import { existsSync } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { pathToFileURL } from 'node:url'
import { bigFile, paddedJpeg } from '../lib/files.js'
import { median, mibps, request, uploadMultipart } from '../lib/http.js'
import { PeakMemory, ROOT, startServer, type Server } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { s3rverStore } from '../lib/s3rver.js'
import { fmtCpuPerGiB, fmtCpuPerReq, fmtRate, fmtRps, judge, MiB, target, type Context } from '../lib/report.js'
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
    {
      app: 'fastify-app',
      label: 'Fastify adapter',
      baseline: 'fastify-static',
      baselineLabel: '@fastify/static',
      needs: '@fastify/static',
    },
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
      const targets = [
        { label: `attach-storage view/{id}, ${a.label}`, url: `${ours.base}/assets/storage/attach/view/${rec!.id}`, pid: ours.pid },
      ]
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
      ctx.add({
        scenario: 'adapters',
        figure,
        subject: o.label,
        value: fmtRps(o.rps),
        rss: o.rssGrowth,
        cpu: fmtCpuPerReq(o.cpu, o.requests),
        status: '',
      })
      if (res[1]) {
        const ratio = o.rps / res[1].rps
        ctx.add({
          scenario: 'adapters',
          figure,
          subject: res[1].label,
          value: fmtRps(res[1].rps),
          rss: res[1].rssGrowth,
          cpu: fmtCpuPerReq(res[1].cpu, res[1].requests),
          ratio,
          target: target('>=', 1.0),
          status: judge(ratio, '>=', 1.0),
        })
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
 * Issue 5 item 8: upload and view of a 256 MiB file (--quick: 16 MiB) through the S3 store, against the
 * S3 SDK alone on the same server, both on one s3rver on loopback (target ratio >= 0.9 each). Ours: the
 * reference server with ATTACH_CONFIG naming an S3 store as the default and temporary store, so the
 * temporary upload streams into S3 and the view streams from it. The SDK's: a bare node:http server that
 * streams the request body into lib-storage's Upload and GetObject back to the client.
 */
export async function s3Bench(ctx: Context): Promise<void> {
  const figure = `upload + view ${ctx.quick ? 16 : 256} MiB via S3`
  const store = join(ROOT, 'packages', 'store-s3', 'src', 'index.ts')
  if (!existsSync(store)) return ctx.skip('s3', figure, 'packages/store-s3 is not there yet')
  if (!resolvable('s3rver')) return ctx.skip('s3', figure, 's3rver is not installed')
  const size = (ctx.quick ? 16 : 256) * MiB
  const reps = ctx.quick ? 1 : 3
  const file = await bigFile(ctx.work, size)
  const dir = await mkdtemp(join(ctx.work, 's3-'))
  const servers: Server[] = []
  try {
    const s3 = await startServer('s3rver', 'bench/servers/s3.ts', {}, ['s3rver', dir])
    servers.push(s3)
    const config = join(dir, 'attach.json')
    await writeFile(
      config,
      JSON.stringify({
        attach: {
          stores: {
            cloud: s3rverStore(s3.base),
          },
          'default-store': 'cloud',
          'tmp-store': 'cloud',
        },
      }),
    )
    const ours = await startReference(ctx.work, size + 64 * MiB, 'hono-app', 'attach-storage', { ATTACH_CONFIG: config })
    servers.push(ours)
    const sdk = await startServer('S3 SDK alone', 'bench/servers/s3.ts', {}, ['sdk', s3.base])
    servers.push(sdk)
    // Beside them (info rows): the same SDK server after importing the reference app's modules, never
    // calling them, with the same uploads and views. A long view makes V8 mark the whole heap every few
    // MiB (the stream's buffers count against the heap's limit), and each mark costs in proportion to
    // the heap: this row is what the SDK alone costs in a process of an application's size.
    const sdkApp = await startServer('S3 SDK alone, app modules loaded', 'bench/servers/s3.ts', { SDK_LOADS_APP: '1' }, ['sdk', s3.base])
    servers.push(sdkApp)
    const auth = { authorization: `Bearer ${ours.bearer}` }

    // Upload: ours into the temporary area (in S3), the SDK's into an object; the same multipart body.
    const up = async (which: 0 | 1 | 2) => {
      const url = which === 0 ? `${ours.base}/api/storage/attach/tmp` : `${(which === 1 ? sdk : sdkApp).base}/upload`
      const r = await uploadMultipart(
        url,
        { refDomain: 'demo', refCategory: 'default' },
        [{ field: 'file', path: file }],
        which === 0 ? auth : {},
      )
      if (r.status !== 200) throw new Error(`s3 upload (${which === 0 ? 'ours' : 'sdk'}): ${r.status} ${r.body?.toString().slice(0, 300)}`)
      return r
    }
    await up(0)
    await up(1)
    await up(2)
    const probes = [new PeakMemory(ours.pid), new PeakMemory(sdk.pid), new PeakMemory(sdkApp.pid)]
    for (const p of probes) p.start()
    const upRates: number[][] = [[], [], []]
    for (let rep = 0; rep < reps; rep++) {
      for (const which of [0, 1, 2] as const) {
        ctx.log(`s3: upload ${['ours', 'sdk', 'sdk with app modules'][which]}, run ${rep + 1}/${reps}`)
        upRates[which]!.push(mibps(size, (await up(which)).seconds))
      }
    }
    const upMem = probes.map((p) => p.stop())

    // View: a saved record of ours, an object of the SDK's, both of the same bytes.
    const [rec] = await ours.save([{ path: file, name: 'big.bin' }])
    const sdkKey = JSON.parse((await up(1)).body!.toString()).key as string
    const urls = [
      `${ours.base}/assets/storage/attach/view/${rec!.id}`,
      `${sdk.base}/${encodeURIComponent(sdkKey)}`,
      `${sdkApp.base}/${encodeURIComponent(sdkKey)}`,
    ]
    // The SDK's object is the raw request body (the multipart framing around the file included): a few
    // hundred bytes more, counted as they are.
    for (const u of urls) {
      const r = await request(u, { keep: 1024 })
      if (r.status !== 200 || r.bytes < size || r.bytes > size + 4096) throw new Error(`s3 view ${u}: ${r.status} ${r.bytes}`)
    }
    const viewProbes = [new PeakMemory(ours.pid), new PeakMemory(sdk.pid), new PeakMemory(sdkApp.pid)]
    for (const p of viewProbes) p.start()
    const viewRates: number[][] = [[], [], []]
    for (let rep = 0; rep < reps; rep++) {
      for (const which of [0, 1, 2] as const) {
        const r = await request(urls[which]!, { keep: 1024 })
        viewRates[which]!.push(mibps(r.bytes, r.seconds))
      }
    }
    const viewMem = viewProbes.map((p) => p.stop())
    for (const [what, rates, mem] of [
      ['upload', upRates, upMem],
      ['view', viewRates, viewMem],
    ] as const) {
      const [r0, r1, r2] = rates.map((r) => median(r)) as [number, number, number]
      const fig = `${what} ${ctx.quick ? 16 : 256} MiB via S3`
      // One server's row: its median rate, peak RSS growth and CPU per GiB.
      const row = (which: 0 | 1 | 2, subject: string, rate: number) => ({
        scenario: 's3',
        figure: fig,
        subject,
        value: fmtRate(rate),
        rss: mem[which]!.growth,
        cpu: fmtCpuPerGiB(mem[which]!.cpu, size * reps),
      })
      ctx.add({ ...row(0, 'attach-storage (S3 store)', r0), status: '' })
      ctx.add({ ...row(1, 'S3 SDK alone', r1), ratio: r0 / r1, target: target('>=', 0.9), status: judge(r0 / r1, '>=', 0.9) })
      ctx.add({
        ...row(2, "S3 SDK alone, the reference app's modules loaded (info)", r2),
        ratio: r0 / r2,
        status: '',
        note: 'ours against it: the SDK server after importing the Hono app and the S3 store, never calling them',
      })
    }
  } finally {
    for (const s of servers.reverse()) await s.stop()
    await rm(dir, { recursive: true, force: true })
  }
}
