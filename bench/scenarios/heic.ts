/**
 * HEIC photos: a 12-megapixel HEIC (4032×3024, an iPhone's size, encoded here by Debian's `heif-enc`
 * from a camera-like JPEG) turned into an 800-pixel JPEG:
 *   - the first `?w=800` view of a HEIC record (decoded by libheif in WebAssembly in the server's HEIC
 *     worker, resized by sharp, stored, served) against Debian's native `heif-convert` (libheif with
 *     libde265) writing a JPEG, plus sharp resizing that JPEG to 800 pixels, on the same file;
 *   - the server's peak memory growth while HEIC records are saved (analysed) and `resize.concurrency`
 *     first views run at once.
 * Needs the Debian package libheif-examples (heif-enc, heif-convert); without it the scenario prints
 * SKIPPED.
 */
import { execFile } from 'node:child_process'
import { mkdtemp, stat } from 'node:fs/promises'
import { join } from 'node:path'
import { promisify } from 'node:util'
import sharp from 'sharp'
import { photoJpeg } from '../lib/files.js'
import { median, request } from '../lib/http.js'
import { cpuSeconds, PeakMemory } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { fmtMs, judge, MiB, target, type Context } from '../lib/report.js'

const run = promisify(execFile)

/** The reference server's `resize.concurrency` (its default). */
const CONCURRENCY = 2

async function has(command: string): Promise<boolean> {
  return run('sh', ['-c', `command -v ${command}`]).then(
    () => true,
    () => false,
  )
}

export async function heicBench(ctx: Context): Promise<void> {
  const scenario = 'heic'
  if (!(await has('heif-enc')) || !(await has('heif-convert'))) {
    ctx.skip(scenario, 'HEIC → 800 px JPEG', 'heif-enc / heif-convert not found (apt-get install libheif-examples)')
    return
  }
  const [W, H] = ctx.quick ? [1600, 1200] : [4032, 3024]
  const dir = await mkdtemp(join(ctx.work, 'heic-'))
  ctx.log(`heic: encoding a ${W}×${H} HEIC with heif-enc`)
  const jpeg = await photoJpeg(join(dir, 'photo.jpg'), W, H)
  const heic = join(dir, 'photo.heic')
  await run('heif-enc', ['-q', '60', jpeg, '-o', heic])
  ctx.log(`heic: ${(await stat(heic)).size} bytes`)
  const reps = ctx.quick ? 2 : 5
  const ours = await startReference(ctx.work, 100 * MiB)
  try {
    // sharp loaded and its first pipeline run before the memory baseline (a JPEG, not a HEIC).
    const [warmJpeg] = await ours.save([{ path: jpeg, name: 'warm.jpg' }])
    await request(`${ours.base}/assets/storage/attach/view/${warmJpeg!.id}?w=640`, { keep: true })

    const mem = new PeakMemory(ours.pid)
    mem.start()
    const recs = await ours.save(Array.from({ length: reps + CONCURRENCY + 1 }, () => ({ path: heic, name: 'IMG_0001.HEIC' })))
    const view = async (id: number) => {
      const r = await request(`${ours.base}/assets/storage/attach/view/${id}?w=800`, { keep: true })
      const meta = r.status === 200 && r.body ? await sharp(r.body).metadata() : undefined
      if (meta?.format !== 'jpeg' || meta.width !== Math.min(800, W)) {
        throw new Error(`?w=800 of a HEIC answered ${r.status} ${meta?.format ?? r.body?.toString().slice(0, 120)} ${meta?.width ?? ''}`)
      }
      return r.seconds
    }
    // resize.concurrency first views at once: the memory row.
    await Promise.all(recs.slice(0, CONCURRENCY).map((r) => view(r.id)))
    const peak = mem.stop()
    // The worker is warm now (as it is on a server that has seen a HEIC in the last 30 s).
    await view(recs[CONCURRENCY]!.id)
    const oursTimes: number[] = []
    const cpu0 = cpuSeconds(ours.pid)
    for (const r of recs.slice(CONCURRENCY + 1)) oursTimes.push(await view(r.id))
    const oursCpu = (cpuSeconds(ours.pid) - cpu0) / reps

    const nativeTimes: number[] = []
    for (let i = 0; i < reps; i++) {
      const out = join(dir, `native-${i}.jpg`)
      const t = performance.now()
      await run('heif-convert', ['-q', '92', heic, out])
      await sharp(out).resize({ width: 800 }).jpeg().toBuffer()
      nativeTimes.push((performance.now() - t) / 1000)
    }
    const tOurs = median(oursTimes)
    const tNative = median(nativeTimes)
    ctx.log(
      `heic: first ?w=800 ${oursTimes.map((t) => (t * 1000).toFixed(0)).join('/')} ms; heif-convert + sharp ${nativeTimes.map((t) => (t * 1000).toFixed(0)).join('/')} ms`,
    )
    const figure = `${W}×${H} HEIC → 800 px JPEG`
    ctx.add({
      scenario,
      figure,
      subject: 'attach-storage (first ?w=800: decode, resize, store, serve)',
      value: fmtMs(tOurs),
      cpu: `${(oursCpu * 1000).toFixed(0)} ms/view`,
      status: '',
    })
    const ratio = tOurs / tNative
    ctx.add({
      scenario,
      figure,
      subject: 'heif-convert (native libheif) + sharp',
      value: fmtMs(tNative),
      ratio,
      target: `${target('<=', 2)} (time)`,
      status: judge(ratio, '<=', 2),
    })
    ctx.add({
      scenario,
      figure: `peak memory: ${recs.length} HEIC saves, then ${CONCURRENCY} first views at once`,
      subject: 'attach-storage',
      value: `${(peak.growth / MiB).toFixed(0)} MiB (${peak.method})`,
      rss: peak.growth,
      target: '<= 256 MiB',
      status: peak.growth <= 256 * MiB ? 'ok' : 'MISSED',
    })
  } finally {
    await ours.stop()
  }
}
