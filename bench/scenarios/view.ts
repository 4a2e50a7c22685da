/**
 * 2. View of one large file (512 MiB; --quick: 16 MiB): GET /assets/storage/attach/view/{id} of a file
 * saved through the API (temporary upload + confirmed save), against a bare node:http server's
 * createReadStream().pipe(res) of the same bytes. The client downloads and discards.
 */
import { copyFile, mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { bigFile } from '../lib/files.js'
import { median, mibps, request } from '../lib/http.js'
import { PeakMemory, startServer, type Server } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { fmtCpuPerGiB, fmtMiB, fmtRate, judge, MiB, target, type Context } from '../lib/report.js'

export async function viewBench(ctx: Context): Promise<void> {
  const size = ctx.quick ? 16 * MiB : 512 * MiB
  const reps = ctx.quick ? 1 : 3
  const figure = `view ${fmtMiB(size).replace('.0 ', ' ')}`
  ctx.log(`view: generating a ${fmtMiB(size)} file`)
  const source = await bigFile(ctx.work, size)
  const bareDir = await mkdtemp(join(ctx.work, 'bare-view-'))
  await copyFile(source, join(bareDir, 'big.bin'))
  const servers: Server[] = []
  try {
    const ours = await startReference(ctx.work, size + 64 * MiB)
    servers.push(ours)
    ctx.log('view: saving the file through the API (temporary upload + confirmed save)')
    const [rec] = await ours.save([{ path: source, name: 'big.bin' }])
    const bare = await startServer('bare view', 'bench/servers/baseline.ts', {}, ['bare-view', bareDir])
    servers.push(bare)
    const subjects = [
      { server: ours as Server, url: `${ours.base}/assets/storage/attach/view/${rec!.id}` },
      { server: bare, url: `${bare.base}/big.bin` },
    ]
    const get = async (url: string, name: string) => {
      const r = await request(url, { keep: 4096 })
      if (r.status !== 200 || r.bytes !== size)
        throw new Error(`${name}: ${r.status}, ${r.bytes} bytes ${r.body?.toString().slice(0, 300) ?? ''}`)
      return r
    }
    // Warm-up: one whole download each (the page cache holds both copies afterwards).
    for (const s of subjects) await get(s.url, s.server.name)
    const probes = subjects.map((s) => new PeakMemory(s.server.pid))
    for (const p of probes) p.start()
    const rates: number[][] = subjects.map(() => [])
    for (let rep = 0; rep < reps; rep++) {
      for (let i = 0; i < subjects.length; i++) {
        ctx.log(`view: ${subjects[i]!.server.name}, run ${rep + 1}/${reps}`)
        const r = await get(subjects[i]!.url, subjects[i]!.server.name)
        rates[i]!.push(mibps(size, r.seconds))
      }
    }
    const mem = probes.map((p) => p.stop())
    const rate = rates.map(median)
    ctx.add({
      scenario: 'view',
      figure,
      subject: 'attach-storage view/{id}',
      value: fmtRate(rate[0]!),
      rss: mem[0]!.growth,
      cpu: fmtCpuPerGiB(mem[0]!.cpu, size * reps),
      status: '',
    })
    const ratio = rate[0]! / rate[1]!
    ctx.add({
      scenario: 'view',
      figure,
      subject: 'bare createReadStream().pipe(res)',
      value: fmtRate(rate[1]!),
      rss: mem[1]!.growth,
      cpu: fmtCpuPerGiB(mem[1]!.cpu, size * reps),
      ratio,
      target: target('>=', 1.0),
      status: judge(ratio, '>=', 1.0),
    })
    ctx.log(
      `view: median of ${reps}; runs (MiB/s): ${subjects.map((s, i) => `${s.server.name} ${rates[i]!.map((x) => x.toFixed(0)).join('/')}`).join(', ')}`,
    )
  } finally {
    for (const s of servers.reverse()) await s.stop()
    await rm(bareDir, { recursive: true, force: true })
  }
}
