/**
 * The sweep with a store that cannot delete (throws, or never answers): it passes the rows it cannot
 * remove (each tried once), ends in bounded time, logs one line per kind of failure, stops on its signal,
 * and a service never runs two sweeps at once. Real SQLite file and local stores; the store under test
 * wraps a local one.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Kysely } from 'kysely'
import { afterEach, beforeEach, describe, expect, it } from 'vitest'
import { openDatabase } from '../repository/database.js'
import { migrateAttachSchema } from '../repository/migrations.js'
import { LocalStore } from '../stores/local-store.js'
import { seedDeadBlobs } from '../testing/cli-seed.js'
import { type AttachStorage, contextOf, createAttachStorage } from './attach-storage.js'
import { sweep } from './housekeeping.js'

/** A local store whose deletes fail (`throw`), never answer (`hang`), take `slowMs`, or work (`ok`). */
class FlakyStore extends LocalStore {
  mode: 'ok' | 'throw' | 'hang' = 'ok'
  slowMs = 0
  readonly deleted: string[] = []
  override async delete(key: string): Promise<void> {
    this.deleted.push(key)
    if (this.mode === 'throw') throw new Error('connect ECONNREFUSED 127.0.0.1:9 (store down)')
    if (this.mode === 'hang') return new Promise<void>(() => {})
    if (this.slowMs) await new Promise((r) => setTimeout(r, this.slowMs))
    return super.delete(key)
  }
}

let dir: string
let db: Kysely<any>
let storage: AttachStorage
let flaky: FlakyStore
let warnings: string[]

beforeEach(async () => {
  dir = mkdtempSync(join(tmpdir(), 'attach-sweep-'))
  db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
  await migrateAttachSchema(db)
  flaky = new FlakyStore('flaky', { baseDir: join(dir, 'flaky') })
  warnings = []
  storage = await createAttachStorage({
    db,
    stores: { flaky },
    logger: { info: () => {}, warn: (m: string) => warnings.push(m), error: (m: string) => warnings.push(m) },
    config: { directory: { baseDir: join(dir, 'files'), tmpDir: join(dir, 'tmp') } },
  })
})
afterEach(async () => {
  await storage.close()
  await db.destroy()
  rmSync(dir, { recursive: true, force: true })
})

const sweepLines = () => warnings.filter((w) => w.includes('the sweep could not remove'))

describe('sweep with a store whose deletes fail', () => {
  it('tries each of 150 rows once, reports them, logs one line, and removes them once the store is back', async () => {
    await seedDeadBlobs(db, 'flaky', 150)
    flaky.mode = 'throw'
    const started = performance.now()
    const result = await sweep(contextOf(storage), { maxConsecutiveFailures: 1000 })
    expect(performance.now() - started).toBeLessThan(5_000)
    expect(flaky.deleted.length).toBe(150)
    expect(new Set(flaky.deleted).size).toBe(150)
    expect(result).toMatchObject({ blobs: 0, interrupted: false })
    expect(result.failures).toEqual([
      { kind: 'files', store: 'flaky', count: 150, gaveUp: false, message: 'connect ECONNREFUSED 127.0.0.1:9 (store down)' },
    ])
    expect(sweepLines()).toEqual([
      'attach-storage: the sweep could not remove 150 of files in store "flaky": connect ECONNREFUSED 127.0.0.1:9 (store down); the next sweep tries again',
    ])
    flaky.mode = 'ok'
    const back = await sweep(contextOf(storage))
    expect(back).toMatchObject({ blobs: 150, failures: [] })
    expect(await db.selectFrom('attach_blob').select('id').execute()).toEqual([])
  })

  it('leaves the store alone after 5 failures in a row: 5 calls, the rest counted', async () => {
    await seedDeadBlobs(db, 'flaky', 150)
    flaky.mode = 'throw'
    const result = await sweep(contextOf(storage))
    expect(flaky.deleted.length).toBe(5)
    expect(result.failures).toEqual([expect.objectContaining({ kind: 'files', store: 'flaky', count: 150, gaveUp: true })])
    expect(sweepLines()).toHaveLength(1)
    expect(sweepLines()[0]).toContain('left alone after 5 failures in a row')
  })
})

describe('sweep with a store that never answers', () => {
  it('waits callTimeoutMs per call and ends', async () => {
    await seedDeadBlobs(db, 'flaky', 20)
    flaky.mode = 'hang'
    const started = performance.now()
    const result = await sweep(contextOf(storage), { callTimeoutMs: 50, maxConsecutiveFailures: 3 })
    const ms = performance.now() - started
    expect(ms).toBeGreaterThanOrEqual(150)
    expect(ms).toBeLessThan(3_000)
    expect(flaky.deleted.length).toBe(3)
    expect(result.failures).toEqual([{ kind: 'files', store: 'flaky', count: 20, gaveUp: true, message: 'no answer within 50 ms' }])
  })

  it('stops at once when its signal aborts, without waiting for the call in flight', async () => {
    await seedDeadBlobs(db, 'flaky', 20)
    flaky.mode = 'hang'
    const controller = new AbortController()
    setTimeout(() => controller.abort(), 100)
    const started = performance.now()
    const result = await sweep(contextOf(storage), { signal: controller.signal })
    expect(performance.now() - started).toBeLessThan(2_000)
    expect(result).toMatchObject({ interrupted: true, blobs: 0, failures: [] })
    expect(flaky.deleted.length).toBe(1)
  })
})

describe('storage.sweep()', () => {
  it('never runs two sweeps at once: a call while one runs answers that one', async () => {
    await seedDeadBlobs(db, 'flaky', 3)
    flaky.slowMs = 100
    const [a, b] = [storage.sweep(), storage.sweep()]
    expect(b).toBe(a)
    expect((await a).blobs).toBe(3)
    expect(flaky.deleted.length).toBe(3)
    // Once it has ended, the next call runs a new sweep.
    await seedDeadBlobs(db, 'flaky', 1)
    expect((await storage.sweep()).blobs).toBe(1)
  })
})
