/**
 * `attach-storage copy-store` trusts nothing it has not just checked: a domain moved back and forth
 * between two local stores keeps its files, a journal line counts only while the target holds the copy,
 * `--delete-source` deletes only copies of the domain's live records verified in the run, and a journal
 * of another domain or store is refused.
 */
import { existsSync, mkdtempSync, readFileSync, rmSync, truncateSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { roundTrip, runCli, seedDataDir, showMoves } from '../testing/cli-kit.js'

let dataDir: string
beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'attach-copy-'))
})
afterEach(() => rmSync(dataDir, { recursive: true, force: true }))

/** Stores `local` (`files/`) and `other` (`other/`); domain demo (and board) on `domainStore`. */
function configOf(domainStore: string): string {
  const file = join(dataDir, `attach-${domainStore}.json`)
  writeFileSync(
    file,
    JSON.stringify({
      attach: {
        stores: { local: { type: 'local' }, other: { type: 'local', 'base-dir': join(dataDir, 'other') } },
        domains: { demo: { store: domainStore, categories: { default: {} } }, board: { store: 'local', categories: { default: {} } } },
      },
    }),
  )
  return file
}

/** copy-store of demo to `to`, with demo configured on `domainStore` (`to`: the records are pointed there). */
const copy = (to: string, domainStore: string, ...more: string[]) =>
  runCli(dataDir, ['copy-store', '--domain', 'demo', '--to', to, '--json', '--config', configOf(domainStore), ...more])

describe('copy-store local → other → local → other with --delete-source', () => {
  it('keeps every file: each move verifies clean and the last one copies again what the journal remembers', async () => {
    const files = await seedDataDir(dataDir, { count: 2 })
    const moves = await roundTrip(dataDir, configOf, 'local', 'other')
    const shown = showMoves(moves)
    console.log(shown)
    expect(
      moves.map((m) => [m.to, m.copy.code, m.verify.code]),
      shown,
    ).toEqual([
      ['other', 0, 0],
      ['local', 0, 0],
      ['other', 0, 0],
    ])
    expect(moves[2]!.copy.stdout).toContain('copied 2 file(s)')
    expect(moves[2]!.copy.stdout).toContain('pointed 2 file(s) at other, deleted 2 source copies')
    for (const f of files) {
      expect(readFileSync(join(dataDir, 'other', f.key)).length).toBe(1000)
      expect(existsSync(join(dataDir, 'files', f.key))).toBe(false)
    }
  })
})

describe('copy-store journal lines', () => {
  it('are skipped only while the target holds the copy whole; a truncated or missing copy is made again', async () => {
    const files = await seedDataDir(dataDir, { count: 3 })
    expect((await copy('other', 'local')).json()).toMatchObject({ copied: 3, skipped: 0 })
    truncateSync(join(dataDir, 'other', files[0]!.key), 10)
    rmSync(join(dataDir, 'other', files[1]!.key))
    const again = await copy('other', 'local')
    expect(again.code).toBe(0)
    expect(again.json()).toMatchObject({ copied: 2, skipped: 1, problems: [] })
    expect(readFileSync(join(dataDir, 'other', files[0]!.key)).length).toBe(1000)
  })

  it('never make --delete-source delete a key whose row is gone, whatever its domain', async () => {
    await seedDataDir(dataDir, { count: 2 })
    const [board] = await seedDataDir(dataDir, { count: 1, domain: 'board' })
    // A line naming a blob id no row has, and another domain's key.
    expect((await copy('other', 'local')).code).toBe(0)
    const journal = join(dataDir, '.attach-copy-store.demo.other.jsonl')
    writeFileSync(
      journal,
      `${readFileSync(journal, 'utf8')}${JSON.stringify({ id: 999_999, from: 'local', key: board!.key, sha256: board!.sha256 })}\n`,
    )
    const moved = await copy('other', 'other', '--delete-source')
    expect(moved.json()).toMatchObject({ skipped: 2, switched: 2, deletedSource: 2 })
    expect(readFileSync(join(dataDir, 'files', board!.key)).length).toBe(1000)
    expect((await runCli(dataDir, ['verify', '--config', configOf('other')])).code).toBe(0)
  })

  it('never make --delete-source delete the source of a record already pointed at the target whose copy is not there', async () => {
    const files = await seedDataDir(dataDir, { count: 2 })
    // Copied and pointed at other without deleting; then other loses a copy.
    expect((await copy('other', 'local')).code).toBe(0)
    expect((await copy('other', 'other')).json()).toMatchObject({ switched: 2 })
    rmSync(join(dataDir, 'other', files[0]!.key))
    const run = await copy('other', 'other', '--delete-source')
    expect(run.code).toBe(1)
    expect(run.json()).toMatchObject({ deletedSource: 0 })
    expect(run.json().problems).toEqual([expect.objectContaining({ blobId: files[0]!.blobId, store: 'other', key: files[0]!.key })])
    expect(existsSync(join(dataDir, 'files', files[0]!.key))).toBe(true)
  })

  it('of another domain or another target store are refused (exit 2), and nothing is copied', async () => {
    await seedDataDir(dataDir, { count: 2 })
    expect((await copy('other', 'local')).code).toBe(0)
    const journal = join(dataDir, '.attach-copy-store.demo.other.jsonl')
    const board = await runCli(dataDir, [
      'copy-store',
      '--domain',
      'board',
      '--to',
      'other',
      '--journal',
      journal,
      '--config',
      configOf('local'),
    ])
    expect(board.code).toBe(2)
    expect(board.stderr).toContain('was written for domain demo to store "other", not for domain board to store "other"')
    const toLocal = await runCli(dataDir, [
      'copy-store',
      '--domain',
      'demo',
      '--to',
      'local',
      '--journal',
      journal,
      '--config',
      configOf('local'),
    ])
    expect(toLocal.code).toBe(2)
    expect(toLocal.stderr).toContain('not for domain demo to store "local"')
    // A journal without its header line (an older one, or any other file) is refused too.
    const headless = join(dataDir, 'old.jsonl')
    writeFileSync(headless, `${JSON.stringify({ id: 1, from: 'local', key: 'demo/x', sha256: 'x' })}\n`)
    const old = await runCli(dataDir, [
      'copy-store',
      '--domain',
      'demo',
      '--to',
      'other',
      '--journal',
      headless,
      '--config',
      configOf('local'),
    ])
    expect(old.code).toBe(2)
    expect(old.stderr).toContain('is not a copy-store journal')
  })
})
