/** The `attach-storage` command on the local store and a real SQLite file, run in-process through main(). */
import {
  appendFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readFileSync,
  rmSync,
  symlinkSync,
  truncateSync,
  unlinkSync,
  utimesSync,
  writeFileSync,
} from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { escapeControls, escapeLine } from './escape.js'
import { archiveConfig, runCli, seedDataDir } from '../testing/cli-kit.js'
import { openDataDir } from '../testing/cli-seed.js'

let dataDir: string
beforeEach(() => {
  dataDir = mkdtempSync(join(tmpdir(), 'attach-cli-'))
})
afterEach(() => rmSync(dataDir, { recursive: true, force: true }))

const run = (args: string[], env: Record<string, string> = {}) => runCli(dataDir, args, env)

const seed = (count: number, size?: number, domain?: string) => seedDataDir(dataDir, { count, size, domain })

describe('attach-storage migrate', () => {
  it('prints the SQL with --dry-run and changes nothing; applies once; is idempotent', async () => {
    const dry = await run(['migrate', '--dry-run'])
    expect(dry.code).toBe(0)
    expect(dry.stdout).toContain('create table "attach_blob"')
    expect(dry.stdout).toContain('-- migration 0002_blob_tmp_name')
    expect((await run(['migrate', '--dry-run'])).stdout).toContain('create table "attach_file"')
    const first = await run(['migrate', '--json'])
    expect(first.json().applied).toEqual([
      '0001_attach_tables',
      '0002_blob_tmp_name',
      '0003_variant_table',
      '0004_pending_table',
      '0005_media',
      '0006_focus',
    ])
    const again = await run(['migrate'])
    expect(again.stdout).toContain('up to date')
    expect((await run(['migrate', '--dry-run'])).stdout).toContain('up to date')
  })
})

describe('attach-storage verify on the local store', () => {
  it('is clean on intact files, then finds a truncated file, a flipped byte, a missing file and an orphan', async () => {
    const files = await seed(12)
    const clean = await run(['verify', '--json'])
    expect(clean.stderr).toContain('"progress":"verify"')
    expect(clean.code).toBe(0)
    expect(clean.json()).toMatchObject({ files: 12, problems: [] })
    const path = (key: string) => join(dataDir, 'files', key)
    truncateSync(path(files[0]!.key), 500)
    const flipped = readFileSync(path(files[1]!.key))
    flipped[10] = flipped[10]! ^ 0xff
    writeFileSync(path(files[1]!.key), flipped)
    unlinkSync(path(files[2]!.key))
    const orphan = 'demo/2026/11/99/aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee.bin'
    mkdirSync(dirname(path(orphan)), { recursive: true })
    writeFileSync(path(orphan), 'nobody points here')
    const found = await run(['verify', '--json'])
    expect(found.code).toBe(1)
    const kinds = Object.fromEntries(found.json().problems.map((p: { kind: string; key: string }) => [p.key, p.kind]))
    expect(kinds).toEqual({ [files[0]!.key]: 'size', [files[1]!.key]: 'sha256', [files[2]!.key]: 'missing', [orphan]: 'orphan' })
    const text = await run(['verify'])
    expect(text.code).toBe(1)
    expect(text.stdout).toContain('4 problem(s)')
  })

  it('reads files of several blocks whole, and finds a grown file, a link and a folder in a file’s place', async () => {
    // 3 MiB and 7 bytes: four reads of a worker's 1 MiB buffer, the last one short.
    const large = await seed(2, 3 * 1024 * 1024 + 7)
    const small = await seed(3, 100, 'board')
    const path = (key: string) => join(dataDir, 'files', key)
    expect((await run(['verify', '--json', '--concurrency', '2'])).json()).toMatchObject({ files: 5, problems: [] })
    const flipped = readFileSync(path(large[1]!.key))
    flipped[flipped.length - 1] = flipped[flipped.length - 1]! ^ 0xff
    writeFileSync(path(large[1]!.key), flipped)
    appendFileSync(path(small[0]!.key), 'one byte more than the record says')
    const target = readFileSync(path(small[1]!.key))
    unlinkSync(path(small[1]!.key))
    writeFileSync(`${path(small[1]!.key)}.elsewhere`, target)
    // A link to a file with the right bytes is not the stored file: the store never follows one.
    symlinkSync(`${path(small[1]!.key)}.elsewhere`, path(small[1]!.key))
    unlinkSync(path(small[2]!.key))
    mkdirSync(path(small[2]!.key))
    const found = await run(['verify', '--json', '--no-orphans'])
    expect(found.code).toBe(1)
    const problems = found.json().problems as Array<{ kind: string; key: string; expected?: unknown; actual?: unknown }>
    expect(Object.fromEntries(problems.map((p) => [p.key, p.kind]))).toEqual({
      [large[1]!.key]: 'sha256',
      [small[0]!.key]: 'size',
      [small[1]!.key]: 'missing',
      [small[2]!.key]: 'missing',
    })
    expect(problems.find((p) => p.kind === 'size')).toMatchObject({ expected: 100, actual: 134 })
  })
})

describe('attach-storage stats, sweep and variants', () => {
  it('counts files per domain, category and store, variants and temporary files', async () => {
    await seed(5, 100)
    await seed(3, 10, 'board')
    const stats = await run(['stats', '--json'])
    expect(stats.code).toBe(0)
    expect(stats.json().records).toEqual([
      { refDomain: 'board', refCategory: 'default', store: 'local', count: 3, bytes: 30 },
      { refDomain: 'demo', refCategory: 'default', store: 'local', count: 5, bytes: 500 },
    ])
    expect(stats.json().blobs).toEqual([{ store: 'local', count: 8, bytes: 530, pending: 0 }])
  })

  it('sweeps expired temporary files and orphaned variants (counted first with --dry-run); purges a domain’s variants', async () => {
    const files = await seed(2)
    const variant = (id: number) => join(dataDir, 'files', dirname(files[0]!.key), '_v', String(id), '100x100')
    for (const id of [files[0]!.id, 987654]) {
      mkdirSync(dirname(variant(id)), { recursive: true })
      writeFileSync(variant(id), 'variant')
    }
    const tmp = join(dataDir, 'tmp', '_tmp', 'old.bin')
    mkdirSync(dirname(tmp), { recursive: true })
    writeFileSync(tmp, 'old')
    const old = new Date(Date.now() - 3 * 86400_000)
    utimesSync(tmp, old, old)
    const dry = await run(['sweep', '--dry-run', '--json'])
    expect(dry.json()).toMatchObject({ dryRun: true, temporaryFiles: 1, orphanVariants: 1 })
    expect((await run(['stats', '--json'])).json().variants).toEqual([{ store: 'local', count: 2, bytes: 14 }])
    const swept = await run(['sweep', '--json'])
    expect(swept.json()).toMatchObject({ temporaryFiles: 1, orphanVariants: 1 })
    expect((await run(['sweep', '--dry-run', '--json'])).json()).toMatchObject({ temporaryFiles: 0, orphanVariants: 0 })
    const purged = await run(['variants', 'purge', '--domain', 'demo', '--json'])
    expect(purged.json()).toMatchObject({ records: 2, removed: 1 })
    expect((await run(['stats', '--json'])).json().variants[0].count).toBe(0)
    expect((await run(['verify'])).code).toBe(0)
  })
})

describe('attach-storage copy-store between two local stores', () => {
  it('copies and verifies, points the records at the target once configured, then deletes the source', async () => {
    const files = await seed(20)
    const config = (domainStore: string) => archiveConfig(dataDir, domainStore)
    const before = await run(['copy-store', '--domain', 'demo', '--to', 'archive', '--json', '--config', config('local')])
    expect(before.code).toBe(0)
    expect(before.json()).toMatchObject({ copied: 20, skipped: 0, switched: 0 })
    for (const f of files) expect(readFileSync(join(dataDir, 'archive', f.key)).length).toBe(1000)
    const variant = join(dataDir, 'files', dirname(files[0]!.key), '_v', String(files[0]!.id), '10x10')
    mkdirSync(dirname(variant), { recursive: true })
    writeFileSync(variant, 'variant in the old store')
    const flipped = await run([
      'copy-store',
      '--domain',
      'demo',
      '--to',
      'archive',
      '--delete-source',
      '--json',
      '--config',
      config('archive'),
    ])
    expect(flipped.json()).toMatchObject({ copied: 0, skipped: 20, switched: 20, deletedSource: 20 })
    expect(existsSync(variant)).toBe(false)
    expect((await run(['stats', '--json', '--config', config('archive')])).json().blobs).toEqual([
      { store: 'archive', count: 20, bytes: 20000, pending: 0 },
    ])
    expect((await run(['verify', '--config', config('archive')])).code).toBe(0)
  })
})

describe('attach-storage usage', () => {
  it('answers 2 with a message and no stack on bad usage and bad configuration', async () => {
    const unknown = await run(['frobnicate'])
    expect(unknown.code).toBe(2)
    const missing = await run(['copy-store', '--domain', 'demo'])
    expect(missing.code).toBe(2)
    expect(missing.stderr).toContain('--to')
    const noFile = await run(['stats', '--config', 'nope.json'])
    expect(noFile.code).toBe(2)
    expect(noFile.stderr).toMatch(/^attach-storage: Cannot read the configuration file .*nope\.json/)
    expect(noFile.stderr).not.toContain('    at ')
    const undeclared = await run(['copy-store', '--domain', 'demo', '--to', 'nowhere'])
    expect(undeclared.code).toBe(2)
    expect(undeclared.stderr).toContain('store "nowhere" is not declared')
    expect((await run(['variants', 'make', '--domain', 'demo'])).code).toBe(2)
  })
})

describe('attach-storage text reports', () => {
  const BAD_DOMAIN = 'x\x1b[31m\u202Ey'
  /** Any of them but TAB and the line feed that ends each line. */
  // biome-ignore lint/suspicious/noControlCharactersInRegex: finds the characters a report must not print raw
  const raw = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/

  it('escape the control and direction characters of stored keys and names (verify, stats, copy-store)', async () => {
    await seed(1)
    // A row whose domain holds an ESC sequence and U+202E (no store takes such a key: the file is not there).
    const { db, repo } = await openDataDir(dataDir)
    const createdDt = new Date().toISOString()
    const blob = await repo.reserveBlob({
      store: 'local',
      savedDir: `/${BAD_DOMAIN}/2026/11/1/`,
      savedName: 'f.bin',
      fileSize: 10,
      fileType: 'application/octet-stream',
      sha256: '0'.repeat(64),
      createdDt,
    })
    const record = { refDomain: BAD_DOMAIN, refKey: '1', refCategory: 'default', displayName: 'f.bin', ext: 'bin', fmetaValue: null }
    await repo.createRecord(blob.id, { ...record, sort: 0, createdBy: null, createdDt }, { requireLive: false, requirePending: true })
    await db.destroy()
    const verify = await run(['verify'])
    expect(verify.code).toBe(1)
    expect(verify.stdout).not.toMatch(raw)
    expect(verify.stdout).toContain('unreadable\tlocal\tx\\x1b[31m\\u202ey/2026/11/1/f.bin\n')
    const stats = await run(['stats'])
    expect(stats.stdout).not.toMatch(raw)
    expect(stats.stdout).toContain('x\\x1b[31m\\u202ey\tdefault\tlocal\t1\t10')
    // A key the store refuses (control characters): copy-store's problem line names it escaped.
    const copy = await run(['copy-store', '--domain', BAD_DOMAIN, '--to', 'archive', '--config', archiveConfig(dataDir, 'local')])
    expect(copy.code).toBe(1)
    expect(copy.stdout).toContain('problem\tlocal\tx\\x1b[31m\\u202ey/')
    expect(copy.stdout).not.toMatch(raw)
    // biome-ignore lint/suspicious/noControlCharactersInRegex: an ESC printed raw
    expect(copy.stderr).not.toMatch(/\x1b|\u202e/)
  })

  it('one helper: C0, DEL, C1 and the bidi and separator characters, nothing else', () => {
    expect(escapeControls('a\x1b[2J\u202e\u0085\x7f\t\u00e9\u061c\u200f\u2066\u2069b\\')).toBe(
      'a\\x1b[2J\\u202e\\x85\\x7f\\x09\u00e9\\u061c\\u200f\\u2066\\u2069b\\',
    )
    expect(escapeLine('k\x1b\tv')).toBe('k\\x1b\tv')
  })
})
