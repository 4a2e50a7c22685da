/**
 * Virus scanning (a category's `scan`, docs/scanning.md): a 100 MiB upload (--quick: 16 MiB) into the
 * reference server's `demo/scanned` (ATTACH_CLAMD) streams the file to clamd before it is kept. The scan's
 * throughput is the file's size over the time the scan adds to the same upload into `demo/default`, against
 * Debian's `clamdscan --stream` sending the same file to the same clamd; the server's peak memory growth
 * over the scanned uploads must stay flat. clamd runs with the tests' one-signature database
 * (packages/attach-storage/src/testing/clamd-kit.ts) and limits above the file's size, so it reads all of
 * it. Needs clamav-daemon and clamdscan; without them the scenario prints SKIPPED.
 */
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import { CLAMD_BIN, startClamd } from '../../packages/attach-storage/src/testing/clamd-kit.js'
import { bigFile, removeFiles } from '../lib/files.js'
import { median, mibps, uploadMultipart } from '../lib/http.js'
import { PeakMemory } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { fmtCpuPerGiB, fmtMiB, fmtRate, judge, MiB, target, type Context } from '../lib/report.js'

const run = promisify(execFile)

export async function scanBench(ctx: Context): Promise<void> {
  const scenario = 'scan'
  const size = (ctx.quick ? 16 : 100) * MiB
  const figure = `scan of a ${fmtMiB(size).replace('.0 ', ' ')} upload`
  const clamdscan = await run('sh', ['-c', 'command -v clamdscan']).then(
    (r) => r.stdout.trim(),
    () => '',
  )
  if (!CLAMD_BIN || !clamdscan) {
    ctx.skip(scenario, figure, 'clamd / clamdscan not found (apt-get install clamav-daemon clamdscan)')
    return
  }
  const reps = ctx.quick ? 1 : 3
  const file = await bigFile(ctx.work, size)
  const limits = ['MaxFileSize 400M', 'MaxScanSize 400M']
  const clamd = await startClamd({ streamMaxLength: '400M', config: limits })
  const ours = await startReference(ctx.work, size + 64 * MiB, 'hono-app', 'attach-storage', { ATTACH_CLAMD: clamd.tcp })
  try {
    const upload = async (category: string) => {
      const r = await uploadMultipart(
        `${ours.base}/api/storage/attach/tmp`,
        { refDomain: 'demo', refCategory: category },
        [{ field: 'file', path: file }],
        {
          authorization: `Bearer ${ours.bearer}`,
        },
      )
      const item = r.status === 200 ? JSON.parse(r.body!.toString()).files[0] : undefined
      if (!item?.name) throw new Error(`upload into ${category} answered ${r.status}: ${r.body?.toString().slice(0, 300)}`)
      await removeFiles(`${ours.dataDir}/tmp`)
      return r.seconds
    }
    const theirs = async () => {
      const started = performance.now()
      const r = await run(clamdscan, ['--stream', '--no-summary', '-c', clamd.configFile, file]).catch((err) => err)
      if (!String(r.stdout).includes(': OK')) throw new Error(`clamdscan: ${r.stdout} ${r.stderr}`)
      return (performance.now() - started) / 1000
    }
    // Warm-up: the first scanned upload loads the scan path, the first clamdscan clamd's caches.
    await upload('scanned')
    await theirs()
    const plain: number[] = []
    const scanned: number[] = []
    const cli: number[] = []
    const mem = new PeakMemory(ours.pid)
    mem.start()
    for (let rep = 0; rep < reps; rep++) {
      ctx.log(`scan: run ${rep + 1}/${reps}`)
      plain.push(await upload('default'))
      scanned.push(await upload('scanned'))
      cli.push(await theirs())
    }
    const m = mem.stop()
    const scanSeconds = Math.max(1e-3, median(scanned) - median(plain))
    const oursRate = mibps(size, scanSeconds)
    const cliRate = mibps(size, median(cli))
    const ratio = oursRate / cliRate
    ctx.add({
      scenario,
      figure,
      subject: 'attach-storage (scanned upload − plain upload)',
      value: fmtRate(oursRate),
      rss: m.growth,
      cpu: fmtCpuPerGiB(m.cpu, size),
      ratio,
      target: `${target('>=', 0.9)}; RSS+ <= 64 MiB`,
      status: judge(ratio, '>=', 0.9) === 'ok' && judge(m.growth / MiB, '<=', 64) === 'ok' ? 'ok' : 'MISSED',
    })
    ctx.add({ scenario, figure, subject: 'clamdscan --stream (same clamd, same file)', value: fmtRate(cliRate), status: '' })
    ctx.log(
      `scan: medians of ${reps}: plain upload ${median(plain).toFixed(2)} s, scanned ${median(scanned).toFixed(2)} s, clamdscan ${median(cli).toFixed(2)} s; memory by ${m.method}`,
    )
  } finally {
    await ours.stop()
    await clamd.stop()
  }
}
