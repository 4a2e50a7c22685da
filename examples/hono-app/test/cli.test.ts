/**
 * The `attach-storage` command against real servers: `verify` on s3rver, and `copy-store` of 500 files
 * from the local disk to s3rver and to Azurite, killed with SIGKILL half way and run again. The command
 * runs as a real process through its bin (`npx attach-storage` in this folder resolves to the same file).
 */
import { type ChildProcess, execFile, spawn } from 'node:child_process'
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { basename, dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { promisify } from 'node:util'
import { createStore as azureStore } from '@attach-storage/store-azure'
import { createStore as s3Store } from '@attach-storage/store-s3'
import type { Store } from 'attach-storage'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openDataDir, seedFiles } from '../../../packages/attach-storage/src/testing/cli-seed.js'
import { LocalStore } from '../../../packages/attach-storage/src/stores/local-store.js'
import { connectionString, startAzurite, type Azurite } from '../../../packages/store-azure/src/test-azurite.js'
import { startS3rver, type TestS3Server } from '../../../packages/store-s3/src/test-server.js'

const here = dirname(fileURLToPath(import.meta.url))
const appDir = join(here, '..')
const BIN = join(here, '../../../packages/attach-storage/bin/attach-storage.js')

let s3: TestS3Server
let azurite: Azurite
beforeAll(async () => {
  ;[s3, azurite] = await Promise.all([startS3rver('attach-cli'), startAzurite()])
})
afterAll(async () => {
  await Promise.all([s3?.close(), azurite?.stop()])
})

/** The remote stores in the configuration file's kebab-case keys, and camelCase for a direct look. */
const remotes = () => ({
  s3: {
    file: s3.fileSettings(),
    open: (prefix: string): Promise<Store> =>
      Promise.resolve(
        s3Store('s3', {
          prefix,
          type: 's3',
          bucket: s3.bucket,
          region: 'us-east-1',
          endpoint: s3.endpoint,
          forcePathStyle: true,
          accessKey: 'S3RVER',
          secretKey: 'S3RVER',
        }),
      ),
  },
  azure: {
    file: { type: 'azure', 'connection-string': connectionString(azurite.port), container: 'attach-cli', 'create-container': true },
    open: (prefix: string): Promise<Store> =>
      Promise.resolve(
        azureStore('azure', {
          prefix,
          type: 'azure',
          connectionString: connectionString(azurite.port),
          container: 'attach-cli',
          createContainer: true,
        }),
      ),
  },
})

/** A data directory of the reference server's layout, and a configuration file naming the remote store. */
function workspace(remote: 's3' | 'azure', domainStore: string, dir = mkdtempSync(join(tmpdir(), `attach-cli-${remote}-`))) {
  const config = join(dir, 'attach.json')
  // Each workspace in its own folder of the bucket or container.
  const prefix = `${basename(dir)}/`
  writeFileSync(
    config,
    JSON.stringify({
      attach: {
        stores: { local: { type: 'local' }, [remote]: { ...remotes()[remote].file, prefix } },
        domains: { demo: { store: domainStore } },
      },
    }),
  )
  return { dir, config, prefix }
}

/** Runs the bin as the operator does, in examples/hono-app, with the reference server's environment. */
function command(args: string[], dataDir: string): Promise<{ code: number | null; stdout: string; stderr: string }> {
  return new Promise((resolve, reject) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { cwd: appDir, env: { ...process.env, ATTACH_DATA_DIR: dataDir } },
      (err, stdout, stderr) => {
        const code = err ? ((err as { code?: number }).code ?? null) : 0
        if (err && typeof (err as { code?: unknown }).code !== 'number') reject(err)
        else resolve({ code, stdout, stderr })
      },
    )
  })
}

const journalLines = (path: string) =>
  existsSync(path)
    ? readFileSync(path, 'utf8')
        .split('\n')
        .filter((l) => {
          try {
            return Number.isSafeInteger(JSON.parse(l).id)
          } catch {
            return false
          }
        })
        .map((l) => JSON.parse(l).id as number)
    : []

describe('attach-storage verify on s3rver', () => {
  it('finds a truncated file, a flipped byte, a missing file and an orphan', async () => {
    const { dir, config, prefix } = workspace('s3', 's3')
    const { db, repo } = await openDataDir(dir)
    const store = await remotes().s3.open(prefix)
    try {
      const files = await seedFiles(repo, store, { count: 8, size: 3000, domain: 'demo' })
      const clean = await command(['verify', '--json', '--config', config], dir)
      expect(clean.code).toBe(0)
      expect(JSON.parse(clean.stdout)).toMatchObject({ files: 8, problems: [] })
      const original = async (i: number) => {
        const chunks: Buffer[] = []
        for await (const c of await store.get(files[i]!.key)) chunks.push(c as Buffer)
        return Buffer.concat(chunks)
      }
      await store.put(files[0]!.key, (await original(0)).subarray(0, 1000))
      const flipped = await original(1)
      flipped[2000] = flipped[2000]! ^ 1
      await store.put(files[1]!.key, flipped)
      await store.delete(files[2]!.key)
      const orphan = 'demo/2026/11/77/00000000-1111-4222-8333-444444444444.bin'
      await store.put(orphan, Buffer.from('no record'))
      const found = await command(['verify', '--json', '--config', config], dir)
      expect(found.code).toBe(1)
      const kinds = Object.fromEntries(JSON.parse(found.stdout).problems.map((p: { key: string; kind: string }) => [p.key, p.kind]))
      expect(kinds).toEqual({ [files[0]!.key]: 'size', [files[1]!.key]: 'sha256', [files[2]!.key]: 'missing', [orphan]: 'orphan' })
    } finally {
      await store.close()
      await db.destroy()
      rmSync(dir, { recursive: true, force: true })
    }
  })
})

// The two copies run side by side: each is a command process and an emulator (s3rver in this process,
// Azurite in its own) taking turns, which leaves a core idle most of the time when run one after the other.
describe.concurrent.each(['s3', 'azure'] as const)('attach-storage copy-store local → %s', (remote) => {
  it('copies 500 files, survives a SIGKILL half way without copying a verified file twice, then switches the records', async () => {
    const { dir, config } = workspace(remote, 'local')
    const { db, repo } = await openDataDir(dir)
    const files = await seedFiles(repo, new LocalStore('local', { baseDir: join(dir, 'files') }), {
      count: 500,
      size: 2048,
      domain: 'demo',
    })
    await db.destroy()
    const journal = join(dir, `.attach-copy-store.demo.${remote}.jsonl`)
    try {
      // First run, killed once about half of the files are verified.
      const child: ChildProcess = spawn(process.execPath, [BIN, 'copy-store', '--domain', 'demo', '--to', remote, '--config', config], {
        cwd: appDir,
        env: { ...process.env, ATTACH_DATA_DIR: dir },
        stdio: 'ignore',
      })
      const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)))
      for (let stop = Date.now() + 60_000; journalLines(journal).length < 250 && Date.now() < stop; ) {
        await new Promise((r) => setTimeout(r, 5))
      }
      child.kill('SIGKILL')
      expect(await exited).toBe('SIGKILL')
      const verifiedBeforeKill = journalLines(journal)
      expect(verifiedBeforeKill.length).toBeGreaterThanOrEqual(250)
      expect(verifiedBeforeKill.length).toBeLessThan(500)

      // The rerun skips exactly what was verified and copies the rest.
      const rerun = await command(['copy-store', '--domain', 'demo', '--to', remote, '--json', '--config', config], dir)
      expect(rerun.code).toBe(0)
      const report = JSON.parse(rerun.stdout)
      expect(report).toMatchObject({
        skipped: verifiedBeforeKill.length,
        copied: 500 - verifiedBeforeKill.length,
        problems: [],
        switched: 0,
      })
      const all = journalLines(journal)
      expect(all.length).toBe(500)
      expect(new Set(all).size).toBe(500)

      // The host flips the domain's store; the command points the records there and drops the local copies.
      const flipped = workspace(remote, remote, dir)
      const flip = await command(
        ['copy-store', '--domain', 'demo', '--to', remote, '--delete-source', '--json', '--config', flipped.config],
        dir,
      )
      expect(JSON.parse(flip.stdout)).toMatchObject({ copied: 0, skipped: 500, switched: 500, deletedSource: 500 })
      // Every byte in the remote store is read back and hashed against its record.
      const verify = await command(['verify', '--json', '--config', flipped.config], dir)
      expect(verify.code).toBe(0)
      expect(JSON.parse(verify.stdout)).toMatchObject({ files: 500, problems: [] })
      expect(existsSync(join(dir, 'files', files[0]!.key))).toBe(false)
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  }, 120_000) // side by side on a loaded machine, each has taken up to 30 s
})

describe('npx attach-storage', () => {
  it('runs from examples/hono-app with the reference server environment', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'attach-cli-npx-'))
    try {
      const out = await promisify(execFile)('npx', ['attach-storage', 'stats', '--json'], {
        cwd: appDir,
        env: { ...process.env, ATTACH_DATA_DIR: dir },
      })
      expect(JSON.parse(out.stdout)).toMatchObject({ records: [], temporary: { count: 0 } })
    } finally {
      rmSync(dir, { recursive: true, force: true })
    }
  })
})
