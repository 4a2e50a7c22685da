/**
 * Operator commands that cannot lose a file or run for ever, against s3rver: `copy-store` moves domain
 * demo local → s3 → local → s3 with `--delete-source` and `verify` after each move; `sweep` with s3rver
 * stopped passes the rows it cannot delete and exits 1, and with an endpoint that never answers stops on
 * the first Ctrl-C. The sweep runs as a real process through the bin.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { roundTrip, seedDataDir, showMoves } from '../../../packages/attach-storage/src/testing/cli-kit.js'
import { openDataDir, seedDeadBlobs } from '../../../packages/attach-storage/src/testing/cli-seed.js'
import { startS3rver, type TestS3Server } from '../../../packages/store-s3/src/test-server.js'

const here = dirname(fileURLToPath(import.meta.url))
const BIN = join(here, '../../../packages/attach-storage/bin/attach-storage.js')

let s3: TestS3Server
beforeAll(async () => {
  s3 = await startS3rver('attach-operator')
})
afterAll(async () => {
  await s3?.close()
})

/** Writes `attach-{domainStore}.json` in `dir`: stores local and s3 (at `endpoint`, its own prefix), demo on `domainStore`. */
function configOf(dir: string, endpoint = s3.endpoint) {
  return (domainStore: string) => {
    const file = join(dir, `attach-${domainStore}.json`)
    const s3Store = { ...s3.fileSettings(endpoint), prefix: `${basename(dir)}/`, 'connect-timeout': '500ms' }
    writeFileSync(
      file,
      JSON.stringify({ attach: { stores: { local: { type: 'local' }, s3: s3Store }, domains: { demo: { store: domainStore } } } }),
    )
    return file
  }
}

/** `count` unused blob rows of store s3, old enough for the sweep. */
async function deadRows(dir: string, count: number): Promise<void> {
  const { db } = await openDataDir(dir)
  try {
    await seedDeadBlobs(db, 's3', count)
  } finally {
    await db.destroy()
  }
}

/** The bin, run as the operator runs it, on the data directory `dir`. */
function start(args: string[], dir: string) {
  const child: ChildProcess = spawn(process.execPath, [BIN, ...args], {
    cwd: dir,
    env: { ...process.env, ATTACH_DATA_DIR: dir },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  const out = { stdout: '', stderr: '' }
  child.stdout!.on('data', (d: Buffer) => {
    out.stdout += d
  })
  child.stderr!.on('data', (d: Buffer) => {
    out.stderr += d
  })
  const exited = new Promise<number | null>((resolve) => child.on('close', (code) => resolve(code)))
  return { child, out, exited }
}

describe('copy-store local → s3 → local → s3 with --delete-source', () => {
  it('keeps every file: verify is clean after each move', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'attach-op-copy-'))
    try {
      await seedDataDir(dir, { count: 2 })
      const moves = await roundTrip(dir, configOf(dir), 'local', 's3')
      const shown = showMoves(moves)
      console.log(shown)
      expect(
        moves.map((m) => [m.to, m.copy.code, m.verify.code]),
        shown,
      ).toEqual([
        ['s3', 0, 0],
        ['local', 0, 0],
        ['s3', 0, 0],
      ])
      expect(moves[2]!.copy.stdout).toContain('copied 2 file(s)')
      expect(moves[2]!.verify.stdout).toContain('verified 2 file(s), 2000 bytes')
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})

describe('attach-storage sweep with the S3 store down', () => {
  it('stops on the first Ctrl-C while a store call hangs (exit 130), without waiting for it', async () => {
    // An endpoint that accepts connections and never answers.
    const sockets = new Set<Socket>()
    const silent: Server = createServer((socket) => sockets.add(socket))
    await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()))
    const dir = mkdtempSync(join(tmpdir(), 'attach-op-hang-'))
    try {
      await deadRows(dir, 10)
      const config = configOf(dir, `http://127.0.0.1:${(silent.address() as { port: number }).port}`)('s3')
      const run = start(['sweep', '--config', config], dir)
      for (const stop = Date.now() + 60_000; sockets.size === 0; await new Promise((r) => setTimeout(r, 10))) {
        if (Date.now() > stop || run.child.exitCode !== null) throw new Error(`no call reached the store:\n${run.out.stderr}`)
      }
      const signalled = performance.now()
      run.child.kill('SIGINT')
      expect(await run.exited).toBe(130)
      expect(performance.now() - signalled).toBeLessThan(5_000)
      expect(run.out.stdout).toContain('interrupted: run again to finish')
    } finally {
      for (const s of sockets) s.destroy()
      silent.close()
      rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)

  it('passes 100 rows it cannot delete, reports them on one line and exits 1 (s3rver stopped)', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'attach-op-down-'))
    try {
      await deadRows(dir, 100)
      const config = configOf(dir)('s3')
      await s3.kill()
      const started = performance.now()
      const run = start(['sweep', '--config', config], dir)
      expect(await run.exited).toBe(1)
      const seconds = (performance.now() - started) / 1000
      console.log(`sweep with s3rver stopped: ${seconds.toFixed(1)} s\n${run.out.stdout}${run.out.stderr}`)
      expect(seconds).toBeLessThan(60)
      expect(run.out.stdout).toMatch(/^could not remove 100 of files in store "s3" \(left alone after failures in a row\): /m)
      expect(run.out.stdout).toContain('100 thing(s) not removed: the next sweep tries again')
      // One log line for the 100 rows (the SDK's own Node version warning aside).
      expect(run.out.stderr.split('\n').filter((l) => l.startsWith('attach-storage:'))).toEqual([
        expect.stringContaining(
          'the sweep could not remove 100 of files in store "s3" (the store was left alone after 5 failures in a row)',
        ),
      ])
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000)
})
