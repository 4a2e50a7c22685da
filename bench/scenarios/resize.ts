/**
 * 4. Resize placeholders: GET /assets/storage/attach/view/{id}?w=... on a 4000×3000 JPEG (--quick:
 * 1600×1200), against sharp called directly (sharp(file).resize({width}).toBuffer(), in its own process):
 *   - the first request of a size (variant made, stored, then served) against one direct resize;
 *   - 4 different sizes in flight against 4 direct resizes in flight (resizes per second);
 *   - a cached variant against a plain view of a file of the same bytes (wrk);
 *   - ten identical concurrent first requests: how many variant files the store holds afterwards.
 * When the server answers the original (no resize support yet) the scenario prints SKIPPED.
 */
import { execFile } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import sharp from 'sharp'
import { listFiles, photoJpeg } from '../lib/files.js'
import { median, request } from '../lib/http.js'
import { cpuSeconds, NODE_TS, PeakMemory, ROOT } from '../lib/proc.js'
import { startReference, type Reference } from '../lib/reference.js'
import { fmtCpuPerReq, fmtMs, fmtRps, judge, MiB, target, type Context } from '../lib/report.js'
import { ensureWrk, wrkEach } from '../lib/wrk.js'
import { wrkTimes } from './small-views.js'

function sharpDirect(args: string[]): Promise<any> {
  return new Promise((resolve, reject) => {
    execFile(process.execPath, [...NODE_TS, 'bench/servers/sharp-direct.ts', ...args], { cwd: ROOT }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`sharp-direct failed: ${err.message} ${stderr}`))
      resolve(JSON.parse(stdout.trim().split('\n').pop()!))
    })
  })
}

/** The view of a record resized to `w` wide: status, time, bytes, and the image's width. */
async function resized(ref: Reference, id: number, w: number) {
  const r = await request(`${ref.base}/assets/storage/attach/view/${id}?w=${w}`, { keep: true })
  let width: number | undefined
  if (r.status === 200 && r.body)
    width = (
      await sharp(r.body)
        .metadata()
        .catch(() => ({ width: undefined }))
    ).width
  return { ...r, width }
}

export async function resizeBench(ctx: Context): Promise<void> {
  const [W, H] = ctx.quick ? [1600, 1200] : [4000, 3000]
  const scenario = 'resize'
  const dir = await mkdtemp(join(ctx.work, 'resize-'))
  ctx.log(`resize: generating a ${W}×${H} JPEG`)
  const photo = await photoJpeg(join(dir, 'photo.jpg'), W, H)
  let ours: Reference | undefined
  try {
    ours = await startReference(ctx.work, 100 * MiB)
    const firstReps = ctx.quick ? 1 : 5
    const recs = await ours.save(Array.from({ length: firstReps + 1 }, () => ({ path: photo, name: 'photo.jpg' })))
    const [warmRec, ...firstRecs] = recs as [(typeof recs)[0], ...typeof recs]

    // Resize support? (Also the warm-up: sharp loaded and its first pipeline run in the server.)
    const probe = await resized(ours, warmRec.id, 640)
    if (probe.status !== 200 || probe.width !== 640) {
      const why =
        probe.status !== 200
          ? `?w=640 answered ${probe.status} ${probe.body?.toString().slice(0, 120) ?? ''}`
          : `?w=640 answered an image ${probe.width ?? '?'} px wide (the original is ${W})`
      ctx.log(`resize: ${why}`)
      ctx.skip(scenario, 'resize', `resize not available: ${why}`)
      return
    }
    const mem = new PeakMemory(ours.pid)
    mem.start()

    // First request of a size against one direct resize (median of firstReps).
    const oursFirst: number[] = []
    const cpuFirst0 = cpuSeconds(ours.pid)
    for (const rec of firstRecs) {
      const r = await resized(ours, rec.id, 800)
      if (r.status !== 200 || r.width !== 800) throw new Error(`?w=800 answered ${r.status}, width ${r.width}`)
      oursFirst.push(r.seconds)
    }
    const cpuFirst = (cpuSeconds(ours.pid) - cpuFirst0) / firstRecs.length
    const direct = (await sharpDirect([photo, 'first', '640', ...Array(firstReps).fill('800')])) as { times: number[]; cpu: number }
    const perResize = (cpu: number) => `${(cpu * 1000).toFixed(0)} ms/resize`
    const tOurs = median(oursFirst)
    const tSharp = median(direct.times)
    const figFirst = `first ?w=800 of ${W}×${H}`
    ctx.add({
      scenario,
      figure: figFirst,
      subject: 'attach-storage (make, store, serve)',
      value: fmtMs(tOurs),
      cpu: perResize(cpuFirst),
      status: '',
    })
    ctx.add({
      scenario,
      figure: figFirst,
      subject: 'sharp(file).resize().toBuffer()',
      value: fmtMs(tSharp),
      cpu: perResize(direct.cpu / direct.times.length),
      ratio: tOurs / tSharp,
      target: `${target('<=', 1.1)} (time)`,
      status: judge(tOurs / tSharp, '<=', 1.1),
    })

    // 4 different sizes in flight, rounds of fresh sizes, against sharp's own rate: blocks of rounds,
    // ours then sharp's, alternating, and the median of the blocks' rates (one block is short and noisy).
    const blocks = ctx.quick ? 1 : 3
    const rounds = ctx.quick ? 1 : 4
    const widths = [400, 600, 1000, 1200]
    const oursRates: number[] = []
    const sharpRates: number[] = []
    let oursCpu = 0
    let sharpCpu = 0
    for (let b = 0; b < blocks; b++) {
      const t = performance.now()
      const cpu0 = cpuSeconds(ours.pid)
      for (let i = 0; i < rounds; i++) {
        const k = b * rounds + i
        const rs = await Promise.all(widths.map((w) => resized(ours!, warmRec.id, w + k)))
        for (const [j, r] of rs.entries())
          if (r.status !== 200 || r.width !== widths[j]! + k) throw new Error(`?w=${widths[j]! + k}: ${r.status}, width ${r.width}`)
      }
      oursRates.push((rounds * widths.length) / ((performance.now() - t) / 1000))
      oursCpu += cpuSeconds(ours.pid) - cpu0
      const par = (await sharpDirect([photo, 'parallel', String(rounds), ...widths.map(String)])) as {
        seconds: number
        resizes: number
        cpu: number
      }
      sharpRates.push(par.resizes / par.seconds)
      sharpCpu += par.cpu
    }
    const oursRate = median(oursRates)
    const sharpRate = median(sharpRates)
    const cpuPar = oursCpu / (blocks * rounds * widths.length)
    ctx.log(
      `resize: 4 in flight, resizes/s by block: attach-storage ${oursRates.map((x) => x.toFixed(1)).join('/')}, sharp ${sharpRates.map((x) => x.toFixed(1)).join('/')}`,
    )
    const figPar = '4 sizes in flight'
    ctx.add({
      scenario,
      figure: figPar,
      subject: 'attach-storage',
      value: `${oursRate.toFixed(1)} resizes/s`,
      rss: mem.stop().growth,
      cpu: perResize(cpuPar),
      status: '',
    })
    ctx.add({
      scenario,
      figure: figPar,
      subject: 'sharp, 4 in flight',
      value: `${sharpRate.toFixed(1)} resizes/s`,
      cpu: perResize(sharpCpu / (blocks * rounds * widths.length)),
      ratio: oursRate / sharpRate,
      target: target('>=', 0.9),
      status: judge(oursRate / sharpRate, '>=', 0.9),
    })

    // Ten identical concurrent first requests: one generation, one variant file. On a record of its own:
    // the one above holds more sizes than `resize.max-variants` stores, so its further sizes are made
    // on the fly and never stored.
    const [tenRec] = await ours.save([{ path: photo, name: 'photo.jpg' }])
    const filesDir = join(ours.dataDir, 'files')
    const before = new Set(await listFiles(filesDir))
    const tenMem = new PeakMemory(ours.pid)
    tenMem.start()
    const ten = await Promise.all(Array.from({ length: 10 }, () => resized(ours!, tenRec!.id, 900)))
    const lengths = new Set(ten.map((r) => r.bytes))
    if (ten.some((r) => r.status !== 200 || r.width !== 900) || lengths.size !== 1) {
      throw new Error(`ten identical requests: statuses ${ten.map((r) => r.status).join(',')}, ${lengths.size} different lengths`)
    }
    const made = (await listFiles(filesDir)).filter((f) => !before.has(f) && !f.endsWith('.partial'))
    ctx.add({
      scenario,
      figure: '10 identical first requests',
      subject: 'attach-storage',
      value: `${made.length} variant file${made.length === 1 ? '' : 's'}`,
      rss: tenMem.stop().growth,
      target: '= 1 (sharp once)',
      status: made.length === 1 ? 'ok' : 'MISSED',
      note: made
        .map((f) => f.slice(filesDir.length))
        .join(' ')
        .slice(0, 80),
    })

    // A cached variant against a plain view of a file of the same bytes.
    const w = ensureWrk(ctx.log)
    const figCached = 'cached ?w=800 views/s'
    if (!w.ok) {
      ctx.skip(scenario, figCached, w.reason)
      return
    }
    const variant = await request(`${ours.base}/assets/storage/attach/view/${firstRecs[0]!.id}?w=800`, { keep: true })
    const variantPath = join(dir, 'variant-800.jpg')
    await writeFile(variantPath, variant.body!)
    const [plain] = await ours.save([variantPath])
    const res = await wrkEach(
      [
        {
          label: 'attach-storage ?w=800 (cached)',
          url: `${ours.base}/assets/storage/attach/view/${firstRecs[0]!.id}?w=800`,
          pid: ours.pid,
        },
        {
          label: `plain view of the same ${(variant.bytes / 1024).toFixed(0)} KB`,
          url: `${ours.base}/assets/storage/attach/view/${plain!.id}`,
          pid: ours.pid,
        },
      ],
      { ...wrkTimes(ctx), log: ctx.log },
    )
    ctx.add({
      scenario,
      figure: figCached,
      subject: res[0]!.label,
      value: fmtRps(res[0]!.rps),
      rss: res[0]!.rssGrowth,
      cpu: fmtCpuPerReq(res[0]!.cpu, res[0]!.requests),
      status: '',
    })
    const ratio = res[0]!.rps / res[1]!.rps
    ctx.add({
      scenario,
      figure: figCached,
      subject: res[1]!.label,
      value: fmtRps(res[1]!.rps),
      rss: res[1]!.rssGrowth,
      cpu: fmtCpuPerReq(res[1]!.cpu, res[1]!.requests),
      ratio,
      target: target('>=', 0.9),
      status: judge(ratio, '>=', 0.9),
    })
  } finally {
    await ours?.stop()
    await rm(dir, { recursive: true, force: true })
  }
}
