/** The repository queries of the `attach-storage` command, and the named-variant rows, on each dialect. */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS, openTestDatabase, type TestDatabase } from '../../../../test/databases.js'
import { AttachRepository } from './attach-repository.js'
import { migrateAttachSchema } from './migrations.js'
import { variantSpec } from './variant-rows.js'

for (const dialect of DIALECTS) {
  describe(`operations queries on ${dialect}`, () => {
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

    async function add(domain: string, size: number, attach = true) {
      const savedDir = `/${domain}/2026/11/1/`
      const savedName = `${randomUUID()}.bin`
      const now = new Date().toISOString()
      const blob = await repo.reserveBlob({
        store: 'local',
        savedDir,
        savedName,
        fileSize: size,
        fileType: 'x/y',
        sha256: 'ab'.repeat(32),
        createdDt: now,
      })
      let recordId = 0
      if (attach) {
        const rec = await repo.createRecord(
          blob.id,
          {
            refDomain: domain,
            refKey: '1',
            refCategory: 'default',
            displayName: 'a',
            ext: 'bin',
            fmetaValue: null,
            sort: 0,
            createdBy: null,
            createdDt: now,
          },
          { requireLive: false, requirePending: true },
        )
        recordId = rec!.id
      }
      return { ...blob, recordId }
    }

    it('pages live blobs by domain, finds known places, counts, and switches a blob’s store', async () => {
      const a = await add('opsa', 10)
      const b = await add('opsa', 20)
      const c = await add('opsb', 30)
      const pending = await add('opsa', 40, false)
      const ids = async (where: { refDomain?: string; store?: string }, pageSize?: number) => {
        const out: number[] = []
        for await (const x of repo.operations.eachLiveBlob(where, pageSize)) out.push(x.id)
        return out
      }
      // One row a query: the walk goes on from the last id of each page.
      expect(await ids({ refDomain: 'opsa' }, 1)).toEqual([a.id, b.id])
      expect(await ids({ refDomain: 'opsa' }, 2)).toEqual([a.id, b.id])
      expect(await ids({ store: 'local' })).toEqual(expect.arrayContaining([a.id, b.id, c.id]))
      expect(await ids({})).not.toContain(pending.id)
      const aKey = a.savedDir.slice(1) + a.savedName
      const known = await repo.operations.knownKeys('local', [aKey, `${a.savedDir.slice(1)}nobody.bin`, a.savedName, '/x'])
      expect([...known]).toEqual([aKey])
      const stats = await repo.operations.stats()
      expect(stats.records.filter((r) => r.refDomain.startsWith('ops'))).toEqual([
        { refDomain: 'opsa', refCategory: 'default', store: 'local', count: 2, bytes: 30 },
        { refDomain: 'opsb', refCategory: 'default', store: 'local', count: 1, bytes: 30 },
      ])
      expect(await repo.operations.countDeadBlobs(new Date(Date.now() + 60_000).toISOString())).toBeGreaterThanOrEqual(1)
      expect(await repo.operations.switchBlobStore([a.id, b.id], 'local', 's3')).toBe(2)
      expect(await repo.operations.switchBlobStore([a.id], 'local', 's3')).toBe(0)
      expect((await repo.findBlobById(a.id))?.store).toBe('s3')
      const records = await repo.operations.pageDomainRecords('opsa', 0, 10)
      expect(records.map((r) => r.store)).toEqual(['s3', 's3'])
      expect(await ids({ refDomain: 'opsa', store: 'local' })).toEqual([])
    })

    const variantRow = (fileId: number, name: string, spec = '20x20', fileSize = 10) => ({
      fileId,
      name,
      spec,
      fileSize,
      fileType: 'image/png',
      createdDt: '2026-11-26T00:00:00.000Z',
    })

    it('records a variant once per record and name (again: the new spec replaces the old), reads them back, counts them', async () => {
      const a = (await add('vra', 100)).recordId
      const b = (await add('vra', 100)).recordId
      await repo.variants.record(variantRow(a, 'thumb'))
      await repo.variants.record(variantRow(a, 'wide', '40x0.webp'))
      await repo.variants.record(variantRow(b, 'thumb'))
      await repo.variants.record(variantRow(a, 'thumb', '30x30', 12))
      const rows = await repo.variants.ofRecords([a, b, a])
      expect(rows.map((r) => `${r.fileId}:${r.name}:${r.spec}:${r.fileSize}`).sort()).toEqual(
        [`${a}:thumb:30x30:12`, `${a}:wide:40x0.webp:10`, `${b}:thumb:20x20:10`].sort(),
      )
      expect(await repo.variants.ofRecords([])).toEqual([])
      expect(variantSpec({ w: 40, format: 'webp' })).toBe('40x0.webp')
      const counts = await repo.variants.countByName()
      expect(counts.find((c) => c.name === 'thumb')?.count).toBeGreaterThanOrEqual(2)
    })

    it('forgets a record’s variant rows when it is deleted, a domain’s on purge, and rows whose record is gone', async () => {
      const a = (await add('vrb', 100)).recordId
      const b = (await add('vrb', 100)).recordId
      const c = (await add('vrc', 100)).recordId
      for (const id of [a, b, c]) await repo.variants.record(variantRow(id, 'thumb'))
      await repo.markDeleted([a])
      expect(await repo.variants.ofRecords([a])).toEqual([])
      // A job that ended after the delete writes its row anyway: the sweep's forgetOrphans takes it.
      await repo.variants.record(variantRow(a, 'thumb'))
      expect(await repo.variants.forgetOrphans()).toBe(1)
      expect(await repo.variants.forgetDomain('vrb')).toBe(1)
      expect((await repo.variants.ofRecords([a, b, c])).map((r) => r.fileId)).toEqual([c])
    })
  })
}
