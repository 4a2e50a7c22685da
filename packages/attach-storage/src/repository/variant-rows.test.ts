/** The rows of named variants (`attach_variant`) on each dialect: upsert, read, forget with the record, by domain, orphans. */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS, openTestDatabase, type TestDatabase } from '../../../../test/databases.js'
import { AttachRepository } from './attach-repository.js'
import { migrateAttachSchema } from './migrations.js'
import { variantSpec } from './variant-rows.js'

for (const dialect of DIALECTS) {
  describe(`variant rows on ${dialect}`, () => {
    let t: TestDatabase
    let repo: AttachRepository
    beforeAll(async () => {
      t = await openTestDatabase(dialect)
      await migrateAttachSchema(t.db)
      repo = new AttachRepository(t.db)
    })
    afterAll(async () => {
      await t?.cleanup()
    })

    async function record(domain: string): Promise<number> {
      const now = new Date().toISOString()
      const blob = await repo.reserveBlob({
        store: 'local',
        savedDir: `/${domain}/2026/11/1/`,
        savedName: `${randomUUID()}.png`,
        fileSize: 100,
        fileType: 'image/png',
        sha256: 'ab'.repeat(32),
        createdDt: now,
      })
      const rec = await repo.createRecord(
        blob.id,
        {
          refDomain: domain,
          refKey: '1',
          refCategory: 'gallery',
          displayName: 'a.png',
          ext: null,
          fmetaValue: null,
          sort: 0,
          createdBy: null,
          createdDt: now,
        },
        { requireLive: false, requirePending: true },
      )
      return rec!.id
    }
    const row = (fileId: number, name: string, spec = '20x20', fileSize = 10) => ({
      fileId,
      name,
      spec,
      fileSize,
      fileType: 'image/png',
      createdDt: '2026-11-26T00:00:00.000Z',
    })

    it('records a variant once per record and name (again: the new spec replaces the old), reads them back, counts them', async () => {
      const a = await record('vra')
      const b = await record('vra')
      await repo.variants.record(row(a, 'thumb'))
      await repo.variants.record(row(a, 'wide', '40x0.webp'))
      await repo.variants.record(row(b, 'thumb'))
      await repo.variants.record(row(a, 'thumb', '30x30', 12))
      const rows = await repo.variants.ofRecords([a, b, a])
      expect(rows.map((r) => `${r.fileId}:${r.name}:${r.spec}:${r.fileSize}`).sort()).toEqual(
        [`${a}:thumb:30x30:12`, `${a}:wide:40x0.webp:10`, `${b}:thumb:20x20:10`].sort(),
      )
      expect(await repo.variants.ofRecords([])).toEqual([])
      expect(variantSpec({ w: 40, format: 'webp' })).toBe('40x0.webp')
      const counts = await repo.variants.countByName()
      expect(counts.find((c) => c.name === 'thumb')?.count).toBeGreaterThanOrEqual(2)
    })

    it('forgets a record’s rows when it is deleted, a domain’s on purge, and rows whose record is gone', async () => {
      const a = await record('vrb')
      const b = await record('vrb')
      const c = await record('vrc')
      for (const id of [a, b, c]) await repo.variants.record(row(id, 'thumb'))
      await repo.markDeleted([a])
      expect(await repo.variants.ofRecords([a])).toEqual([])
      // A job that ended after the delete writes its row anyway: the sweep's forgetOrphans takes it.
      await repo.variants.record(row(a, 'thumb'))
      expect(await repo.variants.forgetOrphans()).toBe(1)
      expect(await repo.variants.forgetDomain('vrb')).toBe(1)
      expect((await repo.variants.ofRecords([a, b, c])).map((r) => r.fileId)).toEqual([c])
    })
  })
}
