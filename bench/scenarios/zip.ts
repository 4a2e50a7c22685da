/**
 * 5. ZIP of 200 files of 1 MiB (--quick: 20 of 100 KiB): POST /assets/storage/attach/download with JSON
 * {title, ids}, against archiver's ZipArchive({store: true}) streaming the same files from disk in a bare
 * node:http server. Each file is a real JPEG (a small image) padded with random bytes to its size: our
 * server sniffs types from content, so these are image/jpeg, an already-compressed type it stores
 * without deflate, as archiver at store level does; and the bytes do not compress either way.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { paddedJpeg } from '../lib/files.js'
import { median, mibps, request } from '../lib/http.js'
import { PeakMemory, startServer, type Server } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { fmtCpuPerGiB, fmtMiB, fmtRate, judge, MiB, target, type Context } from '../lib/report.js'

export async function zipBench(ctx: Context): Promise<void> {
  const count = ctx.quick ? 20 : 200
  const size = ctx.quick ? 100 * 1024 : 1 * MiB
  const reps = ctx.quick ? 1 : 3
  const scenario = 'zip'
  const figure = `ZIP ${count} × ${size >= MiB ? `${size / MiB} MiB` : `${size / 1024} KiB`} JPEG`
  const dir = await mkdtemp(join(ctx.work, 'zip-'))
  const servers: Server[] = []
  try {
    ctx.log(`zip: generating ${count} files`)
    const names = Array.from({ length: count }, (_, i) => `photo-${String(i + 1).padStart(3, '0')}.jpg`)
    const paths: string[] = []
    for (const n of names) paths.push(await paddedJpeg(join(dir, n), size))

    const ours = await startReference(ctx.work, 100 * MiB)
    servers.push(ours)
    ctx.log(`zip: saving ${count} files through the API`)
    const ids: number[] = []
    for (let i = 0; i < paths.length; i += 20) {
      for (const rec of await ours.save(paths.slice(i, i + 20))) {
        ids.push(rec.id)
        if (rec.fileType !== 'image/jpeg') ctx.log(`zip: ${rec.displayName} was stored as ${rec.fileType}`)
      }
    }
    const zipOurs = (body: unknown) =>
      request(`${ours.base}/assets/storage/attach/download`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify(body),
        keep: 4096,
      })
    const probe = await zipOurs({ title: 'bench', ids: ids.slice(0, 2) })
    if (probe.status === 404 || probe.status === 405) {
      const why = `POST /assets/storage/attach/download answered ${probe.status} ${probe.body?.toString().slice(0, 100) ?? ''}`
      ctx.log(`zip: ${why}`)
      ctx.skip(scenario, figure, `ZIP route not available: ${why}`)
      return
    }
    if (probe.status !== 200) throw new Error(`ZIP warm-up answered ${probe.status}: ${probe.body?.toString().slice(0, 300)}`)

    const archiver = await startServer('archiver', 'bench/servers/baseline.ts', {}, ['archiver-zip', dir])
    servers.push(archiver)
    const zipArchiver = (list: string[]) =>
      request(`${archiver.base}/zip`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ title: 'bench', names: list }),
        keep: 4096,
      })
    await zipArchiver(names.slice(0, 2))

    const subjects = [
      { server: ours as Server, run: () => zipOurs({ title: 'bench', ids }) },
      { server: archiver, run: () => zipArchiver(names) },
    ]
    const probes = subjects.map((s) => new PeakMemory(s.server.pid))
    for (const p of probes) p.start()
    const rates: number[][] = [[], []]
    const bytes: number[] = [0, 0]
    for (let rep = 0; rep < reps; rep++) {
      for (let i = 0; i < subjects.length; i++) {
        ctx.log(`zip: ${subjects[i]!.server.name}, run ${rep + 1}/${reps}`)
        const r = await subjects[i]!.run()
        if (r.status !== 200 || r.bytes < count * size || r.body?.subarray(0, 2).toString() !== 'PK') {
          throw new Error(`${subjects[i]!.server.name}: ${r.status}, ${r.bytes} bytes`)
        }
        rates[i]!.push(mibps(r.bytes, r.seconds))
        bytes[i] = r.bytes
      }
    }
    const mem = probes.map((p) => p.stop())
    const rate = rates.map(median)
    ctx.add({
      scenario,
      figure,
      subject: 'attach-storage POST download',
      value: fmtRate(rate[0]!),
      rss: mem[0]!.growth,
      cpu: fmtCpuPerGiB(mem[0]!.cpu, bytes[0]! * reps),
      target: 'RSS+ <= 64 MiB',
      status: judge(mem[0]!.growth / MiB, '<=', 64),
      note: `archive ${fmtMiB(bytes[0]!)}`,
    })
    const ratio = rate[0]! / rate[1]!
    ctx.add({
      scenario,
      figure,
      subject: 'archiver ZipArchive({store: true})',
      value: fmtRate(rate[1]!),
      rss: mem[1]!.growth,
      cpu: fmtCpuPerGiB(mem[1]!.cpu, bytes[1]! * reps),
      ratio,
      target: target('>=', 1.0),
      status: judge(ratio, '>=', 1.0),
      note: `archive ${fmtMiB(bytes[1]!)}`,
    })
    ctx.log(
      `zip: median of ${reps}; runs (MiB/s): ${subjects.map((s, i) => `${s.server.name} ${rates[i]!.map((x) => x.toFixed(0)).join('/')}`).join(', ')}`,
    )
  } finally {
    for (const s of servers.reverse()) await s.stop()
    await rm(dir, { recursive: true, force: true })
  }
}
