/** The repository queries of the `attach-storage` command, on each dialect. */
import { randomUUID } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS, openTestDatabase, type TestDatabase } from '../../../../test/databases.js'
import { AttachRepository } from './attach-repository.js'
import { migrateAttachSchema } from './migrations.js'

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
      if (attach) {
        await repo.createRecord(
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
      }
      return blob
    }

    it('pages live blobs by domain, finds known places, counts, and switches a blob’s store', async () => {
      const a = await add('opsa', 10)
      const b = await add('opsa', 20)
      const c = await add('opsb', 30)
      const pending = await add('opsa', 40, false)
      const firstPage = await repo.pageLiveBlobs(0, 1, { refDomain: 'opsa' })
      expect(firstPage.map((x) => x.id)).toEqual([a.id])
      expect((await repo.pageLiveBlobs(a.id, 10, { refDomain: 'opsa' })).map((x) => x.id)).toEqual([b.id])
      expect((await repo.pageLiveBlobs(0, 10, { store: 'local' })).map((x) => x.id)).toEqual(expect.arrayContaining([a.id, b.id, c.id]))
      expect((await repo.pageLiveBlobs(0, 100)).some((x) => x.id === pending.id)).toBe(false)
      const known = await repo.knownPlaces('local', [
        { savedDir: a.savedDir, savedName: a.savedName },
        { savedDir: a.savedDir, savedName: 'nobody.bin' },
      ])
      expect([...known]).toEqual([a.savedDir + a.savedName])
      const stats = await repo.stats()
      expect(stats.records.filter((r) => r.refDomain.startsWith('ops'))).toEqual([
        { refDomain: 'opsa', refCategory: 'default', store: 'local', count: 2, bytes: 30 },
        { refDomain: 'opsb', refCategory: 'default', store: 'local', count: 1, bytes: 30 },
      ])
      expect(await repo.countDeadBlobs(new Date(Date.now() + 60_000).toISOString())).toBeGreaterThanOrEqual(1)
      expect(await repo.switchBlobStore([a.id, b.id], 'local', 's3')).toBe(2)
      expect(await repo.switchBlobStore([a.id], 'local', 's3')).toBe(0)
      expect((await repo.findBlobById(a.id))?.store).toBe('s3')
      const records = await repo.pageDomainRecords('opsa', 0, 10)
      expect(records.map((r) => r.store)).toEqual(['s3', 's3'])
      expect(await repo.pageLiveBlobs(0, 10, { refDomain: 'opsa', store: 'local' })).toEqual([])
    })
  })
}
