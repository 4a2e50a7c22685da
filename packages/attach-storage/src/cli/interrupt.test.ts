/**
 * Ctrl-C on the `attach-storage` command, run as a real process through its bin on a real SQLite file and
 * local stores, stderr a pipe (JSON progress lines): copy-store and verify finish the files in flight,
 * report and exit 130; copy-store's rerun skips what the journal holds; a second Ctrl-C quits at once.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { createHash } from 'node:crypto'
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { archiveConfig, seedDataDir } from '../testing/cli-kit.js'

const BIN = fileURLToPath(new URL('../../bin/attach-storage.js', import.meta.url))

/** Generous: the command starts through tsx, on a CI machine busy with other test files. */
const WAIT_MS = 60_000

/** A running command: its output so far and its exit code (null when a signal killed it). */
interface Run {
  child: ChildProcess
  stdout: string
  stderr: string
  exited: Promise<number | null>
}

const children = new Set<ChildProcess>()
afterEach(() => {
  for (const child of children) child.kill('SIGKILL')
  children.clear()
})

/** Starts the bin as the operator does, with the reference server's environment. */
function start(args: string[], dataDir: string): Run {
  const child = spawn(process.execPath, [BIN, ...args], {
    cwd: dataDir,
    env: { ...process.env, ATTACH_DATA_DIR: dataDir },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  children.add(child)
  const run: Run = {
    child,
    stdout: '',
    stderr: '',
    exited: new Promise((resolve, reject) => {
      child.on('error', reject)
      child.on('close', (code) => {
        children.delete(child)
        resolve(code)
      })
    }),
  }
  child.stdout!.on('data', (d: Buffer) => {
    run.stdout += d
  })
  child.stderr!.on('data', (d: Buffer) => {
    run.stderr += d
  })
  return run
}

/** Waits until `ready()`; fails if the command ends first (it finished before a signal could be sent). */
async function until(run: Run, ready: () => boolean, what: string): Promise<void> {
  for (const stop = Date.now() + WAIT_MS; !ready(); await new Promise((r) => setTimeout(r, 5))) {
    if (run.child.exitCode !== null || run.child.signalCode !== null) {
      throw new Error(`the command ended before ${what}:\n${run.stderr}${run.stdout}`)
    }
    if (Date.now() > stop) throw new Error(`no ${what} after ${WAIT_MS} ms:\n${run.stderr}`)
  }
}

const STOPPING = 'attach-storage: stopping after the files in flight'

/** The journal's entries after its header; every line must be whole JSON, the last one ended by its newline. */
function journalEntries(path: string): Array<{ id: number; key: string }> {
  const lines = readFileSync(path, 'utf8').split('\n')
  expect(lines.pop()).toBe('')
  expect(JSON.parse(lines.shift()!)).toEqual({ journal: 'attach-storage copy-store', domain: 'demo', to: 'archive' })
  return lines.map((line) => JSON.parse(line))
}

/** Every file under `dir`, as keys relative to it. */
function filesUnder(dir: string): string[] {
  return readdirSync(dir, { recursive: true, encoding: 'utf8' }).filter((key) => statSync(join(dir, key)).isFile())
}

const sha256 = (path: string) => createHash('sha256').update(readFileSync(path)).digest('hex')

describe('Ctrl-C on copy-store', () => {
  let dataDir: string
  beforeAll(() => {
    dataDir = mkdtempSync(join(tmpdir(), 'attach-cli-int-'))
  })
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }))

  it('finishes the copies in flight, journals them whole and exits 130; the rerun skips them and copies the rest', async () => {
    const files = await seedDataDir(dataDir, { count: 600 })
    const args = ['copy-store', '--domain', 'demo', '--to', 'archive', '--json', '--config', archiveConfig(dataDir, 'local')]
    const journal = join(dataDir, '.attach-copy-store.demo.archive.jsonl')
    const archive = join(dataDir, 'archive')

    const first = start(args, dataDir)
    await until(first, () => existsSync(journal) && readFileSync(journal, 'utf8').split('\n').length > 2, 'a verified copy in the journal')
    first.child.kill('SIGINT')
    expect(await first.exited).toBe(130)
    expect(first.stderr).toContain(STOPPING)
    const journaled = journalEntries(journal)
    expect(journaled.length).toBeGreaterThan(0)
    expect(journaled.length).toBeLessThan(files.length)
    expect(JSON.parse(first.stdout)).toMatchObject({ interrupted: true, copied: journaled.length, skipped: 0, problems: [] })
    // The target holds exactly the journaled copies: none cut short, no partial file left behind.
    const copied = filesUnder(archive)
    expect(copied.filter((key) => key.split('/').pop()!.startsWith('.'))).toEqual([])
    expect(copied.sort()).toEqual(journaled.map((e) => e.key).sort())
    const inodes = new Map(copied.map((key) => [key, statSync(join(archive, key)).ino]))

    const second = start(args, dataDir)
    expect(await second.exited).toBe(0)
    expect(JSON.parse(second.stdout)).toMatchObject({
      interrupted: false,
      skipped: journaled.length,
      copied: files.length - journaled.length,
      problems: [],
    })
    const all = journalEntries(journal)
    expect(all.length).toBe(files.length)
    expect(new Set(all.map((e) => e.id))).toEqual(new Set(files.map((f) => f.blobId)))
    // Nothing copied twice: a copy of the first run is the same file (a put writes a new one and renames it).
    for (const [key, ino] of inodes) expect(statSync(join(archive, key)).ino).toBe(ino)
    expect(filesUnder(archive).length).toBe(files.length)
    for (const f of files) expect(sha256(join(archive, f.key)), f.key).toBe(f.sha256)
  }, 120_000)
})

describe('Ctrl-C on verify', () => {
  /**
   * A file of 256 MiB (sparse: no room on the disk), checked first as the walk goes by id, one file at a
   * time: the signal, sent on the first progress line, finds it in flight on any machine.
   */
  const BIG = 256 * 1024 ** 2
  const SMALL = 200
  let dataDir: string
  beforeAll(async () => {
    dataDir = mkdtempSync(join(tmpdir(), 'attach-cli-int-'))
    await seedDataDir(dataDir, { count: 1, size: BIG, sparse: true })
    await seedDataDir(dataDir, { count: SMALL })
  }, 120_000)
  afterAll(() => rmSync(dataDir, { recursive: true, force: true }))

  it('finishes the file in flight, reports that it was interrupted and exits 130', async () => {
    const run = start(['verify', '--concurrency', '1'], dataDir)
    await until(run, () => run.stderr.includes('"progress":"verify"'), 'first progress line')
    run.child.kill('SIGINT')
    expect(await run.exited).toBe(130)
    expect(run.stderr).toContain(STOPPING)
    const verified = /^verified (\d+) file\(s\), (\d+) bytes; 0 stored file\(s\) scanned for orphans$/m.exec(run.stdout)
    expect(verified, run.stdout).not.toBeNull()
    expect(Number(verified![1])).toBeGreaterThan(0)
    expect(Number(verified![1])).toBeLessThan(1 + SMALL)
    expect(Number(verified![2])).toBeGreaterThanOrEqual(BIG)
    expect(run.stdout.trimEnd().split('\n').pop()).toBe('interrupted: no problem so far')
  }, 120_000)

  it('quits at once with 130 on a second Ctrl-C, without waiting for the file in flight', async () => {
    const run = start(['verify', '--concurrency', '1'], dataDir)
    await until(run, () => run.stderr.includes('"progress":"verify"'), 'first progress line')
    run.child.kill('SIGINT')
    // The first signal is taken before the second is sent (two pending ones would make one).
    await until(run, () => run.stderr.includes(STOPPING), '"stopping" message')
    run.child.kill('SIGINT')
    expect(await run.exited).toBe(130)
    // No report: the big file in flight was left unfinished.
    expect(run.stdout).toBe('')
  }, 120_000)
})
