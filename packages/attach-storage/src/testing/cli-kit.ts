/**
 * Test only (not exported): what the command's tests share. A data directory of the reference server's
 * layout (`attach.db`, `files/`) seeded with files, and a configuration file declaring a second local store.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { LocalStore } from '../stores/local-store.js'
import { main } from '../cli/main.js'
import type { CliIo } from '../cli/runtime.js'
import { openDataDir, type SeededFile, seedFiles } from './cli-seed.js'

/** Seeds `count` files of `size` bytes (default 1000) of `domain` (default demo) into `dataDir`'s local store and SQLite file. */
export async function seedDataDir(
  dataDir: string,
  options: { count: number; size?: number; domain?: string; sparse?: boolean },
): Promise<SeededFile[]> {
  const { db, repo } = await openDataDir(dataDir)
  const store = new LocalStore('local', { baseDir: join(dataDir, 'files') })
  try {
    return await seedFiles(repo, store, { ...options, size: options.size ?? 1000, domain: options.domain ?? 'demo' })
  } finally {
    await db.destroy()
  }
}

/**
 * Writes `attach-{domainStore}.json` in `dataDir`: the stores `local` and `archive` (`{dataDir}/archive`),
 * domain demo on `domainStore`. Answers the file's path.
 */
export function archiveConfig(dataDir: string, domainStore: string): string {
  const file = join(dataDir, `attach-${domainStore}.json`)
  writeFileSync(
    file,
    JSON.stringify({
      attach: {
        stores: { local: { type: 'local' }, archive: { type: 'local', 'base-dir': join(dataDir, 'archive') } },
        domains: { demo: { store: domainStore, categories: { default: {} } } },
      },
    }),
  )
  return file
}

/** Collects what is written to it. */
class Sink extends Writable {
  text = ''
  override _write(chunk: Buffer, _e: BufferEncoding, cb: () => void) {
    this.text += chunk.toString()
    cb()
  }
}

/** What one in-process run of the command answered. */
export interface CliRun {
  code: number
  stdout: string
  stderr: string
  json(): any
}

/** Runs the command in-process through main(), with the reference server's environment on `dataDir`. */
export async function runCli(dataDir: string, args: string[], env: Record<string, string> = {}, signal?: AbortSignal): Promise<CliRun> {
  const stdout = new Sink()
  const stderr = new Sink()
  const io: CliIo = {
    stdout,
    stderr,
    env: { ATTACH_DATA_DIR: dataDir, ...env },
    cwd: dataDir,
    signal: signal ?? new AbortController().signal,
  }
  const code = await main(args, io)
  return { code, stdout: stdout.text, stderr: stderr.text, json: () => JSON.parse(stdout.text) }
}

/** One move of {@link roundTrip}: the copy-store run, then verify with the same configuration. */
export interface Move {
  to: string
  copy: CliRun
  verify: CliRun
}

/**
 * Moves domain demo `a` → `b` → `a` → `b` with `copy-store --delete-source`, each run with the
 * configuration that names the target as the domain's store (`configOf(store)` answers its file), and
 * `verify` after each move. Stops after the first move whose verify is not clean.
 */
export async function roundTrip(dataDir: string, configOf: (domainStore: string) => string, a: string, b: string): Promise<Move[]> {
  const moves: Move[] = []
  for (const to of [b, a, b]) {
    const config = configOf(to)
    const copy = await runCli(dataDir, ['copy-store', '--domain', 'demo', '--to', to, '--delete-source', '--config', config])
    const verify = await runCli(dataDir, ['verify', '--config', config])
    moves.push({ to, copy, verify })
    if (verify.code !== 0) break
  }
  return moves
}

/** A move as the report shows it: the command, its output and exit code, then verify's. */
export function showMoves(moves: Move[]): string {
  return moves
    .map(
      (m) =>
        `$ copy-store --domain demo --to ${m.to} --delete-source\n${m.copy.stdout}${m.copy.stderr.replace(/^\{"progress".*\n/gm, '')}exit ${m.copy.code}\n` +
        `$ verify\n${m.verify.stdout}exit ${m.verify.code}\n`,
    )
    .join('')
}
