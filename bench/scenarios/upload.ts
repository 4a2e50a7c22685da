/**
 * 1. Multipart upload of one large file (512 MiB; --quick: 16 MiB) into the reference server's temporary
 * upload, against a bare node:http server piping the body to a file and Express + multer (disk storage).
 */
import { execFileSync } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { bigFile, removeFiles } from '../lib/files.js'
import { median, mibps, uploadMultipart, type Timed } from '../lib/http.js'
import { PeakMemory, startServer, type Server } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { fmtCpuPerGiB, fmtMiB, fmtRate, judge, MiB, target, type Context } from '../lib/report.js'

export async function uploadBench(ctx: Context): Promise<void> {
  // BENCH_UPLOAD_MIB=1024 measures another size (memory must stay flat whatever the size).
  const size = (Number(process.env.BENCH_UPLOAD_MIB) || (ctx.quick ? 16 : 512)) * MiB
  const reps = ctx.quick ? 1 : 3
  const figure = `upload ${fmtMiB(size).replace('.0 ', ' ')}`
  ctx.log(`upload: generating a ${fmtMiB(size)} file`)
  const file = await bigFile(ctx.work, size)
  const warmFile = await bigFile(ctx.work, 1 * MiB)

  const bareDir = await mkdtemp(join(ctx.work, 'bare-upload-'))
  const bareSyncDir = await mkdtemp(join(ctx.work, 'bare-upload-fsync-'))
  const multerDir = await mkdtemp(join(ctx.work, 'multer-upload-'))
  const servers: Server[] = []
  try {
    const ours = await startReference(ctx.work, size + 64 * MiB)
    servers.push(ours)
    const auth = { authorization: `Bearer ${ours.bearer}` }
    type Subject = { server: Server; url: string; headers: Record<string, string>; dir: string | undefined; label: string; min?: number }
    const subjects: Subject[] = [
      {
        server: ours,
        url: `${ours.base}/api/storage/attach/tmp`,
        headers: auth,
        dir: join(ours.dataDir, 'tmp'),
        label: 'attach-storage (tmp upload)',
      },
    ]
    const bare = await startServer('bare pipe', 'bench/servers/baseline.ts', {}, ['bare-upload', bareDir])
    servers.push(bare)
    subjects.push({ server: bare, url: `${bare.base}/upload`, headers: {}, dir: bareDir, label: 'bare node:http pipe', min: 0.9 })
    if (ctx.onDisk) {
      // On a real disk, the store's fsync before it answers costs; this row shows that cost alone.
      const bareSync = await startServer('bare pipe + fsync', 'bench/servers/baseline.ts', { BENCH_FSYNC: '1' }, [
        'bare-upload',
        bareSyncDir,
      ])
      servers.push(bareSync)
      subjects.push({ server: bareSync, url: `${bareSync.base}/upload`, headers: {}, dir: bareSyncDir, label: 'bare pipe + fsync (info)' })
    }
    const multer = await startServer('multer', 'bench/servers/baseline.ts', {}, ['multer-upload', multerDir])
    servers.push(multer)
    subjects.push({
      server: multer,
      url: `${multer.base}/upload`,
      headers: {},
      dir: multerDir,
      label: 'Express + multer (disk storage)',
      min: 1.0,
    })

    const send = async (s: Subject, path: string): Promise<Timed> => {
      const r = await uploadMultipart(s.url, { refDomain: 'demo', refCategory: 'default' }, [{ field: 'file', path }], s.headers)
      if (r.status !== 200) throw new Error(`${s.server.name} upload answered ${r.status}: ${r.body?.toString().slice(0, 300)}`)
      return r
    }
    // Warm-up: lazily loaded modules and first-request paths.
    for (const s of subjects) await send(s, warmFile)

    const probes = subjects.map((s) => new PeakMemory(s.server.pid))
    for (const p of probes) p.start()
    const rates: number[][] = subjects.map(() => [])
    for (let rep = 0; rep < reps; rep++) {
      // Interleaved, each after `sync`, so that every upload starts with no dirty pages of the others.
      for (let i = 0; i < subjects.length; i++) {
        const s = subjects[i]!
        ctx.log(`upload: ${s.server.name}, run ${rep + 1}/${reps}`)
        execFileSync('sync')
        const r = await send(s, file)
        rates[i]!.push(mibps(size, r.seconds))
        // Each server's received files go after each run (only files: the servers' folders stay).
        if (s.dir) await removeFiles(s.dir)
      }
    }
    const mem = probes.map((p) => p.stop())
    const rate = rates.map(median)
    const oursRss = mem[0]!.growth
    ctx.add({
      scenario: 'upload',
      figure,
      subject: subjects[0]!.label,
      value: fmtRate(rate[0]!),
      rss: oursRss,
      cpu: fmtCpuPerGiB(mem[0]!.cpu, size * reps),
      target: 'RSS+ <= 64 MiB',
      status: judge(oursRss / MiB, '<=', 64),
    })
    for (let i = 1; i < subjects.length; i++) {
      const s = subjects[i]!
      const ratio = rate[0]! / rate[i]!
      ctx.add({
        scenario: 'upload',
        figure,
        subject: s.label,
        value: fmtRate(rate[i]!),
        rss: mem[i]!.growth,
        cpu: fmtCpuPerGiB(mem[i]!.cpu, size * reps),
        ratio,
        ...(s.min !== undefined ? { target: target('>=', s.min), status: judge(ratio, '>=', s.min) } : { status: '' as const }),
      })
    }
    ctx.log(
      `upload: median of ${reps}; runs (MiB/s): ${subjects.map((s, i) => `${s.server.name} ${rates[i]!.map((x) => x.toFixed(0)).join('/')}`).join(', ')}; memory by ${mem[0]!.method}`,
    )
  } finally {
    for (const s of servers.reverse()) await s.stop()
    for (const d of [bareDir, bareSyncDir, multerDir]) await rm(d, { recursive: true, force: true })
  }
}
