/**
 * Migration 0005_media on SQLite, PostgreSQL and MySQL: a database of 0004 with rows keeps them, their
 * media null; a blob reserved with media gives it to the records made from it (a reuse too), read back
 * by every lookup.
 */
import { randomUUID } from 'node:crypto'
import { Migrator } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS, openTestDatabase, type TestDatabase } from '../../../../test/databases.js'
import { AttachRepository, type NewRecord } from './attach-repository.js'
import { BLOB_TABLE, FILE_TABLE } from './database.js'
import { attachMigrations, MIGRATION_LOCK_TABLE, MIGRATION_TABLE, migrateAttachSchema } from './migrations.js'

const SHA = 'cd'.repeat(32)
const MEDIA = { width: 200, height: 300, placeholder: 'HBkSHYSIeHiPiHh8eJd4eTN0EEQG' }

function record(refKey: string, sort = 0): NewRecord {
  return {
    refDomain: 'notice',
    refKey,
    refCategory: 'default',
    displayName: 'photo.jpg',
    ext: null,
    fmetaValue: null,
    sort,
    createdBy: 7,
    createdDt: new Date().toISOString(),
  }
}

for (const dialect of DIALECTS) {
  describe(`0005_media (${dialect})`, () => {
    let t: TestDatabase
    beforeAll(async () => {
      t = await openTestDatabase(dialect)
    })
    afterAll(() => t?.cleanup())

    it('upgrades a 0004 database with rows: they keep their values, media null', async () => {
      const upTo4 = Object.fromEntries(Object.entries(attachMigrations).filter(([name]) => name < '0005'))
      const old = new Migrator({
        db: t.db,
        provider: { getMigrations: async () => upTo4 },
        migrationTableName: MIGRATION_TABLE,
        migrationLockTableName: MIGRATION_LOCK_TABLE,
      })
      expect((await old.migrateToLatest()).error).toBeUndefined()
      const now = new Date().toISOString()
      const values = {
        store: 'local',
        saved_dir: '/notice/2025/01/old/',
        saved_name: 'old.jpg',
        file_size: 10,
        file_type: 'image/jpeg',
        sha256: SHA,
        ref_count: 1,
        created_dt: now,
        updated_dt: now,
      }
      await t.db.insertInto(BLOB_TABLE).values(values).execute()
      const blob = await t.db.selectFrom(BLOB_TABLE).select('id').executeTakeFirstOrThrow()
      await t.db
        .insertInto(FILE_TABLE)
        .values({
          ref_domain: 'notice',
          ref_key: 'old',
          ref_category: 'default',
          display_name: 'old.jpg',
          saved_name: 'old.jpg',
          saved_dir: '/notice/2025/01/old/',
          file_type: 'image/jpeg',
          file_size: 10,
          sort: 0,
          created_dt: now,
          deleted: 0,
          sha256: SHA,
          store: 'local',
          blob_id: Number(blob.id),
        })
        .execute()

      await migrateAttachSchema(t.db)
      await migrateAttachSchema(t.db)
      expect(await t.db.selectFrom(BLOB_TABLE).select(['saved_name', 'media']).execute()).toEqual([{ saved_name: 'old.jpg', media: null }])
      const repo = new AttachRepository(t.db)
      const [rec] = await repo.listByReference('notice', 'old')
      expect(rec).toMatchObject({ displayName: 'old.jpg', fileSize: 10, media: null })
    })

    it('a blob reserved with media gives it to its records, new and reused, read back by every lookup', async () => {
      const repo = new AttachRepository(t.db)
      const refKey = randomUUID().slice(0, 8)
      const blob = await repo.reserveBlob({
        store: 'local',
        savedDir: `/notice/2025/01/${refKey}/`,
        savedName: `${randomUUID()}.jpg`,
        fileSize: 1234,
        fileType: 'image/jpeg',
        sha256: SHA,
        createdDt: new Date().toISOString(),
        media: MEDIA,
      })
      const rec = await repo.createRecord(blob.id, record(refKey), { requireLive: false })
      expect(rec?.media).toEqual(MEDIA)
      const { created } = await repo.applySave({ refDomain: 'notice', refKey }, [], [{ blobId: blob.id, rec: record(refKey, 1) }])
      expect(created[0]?.media).toEqual(MEDIA)
      expect((await repo.findById(rec!.id))?.media).toEqual(MEDIA)
      expect((await repo.findByIds([rec!.id, created[0]!.id])).map((r) => r.media)).toEqual([MEDIA, MEDIA])
      expect((await repo.listByReferences('notice', [refKey])).map((r) => r.media)).toEqual([MEDIA, MEDIA])
      // A blob without media (a text file, a direct-to-cloud upload) stays null.
      const plain = await repo.reserveBlob({
        store: 'local',
        savedDir: `/notice/2025/01/${refKey}/`,
        savedName: `${randomUUID()}.txt`,
        fileSize: 5,
        fileType: 'text/plain',
        sha256: SHA,
        createdDt: new Date().toISOString(),
      })
      expect((await repo.createRecord(plain.id, record(refKey, 2), { requireLive: false }))?.media).toBeNull()
    })
  })
}
