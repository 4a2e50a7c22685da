/**
 * The `attach-storage` command:
 * - `cli-copy`: copy-store of a domain's files from the local store to S3 on s3rver, against the S3 SDK
 *   alone uploading the same files (each read whole, then PutObject) with the same concurrency, to the same
 *   s3rver (target ratio >= 0.9). Both sides are timed from the first upload to the last.
 * - `cli-verify`: verify of 100,000 records of 10 KB on the local store (--quick: 5,000), the whole
 *   command from start to exit (target < 60 s), and its peak RSS against a run over a tenth of the
 *   records (memory flat: the records are read in pages, the store listed in batches).
 */
import { spawn } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { mkdir, mkdtemp, readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { join } from 'node:path'
import { PutObjectCommand } from '@aws-sdk/client-s3'
import { openDataDir, seedFiles } from '../../packages/attach-storage/src/testing/cli-seed.js'
import { LocalStore } from '../../packages/attach-storage/src/stores/local-store.js'
import { NODE_TS, ROOT, rss, startServer } from '../lib/proc.js'
import { type Context, fmtMiB, fmtRate, judge, MiB, target } from '../lib/report.js'
import { s3rverClient, s3rverStore } from '../lib/s3rver.js'
import { median } from '../lib/http.js'

const BIN = join(ROOT, 'packages/attach-storage/bin/attach-storage.js')
const CONCURRENCY = 8

/** Runs the command to its end; answers its JSON report, wall seconds and peak RSS (sampled). */
async function runCli(args: string[], env: Record<string, string>): Promise<{ report: any; seconds: number; peakRss: number }> {
  const started = performance.now()
  const child = spawn(process.execPath, [...NODE_TS, BIN, ...args], {
    cwd: ROOT,
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  let err = ''
  child.stdout!.on('data', (d: Buffer) => {
    out += d
  })
  child.stderr!.on('data', (d: Buffer) => {
    err = (err + d).slice(-8000)
  })
  let peakRss = 0
  const sample = setInterval(() => {
    try {
      peakRss = Math.max(peakRss, rss(child.pid!))
    } catch {}
  }, 50)
  const code = await new Promise<number | null>((r) => child.on('exit', r))
  clearInterval(sample)
  if (code !== 0) throw new Error(`attach-storage ${args[0]} exited with ${code}: ${err}`)
  return { report: JSON.parse(out), seconds: (performance.now() - started) / 1000, peakRss }
}

async function seedDataDir(dir: string, count: number, size: number): Promise<void> {
  const { db, repo } = await openDataDir(dir)
  try {
    await seedFiles(repo, new LocalStore('local', { baseDir: join(dir, 'files') }), {
      count,
      size,
      domain: 'demo',
      perKey: 50,
      concurrency: 8,
    })
  } finally {
    await db.destroy()
  }
}

export async function copyStoreBench(ctx: Context): Promise<void> {
  const figure = `copy-store local → S3 (s3rver), concurrency ${CONCURRENCY}`
  try {
    createRequire(join(ROOT, 'packages/store-s3/package.json')).resolve('s3rver')
  } catch {
    return ctx.skip('cli-copy', figure, 's3rver is not installed')
  }
  const count = ctx.quick ? 200 : 1000
  const size = 256 * 1024
  const dir = await mkdtemp(join(ctx.work, 'cli-copy-'))
  const s3dir = join(dir, 's3rver')
  await mkdir(s3dir)
  const s3 = await startServer('s3rver', 'bench/servers/s3.ts', {}, ['s3rver', s3dir])
  try {
    ctx.log(`seeding ${count} files of ${size / 1024} KiB`)
    await seedDataDir(dir, count, size)
    const { db, repo } = await openDataDir(dir)
    const keys: string[] = []
    for await (const b of repo.operations.eachLiveBlob()) keys.push(b.savedDir.slice(1) + b.savedName)
    await db.destroy()
    const bytes = keys.length * size

    // The baseline: the SDK alone, each file read whole and sent with PutObject, CONCURRENCY at a time.
    const client = s3rverClient(s3.base)
    let next = 0
    const t0 = performance.now()
    await Promise.all(
      Array.from({ length: CONCURRENCY }, async () => {
        for (let i = next++; i < keys.length; i = next++) {
          await client.send(
            new PutObjectCommand({
              Bucket: 'bench',
              Key: `sdk/${keys[i]}`,
              Body: await readFile(join(dir, 'files', keys[i]!)),
              ContentLength: size,
            }),
          )
        }
      }),
    )
    const sdkRate = bytes / MiB / ((performance.now() - t0) / 1000)
    client.destroy()

    const config = join(dir, 'attach.json')
    writeFileSync(
      config,
      JSON.stringify({
        attach: {
          stores: {
            local: { type: 'local' },
            s3: s3rverStore(s3.base),
          },
        },
      }),
    )
    const { report } = await runCli(
      ['copy-store', '--domain', 'demo', '--to', 's3', '--concurrency', String(CONCURRENCY), '--json', '--config', config],
      {
        ATTACH_DATA_DIR: dir,
      },
    )
    if (report.copied !== count) throw new Error(`copy-store copied ${report.copied} of ${count}`)
    const ours = bytes / MiB / report.seconds
    const ratio = ours / sdkRate
    ctx.add({
      scenario: 'cli-copy',
      figure: `${figure}, ${count} × 256 KiB`,
      subject: 'S3 SDK alone (readFile + PutObject)',
      value: fmtRate(sdkRate),
      status: '',
    })
    ctx.add({
      scenario: 'cli-copy',
      figure: `${figure}, ${count} × 256 KiB (${fmtMiB(bytes)})`,
      subject: 'attach-storage copy-store',
      value: fmtRate(ours),
      ratio,
      target: target('>=', 0.9),
      status: judge(ratio, '>=', 0.9),
      note: 'sha256 of every byte checked against the record, each file journaled',
    })
  } finally {
    await s3.stop()
  }
}

export async function verifyBench(ctx: Context): Promise<void> {
  const count = ctx.quick ? 5_000 : 100_000
  const small = count / 10
  const size = 10 * 1024
  const results: Array<{ count: number; seconds: number; peakRss: number }> = []
  for (const n of [small, count]) {
    const dir = await mkdtemp(join(ctx.work, 'cli-verify-'))
    ctx.log(`seeding ${n} files of 10 KiB`)
    const t = performance.now()
    await seedDataDir(dir, n, size)
    ctx.log(`seeded in ${((performance.now() - t) / 1000).toFixed(1)} s; verifying`)
    // Three runs, each figure their median: one run's peak RSS moves by a tenth (how far V8 lets its old
    // generation grow before a full collection: 211 to 237 MiB for the same 100,000), as much as the
    // target's margin.
    const runs: Array<{ seconds: number; peakRss: number }> = []
    for (let i = 0; i < (ctx.quick ? 1 : 3); i++) {
      const { report, seconds, peakRss } = await runCli(['verify', '--json'], { ATTACH_DATA_DIR: dir })
      if (report.files !== n || report.problems.length) throw new Error(`verify: ${report.files} files, ${report.problems.length} problems`)
      runs.push({ seconds, peakRss })
    }
    ctx.log(`verify of ${n}: ${runs.map((r) => `${r.seconds.toFixed(1)} s, ${fmtMiB(r.peakRss)}`).join('; ')}`)
    results.push({ count: n, seconds: median(runs.map((r) => r.seconds)), peakRss: median(runs.map((r) => r.peakRss)) })
  }
  const [a, b] = results as [(typeof results)[0], (typeof results)[0]]
  ctx.add({
    scenario: 'cli-verify',
    figure: `verify ${b.count.toLocaleString('en-US')} records of 10 KiB, local store (whole command)`,
    subject: 'attach-storage verify',
    value: `${b.seconds.toFixed(1)} s`,
    target: target('<=', 60, ' s'),
    status: ctx.quick ? '' : judge(b.seconds, '<=', 60),
    note: `${Math.round(b.count / b.seconds).toLocaleString('en-US')} files/s; peak RSS ${fmtMiB(b.peakRss)}`,
  })
  ctx.add({
    scenario: 'cli-verify',
    figure: `verify peak RSS, ${b.count.toLocaleString('en-US')} against ${a.count.toLocaleString('en-US')} records`,
    subject: `attach-storage verify of ${a.count.toLocaleString('en-US')}`,
    value: `${fmtMiB(a.peakRss)} → ${fmtMiB(b.peakRss)}`,
    ratio: b.peakRss / a.peakRss,
    target: target('<=', 1.25, ' (flat)'),
    status: judge(b.peakRss / a.peakRss, '<=', 1.25),
  })
}
