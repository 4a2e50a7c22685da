/**
 * Named variants: queued after each save, made in the background (in this process on SQLite, on pg-boss
 * on PostgreSQL), listed by the lookup, served with `?variant=`, forgotten with their record; bad names
 * refused; two instances on one PostgreSQL database make each once; a job whose worker died is retried.
 */
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import pg from 'pg'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { makeKit, png, saveFile, type Kit } from '../testing/handler-kit.js'
import type { Instrumentation } from './instrumentation.js'
import { VARIANT_QUEUE_NAME } from './variant-queue-pgboss.js'

const API = '/api/storage'
const VARIANTS = { thumb: { w: 20, h: 20 }, wide: { w: 40, format: 'webp' as const } }
const gallery = { registrar: (registry: any) => registry.registerCategory('demo', 'gallery', { variants: VARIANTS }) }

const lookup = async (kit: Kit, refKey: string) => (await (await kit.call(`${API}/attach/demo/${refKey}/gallery`)).json()).gallery
const view = (kit: Kit, url: string) => kit.call(url, { user: null })

/** Waits until `check` holds (polling), or fails after `ms`. */
async function until(check: () => Promise<boolean>, ms = 60_000): Promise<void> {
  const end = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > end) throw new Error('timed out waiting')
    await new Promise((r) => setTimeout(r, 100))
  }
}

describe('named variants in one process (SQLite, the in-process queue)', () => {
  let kit: Kit
  const jobs: string[] = []
  const observer: Instrumentation = { variantJob: (outcome) => jobs.push(outcome) }
  beforeAll(async () => {
    kit = await makeKit('sqlite', { ...gallery, instrumentation: observer })
  })
  afterAll(() => kit?.cleanup())

  it('makes each named variant after the save, lists it, and serves it with ?variant=', async () => {
    const before = kit.storage.resizer.generated
    const rec = await saveFile(kit, await png(100, 80), 'photo.png', 'v1', 'gallery')
    await kit.storage.variantJobsIdle()
    expect(kit.storage.resizer.generated - before).toBe(2)
    const [item] = await lookup(kit, 'v1')
    expect(Object.keys(item.variants).sort()).toEqual(['thumb', 'wide'])
    expect(item.variants.thumb).toBe(`/assets/storage/attach/view/${rec.id}?variant=thumb`)

    const thumb = await view(kit, item.variants.thumb)
    expect(thumb.status).toBe(200)
    expect(thumb.headers.get('content-type')).toBe('image/png')
    const t = await sharp(Buffer.from(await thumb.arrayBuffer())).metadata()
    expect([t.width, t.height]).toEqual([20, 16])
    const wide = await view(kit, item.variants.wide)
    expect(wide.headers.get('content-type')).toBe('image/webp')
    const w = await sharp(Buffer.from(await wide.arrayBuffer())).metadata()
    expect([w.format, w.width, w.height]).toEqual(['webp', 40, 32])
    // Stored beside the original, under the record's id; serving them made nothing new.
    const files = (await kit.files()).filter((f) => f.includes(`_v/${rec.id}/`)).map((f) => f.split('/').pop())
    expect(files.sort()).toEqual(['20x20', '40x0.webp'])
    expect(kit.storage.resizer.generated - before).toBe(2)
    expect(jobs.filter((j) => j === 'made')).toHaveLength(2)
  })

  it("makes an analysed record's variants from its recorded size: the original's header is not read again", async () => {
    const headers = vi.spyOn(sharp.prototype, 'metadata')
    try {
      const rec = await saveFile(kit, await png(100, 80), 'sized.png', 'v1s', 'gallery')
      expect(rec.media).toMatchObject({ width: 100, height: 80 })
      await kit.storage.variantJobsIdle()
      const original = join(kit.baseDir, rec.savedDir, rec.savedName)
      const read = headers.mock.contexts.filter(
        (c) => (c as unknown as { options: { input: { file?: string } } }).options.input.file === original,
      )
      expect(read).toEqual([])
      const files = (await kit.files()).filter((f) => f.includes(`_v/${rec.id}/`)).map((f) => f.split('/').pop())
      expect(files.sort()).toEqual(['20x20', '40x0.webp'])
    } finally {
      headers.mockRestore()
    }
  })

  it('lists an image within the box as made (the original serves), and leaves other files without variants', async () => {
    await saveFile(kit, await png(10, 8), 'small.png', 'v2', 'gallery')
    await saveFile(kit, new Blob(['text'], { type: 'text/plain' }), 'notes.txt', 'v2', 'gallery')
    await kit.storage.variantJobsIdle()
    const [small, notes] = await lookup(kit, 'v2')
    expect(Object.keys(small.variants).sort()).toEqual(['thumb', 'wide'])
    const res = await view(kit, small.variants.thumb)
    expect(res.status).toBe(200)
    expect((await sharp(Buffer.from(await res.arrayBuffer())).metadata()).width).toBe(10)
    expect(notes.variants).toBeUndefined()
    // A category without named variants answers no `variants` member either.
    const plain = await saveFile(kit, await png(30, 30), 'plain.png', 'v2')
    expect(plain.variants).toBeUndefined()
  })

  it('refuses a name the category does not have, and a name with w, h or format, with 400 {code, message}', async () => {
    const rec = await saveFile(kit, await png(50, 50), 'refuse.png', 'v3', 'gallery')
    const plain = await saveFile(kit, await png(50, 50), 'plain.png', 'v3')
    await kit.storage.variantJobsIdle()
    const generated = kit.storage.resizer.generated
    const cases: Array<[string, string]> = [
      [`/assets/storage/attach/view/${rec.id}?variant=huge`, 'unknown-variant'],
      [`/assets/storage/attach/view/${plain.id}?variant=thumb`, 'unknown-variant'],
      [`/assets/storage/attach/view/${rec.id}?variant=thumb&w=10`, 'bad-request'],
      [`/assets/storage/attach/view/${rec.id}?variant=thumb&format=png`, 'bad-request'],
      [`/assets/storage/attach/view/${rec.id}?variant=..%2Fx`, 'bad-request'],
      [`/assets/storage/attach/view/${rec.id}?variant=`, 'bad-request'],
      [`/assets/storage/attach/view/demo/v3/gallery/0?variant=nope`, 'unknown-variant'],
    ]
    for (const [url, code] of cases) {
      const res = await view(kit, url)
      const body = await res.json()
      expect(res.status, url).toBe(400)
      expect(body.code, url).toBe(code)
      expect(typeof body.message).toBe('string')
    }
    expect(kit.storage.resizer.generated).toBe(generated)
  })

  it('forgets a record’s variants when it is deleted', async () => {
    const rec = await saveFile(kit, await png(60, 60), 'gone.png', 'v4', 'gallery')
    await kit.storage.variantJobsIdle()
    expect(await kit.storage.repository.variants.ofRecords([rec.id])).toHaveLength(2)
    const res = await kit.call(`${API}/attach/demo/v4`, { method: 'POST', body: JSON.stringify({ _deleted: [{ id: rec.id }] }) })
    expect(res.status).toBe(200)
    expect(await kit.storage.repository.variants.ofRecords([rec.id])).toEqual([])
  })
})

describe('named variants without background work: made on first view', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite', { ...gallery, backgroundWork: false })
  })
  afterAll(() => kit?.cleanup())

  it('lists none until a view makes one, which is then listed and stored', async () => {
    const rec = await saveFile(kit, await png(100, 100), 'late.png', 'w1', 'gallery')
    expect(rec.variants).toEqual({})
    expect(kit.storage.resizer.generated).toBe(0)
    const res = await view(kit, `/assets/storage/attach/view/${rec.id}?variant=thumb`)
    expect(res.status).toBe(200)
    expect((await sharp(Buffer.from(await res.arrayBuffer())).metadata()).width).toBe(20)
    await until(async () => (await kit.storage.repository.variants.ofRecords([rec.id])).length === 1)
    const [item] = await lookup(kit, 'w1')
    expect(Object.keys(item.variants)).toEqual(['thumb'])
    // HEAD of the other one makes nothing.
    expect((await kit.call(`/assets/storage/attach/view/${rec.id}?variant=wide`, { method: 'HEAD', user: null })).status).toBe(200)
    expect(kit.storage.resizer.generated).toBe(1)
  })

  it('refuses pg-boss on SQLite at start', async () => {
    await expect(makeKit('sqlite', { ...gallery, config: { variantJobs: { queue: 'pg-boss' } } })).rejects.toMatchObject({
      code: 'config-invalid',
    })
  })
})

/** A second instance on `base`'s database and files, with its own pool. */
async function sibling(base: Kit, config: Record<string, unknown> = {}): Promise<Kit> {
  const { openDatabase } = await import('../repository/database.js')
  const db = await openDatabase({ type: 'postgres', url: base.dbLocation })
  const kit = await makeKit('postgres', {
    ...gallery,
    db,
    config: { directory: { baseDir: base.baseDir, tmpDir: base.tmpDir }, variantJobs: { concurrency: 2, ...config } },
  })
  const cleanup = kit.cleanup
  kit.cleanup = async () => {
    await cleanup()
    await db.destroy()
  }
  return kit
}

const rowsOf = async (kit: Kit, ids: number[]) => kit.storage.repository.variants.ofRecords(ids)

describe('named variants on PostgreSQL (pg-boss): several instances, one job each', () => {
  let a: Kit
  let b: Kit
  beforeAll(async () => {
    a = await makeKit('postgres', { ...gallery, config: { variantJobs: { concurrency: 2 } } })
    b = await sibling(a)
  }, 60_000)
  afterAll(async () => {
    await b?.cleanup()
    await a?.cleanup()
  })

  it('makes every named variant of 12 saves once, across two instances', async () => {
    const before = a.storage.resizer.generated + b.storage.resizer.generated
    const ids: number[] = []
    for (let i = 0; i < 12; i++) ids.push((await saveFile(i % 2 ? a : b, await png(64 + i, 48), `p${i}.png`, `pg${i}`, 'gallery')).id)
    await until(async () => (await rowsOf(a, ids)).length === 24)
    await Promise.all([a.storage.variantJobsIdle(), b.storage.variantJobsIdle()])
    expect(a.storage.resizer.generated + b.storage.resizer.generated - before).toBe(24)
    const [item] = await lookup(b, 'pg3')
    expect(Object.keys(item.variants).sort()).toEqual(['thumb', 'wide'])
    expect((await view(a, item.variants.wide)).headers.get('content-type')).toBe('image/webp')
  }, 90_000)

  it('keeps the jobs of an instance that only queues them, for another to make', async () => {
    const web = await sibling(a, { worker: false })
    try {
      const generated = web.storage.resizer.generated
      const rec = await saveFile(web, await png(90, 90), 'queued.png', 'pgq', 'gallery')
      await until(async () => (await rowsOf(a, [rec.id])).length === 2)
      expect(web.storage.resizer.generated).toBe(generated)
    } finally {
      await web.cleanup()
    }
  }, 60_000)
})

describe('named variants on PostgreSQL: a job whose worker died holding it', () => {
  let web: Kit
  let client: pg.Client
  beforeAll(async () => {
    // An instance that only queues: nothing takes its jobs but this test.
    web = await makeKit('postgres', { ...gallery, config: { variantJobs: { worker: false, jobTimeout: '2s' } } })
    client = new pg.Client({ connectionString: web.dbLocation })
    await client.connect()
  }, 60_000)
  afterAll(async () => {
    await client?.end()
    await web?.cleanup()
  })

  it('is tried again once job-timeout has passed, by another instance', async () => {
    const rec = await saveFile(web, await png(70, 70), 'held.png', 'held', 'gallery')
    // Taken as a worker takes a job (active, started), and never ended: what a killed instance leaves.
    const taken = await client.query(
      `UPDATE pgboss.job SET state = 'active', started_on = now() WHERE name = $1 AND data->>'fileId' = $2 AND state = 'created' RETURNING id`,
      [VARIANT_QUEUE_NAME, String(rec.id)],
    )
    expect(taken.rowCount).toBe(2)
    const worker = await sibling(web, { jobTimeout: '2s', pgBoss: { maintenanceIntervalSeconds: 1 } })
    try {
      await until(async () => (await rowsOf(worker, [rec.id])).length === 2, 60_000)
      const retried = await client.query(`SELECT retry_count FROM pgboss.job WHERE name = $1 AND data->>'fileId' = $2`, [
        VARIANT_QUEUE_NAME,
        String(rec.id),
      ])
      expect(retried.rows.length).toBe(2)
      expect(retried.rows.every((r) => r.retry_count >= 1)).toBe(true)
      const stored = await readFile(join(web.baseDir, rec.savedDir.slice(1), `_v/${rec.id}/20x20`))
      expect((await sharp(stored).metadata()).width).toBe(20)
    } finally {
      await worker.cleanup()
    }
  }, 90_000)
})
