import { randomUUID } from 'node:crypto'
import { Kysely, Migrator, MysqlDialect, PostgresDialect, sql } from 'kysely'
import { createPool as createMysqlPool } from 'mysql2'
import mysql from 'mysql2/promise'
import pg from 'pg'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS, openTestDatabase, type TestDatabase } from '../../../../test/databases.js'
import { AttachStorageError, isAttachError } from '../errors.js'
import { AttachRepository, type NewBlob, type NewRecord } from './attach-repository.js'
import type { MediaInfo } from '../model.js'
import { BLOB_TABLE, dialectOf, FILE_TABLE, openDatabase } from './database.js'
import { usesNodeSqlite } from './node-sqlite.js'
import { attachMigrations, MIGRATION_LOCK_TABLE, MIGRATION_TABLE, migrateAttachSchema } from './migrations.js'

const SHA = 'ab'.repeat(32)
const FIVE_GIB = 5 * 1024 ** 3

let seq = 0
const unique = (prefix: string) => `${prefix}-${++seq}-${randomUUID().slice(0, 8)}`

function blobInput(over: Partial<NewBlob> = {}): NewBlob {
  return {
    store: 'local',
    savedDir: `/notice/2025/01/${unique('k')}/`,
    savedName: `${randomUUID()}.pdf`,
    fileSize: 1234,
    fileType: 'application/pdf',
    sha256: SHA,
    createdDt: new Date().toISOString(),
    ...over,
  }
}

function recInput(over: Partial<NewRecord> = {}): NewRecord {
  return {
    refDomain: 'notice',
    refKey: '1',
    refCategory: 'default',
    displayName: 'report.pdf',
    ext: null,
    fmetaValue: null,
    sort: 0,
    createdBy: 7,
    createdDt: new Date().toISOString(),
    ...over,
  }
}

/** A second connection of its own, as another application instance would hold. */
interface Session {
  /** Runs a statement; `?` placeholders (turned into `$n` on PostgreSQL). */
  query(text: string, params?: unknown[]): Promise<void>
  /** Number of connections of this database waiting on a lock. */
  lockWaits(): Promise<number>
  close(): Promise<void>
}

async function openSession(dialect: 'postgres' | 'mysql', url: string): Promise<Session> {
  if (dialect === 'mysql') {
    const connection = await mysql.createConnection(url)
    return {
      query: async (text, params = []) => {
        await connection.query(text, params)
      },
      lockWaits: async () => {
        // A statement of another connection on this database running for over 100 ms: with this
        // session idle in its transaction, that can only be a wait on its locks. (INNODB_TRX does not
        // reliably list a waiting transaction on MariaDB 10.11.)
        const running = (since: string) =>
          `select count(*) as n from information_schema.processlist
            where db = database() and id <> connection_id() and command = 'Query' and ${since}`
        // time_ms is MariaDB's; MySQL has whole seconds only.
        const [rows] = await connection
          .query(running('time_ms > 100'))
          .catch((err: { errno?: number }) => (err.errno === 1054 ? connection.query(running('time >= 1')) : Promise.reject(err)))
        return Number((rows as Array<{ n: unknown }>)[0]?.n ?? 0)
      },
      close: () => connection.end(),
    }
  }
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  return {
    query: async (text, params = []) => {
      let n = 0
      await client.query(
        text.replace(/\?/g, () => `$${++n}`),
        params,
      )
    },
    lockWaits: async () => {
      const { rows } = await client.query(
        `select count(*)::int as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`,
      )
      return rows[0].n as number
    },
    close: () => client.end(),
  }
}

for (const dialect of DIALECTS) {
  describe(dialect, () => {
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

    /** A live record on a fresh blob. */
    async function attach(rec: Partial<NewRecord> = {}, blob: Partial<NewBlob> = {}) {
      const b = await repo.reserveBlob(blobInput(blob))
      const r = await repo.createRecord(b.id, recInput(rec), { requireLive: false })
      if (r === null) throw new Error('createRecord answered null on a pending blob')
      return r
    }

    it('reports its dialect', () => {
      expect(dialectOf(t.db)).toBe(dialect)
      expect(repo.dialect).toBe(dialect)
    })

    it('migrates idempotently, in its own migration table', async () => {
      await migrateAttachSchema(t.db)
      await migrateAttachSchema(t.db)
      const done = await t.db.selectFrom(MIGRATION_TABLE).select('name').execute()
      expect(done.map((r) => r.name)).toEqual(Object.keys(attachMigrations).sort())
      const tables = (await t.db.introspection.getTables({ withInternalKyselyTables: true })).map((x) => x.name)
      expect(tables).toEqual(
        expect.arrayContaining([BLOB_TABLE, FILE_TABLE, 'attach_variant', 'attach_migration', 'attach_migration_lock']),
      )
      expect(tables).not.toContain('kysely_migration')
    })

    it('fails with migration-failed and the cause when the schema cannot be created', async () => {
      const other = await openTestDatabase(dialect)
      try {
        // A foreign table squatting the name makes 0001 fail.
        await sql`create table attach_blob (x integer)`.execute(other.db)
        const err = await migrateAttachSchema(other.db).catch((e: unknown) => e)
        expect(isAttachError(err, 'migration-failed')).toBe(true)
        expect((err as AttachStorageError).cause).toBeDefined()
        expect((err as Error).message).toContain('0001_attach_tables')
      } finally {
        await other.cleanup()
      }
    })

    it('can run a failed migration again once its cause is gone (MySQL commits each DDL statement)', async () => {
      const other = await openTestDatabase(dialect)
      try {
        // 0001 creates attach_blob, then fails on the squatted attach_file.
        await sql`create table attach_file (x integer)`.execute(other.db)
        const err = await migrateAttachSchema(other.db).catch((e: unknown) => e)
        expect(isAttachError(err, 'migration-failed')).toBe(true)
        const tables = (await other.db.introspection.getTables()).map((x) => x.name)
        expect(tables).not.toContain(BLOB_TABLE)
        await sql`drop table attach_file`.execute(other.db)
        await migrateAttachSchema(other.db)
        const after = (await other.db.introspection.getTables()).map((x) => x.name)
        expect(after).toEqual(expect.arrayContaining([BLOB_TABLE, FILE_TABLE]))
        const done = await other.db.selectFrom(MIGRATION_TABLE).select('name').execute()
        expect(done.map((r) => r.name)).toEqual(Object.keys(attachMigrations).sort())
      } finally {
        await other.cleanup()
      }
    })

    it('compares keys exactly: case, trailing spaces and accents make other keys', async () => {
      const key = unique('Key')
      const variants = [key, key.toLowerCase(), key.toUpperCase(), `${key} `, `${key}\u00e9`, `${key}e\u0301`]
      expect(new Set(variants).size).toBe(variants.length)
      const recs = []
      for (const refKey of variants) recs.push(await attach({ refKey, refCategory: 'Img' }))
      for (const [i, refKey] of variants.entries()) {
        expect((await repo.listByReference('notice', refKey)).map((r) => r.id)).toEqual([recs[i]!.id])
        expect(await repo.countByReference('notice', refKey, 'Img')).toBe(1)
        expect(await repo.countByReference('notice', refKey, 'img')).toBe(0)
        expect(await repo.countByReference('Notice', refKey, 'Img')).toBe(0)
        expect((await repo.findById(recs[i]!.id))?.refKey).toBe(refKey)
      }
      expect((await repo.listByReferences('notice', [key, `${key} `])).map((r) => r.id).sort((a, b) => a - b)).toEqual([
        recs[0]!.id,
        recs[3]!.id,
      ])
      const ref = { refDomain: 'notice', refKey: key.toUpperCase(), refCategory: 'Img' }
      expect(await repo.updateSort(recs[0]!.id, ref, 3)).toBe(false)

      // Two blobs whose places differ only in case or a trailing space are two places.
      const place = blobInput({ savedName: 'Report.pdf' })
      await repo.reserveBlob(place)
      await repo.reserveBlob({ ...place, savedName: 'report.pdf' })
      await repo.reserveBlob({ ...place, savedName: 'Report.pdf ' })
      await repo.reserveBlob({ ...place, savedDir: place.savedDir.toUpperCase() })
      expect((await repo.findBlob(place.store, place.savedDir, 'report.pdf'))?.savedName).toBe('report.pdf')
      expect((await repo.findBlob(place.store, place.savedDir, 'Report.pdf '))?.savedName).toBe('Report.pdf ')
    })

    it('keeps long directories apart (the MySQL index holds a prefix of saved_dir)', async () => {
      const long = `/${'d'.repeat(300)}/${unique('x')}/`
      const a = await repo.reserveBlob(blobInput({ savedDir: `${long}a/`, savedName: 'same.bin' }))
      const b = await repo.reserveBlob(blobInput({ savedDir: `${long}b/`, savedName: 'same.bin' }))
      expect(a.id).not.toBe(b.id)
      expect((await repo.findBlob('local', `${long}b/`, 'same.bin'))?.id).toBe(b.id)
      await expect(repo.reserveBlob(blobInput({ savedDir: `${long}a/`, savedName: 'same.bin' }))).rejects.toThrow()
    })

    it('reserves a pending blob and finds it by place and by id', async () => {
      const input = blobInput()
      const blob = await repo.reserveBlob(input)
      expect(blob).toEqual({
        id: expect.any(Number),
        store: input.store,
        savedDir: input.savedDir,
        savedName: input.savedName,
        fileSize: input.fileSize,
        fileType: input.fileType,
        sha256: SHA,
        refCount: 0,
        createdDt: input.createdDt,
      })
      expect(await repo.findBlob(input.store, input.savedDir, input.savedName)).toEqual(blob)
      expect(await repo.findBlobById(blob.id)).toEqual(blob)
      expect(await repo.findBlob('other', input.savedDir, input.savedName)).toBeNull()
      expect(await repo.findBlobById(999_999_999)).toBeNull()
    })

    it('upgrades a 0001 database: existing blobs get no temporary name', async () => {
      const other = await openTestDatabase(dialect)
      try {
        const first = new Migrator({
          db: other.db,
          provider: { getMigrations: async () => ({ '0001_attach_tables': attachMigrations['0001_attach_tables']! }) },
          migrationTableName: MIGRATION_TABLE,
          migrationLockTableName: MIGRATION_LOCK_TABLE,
        })
        expect((await first.migrateToLatest()).error).toBeUndefined()
        const now = new Date().toISOString()
        await other.db
          .insertInto(BLOB_TABLE)
          .values({
            store: 'local',
            saved_dir: '/d/2025/01/1/',
            saved_name: 'old.bin',
            file_size: 1,
            file_type: 'x/y',
            sha256: SHA,
            ref_count: 0,
            created_dt: now,
            updated_dt: now,
          })
          .execute()
        await migrateAttachSchema(other.db)
        const row = await other.db.selectFrom(BLOB_TABLE).select(['saved_name', 'tmp_name']).executeTakeFirstOrThrow()
        expect(row).toEqual({ saved_name: 'old.bin', tmp_name: null })
        const upgraded = new AttachRepository(other.db)
        const b = await upgraded.reserveBlob(blobInput({ tmpName: 'new.bin' }))
        expect((await upgraded.findBlobsByTmpName('new.bin')).map((x) => x.id)).toEqual([b.id])
      } finally {
        await other.cleanup()
      }
    })

    it('finds the blobs of a temporary file by its name, whatever their place', async () => {
      const tmpName = `${randomUUID()}.txt`
      expect(await repo.findBlobsByTmpName(tmpName)).toEqual([])
      const a = await repo.reserveBlob(blobInput({ savedName: tmpName, savedDir: `/notice/2025/01/${unique('k')}/`, tmpName }))
      const b = await repo.reserveBlob(blobInput({ savedName: tmpName, savedDir: `/notice/2025/02/${unique('k')}/`, tmpName }))
      await repo.reserveBlob(blobInput()) // no temporary name
      expect((await repo.findBlobsByTmpName(tmpName)).map((x) => [x.id, x.savedDir])).toEqual([
        [a.id, a.savedDir],
        [b.id, b.savedDir],
      ])
    })

    it('binds the first record of a pending blob once: requirePending loses to an earlier record', async () => {
      const blob = await repo.reserveBlob(blobInput({ tmpName: `${randomUUID()}.pdf` }))
      expect(await repo.touchPendingBlob(blob.id)).toBe(true)
      const first = await repo.createRecord(blob.id, recInput({ refKey: unique('key') }), { requireLive: false, requirePending: true })
      expect(first).not.toBeNull()
      expect(await repo.createRecord(blob.id, recInput({ refKey: unique('key') }), { requireLive: false, requirePending: true })).toBeNull()
      expect(await repo.touchPendingBlob(blob.id)).toBe(false)
      expect(await repo.retireBlob(blob.id)).toBe(false)
      expect((await repo.findBlobById(blob.id))?.refCount).toBe(1)
    })

    it('retires a pending blob: no record binds to it any more, and the sweep lists it', async () => {
      const blob = await repo.reserveBlob(blobInput())
      expect(await repo.retireBlob(blob.id)).toBe(true)
      expect(await repo.retireBlob(blob.id)).toBe(false)
      for (const opts of [{ requireLive: false }, { requireLive: false, requirePending: true }, { requireLive: true }]) {
        expect(await repo.createRecord(blob.id, recInput(), opts)).toBeNull()
      }
      expect(await repo.touchPendingBlob(blob.id)).toBe(false)
      const dead = await repo.listDeadBlobs(new Date(Date.now() + 60_000).toISOString(), 10_000)
      expect(dead.map((b) => b.id)).toContain(blob.id)
      expect(await repo.purgeBlob(blob.id)).toBe(true)
      expect(await repo.findBlobById(blob.id)).toBeNull()
    })

    it('refuses a second blob at the same place', async () => {
      const input = blobInput()
      await repo.reserveBlob(input)
      await expect(repo.reserveBlob({ ...input, sha256: 'cd'.repeat(32) })).rejects.toThrow()
    })

    it('creates a record copying the file fields from its blob, and counts the reference', async () => {
      const blob = await repo.reserveBlob(blobInput({ fileSize: 42, fileType: 'image/png', store: 's3' }))
      const rec = recInput({ refKey: unique('key'), ext: 'cover', fmetaValue: 'main', sort: 3 })
      const created = await repo.createRecord(blob.id, rec, { requireLive: false })
      expect(created).toEqual({
        id: expect.any(Number),
        refDomain: 'notice',
        refKey: rec.refKey,
        refCategory: 'default',
        displayName: 'report.pdf',
        savedName: blob.savedName,
        savedDir: blob.savedDir,
        fileType: 'image/png',
        fileSize: 42,
        ext: 'cover',
        fmetaValue: 'main',
        sort: 3,
        createdBy: 7,
        createdDt: rec.createdDt,
        sha256: SHA,
        store: 's3',
        blobId: blob.id,
        media: null,
      })
      expect(await repo.findById(created!.id)).toEqual(created)
      expect((await repo.findBlobById(blob.id))?.refCount).toBe(1)

      // The reuse case: a second record on a live blob.
      const second = await repo.createRecord(blob.id, { ...rec, sort: 4 }, { requireLive: true })
      expect(second?.blobId).toBe(blob.id)
      expect((await repo.findBlobById(blob.id))?.refCount).toBe(2)
    })

    it('reads a record by id alike at once (SQLite) and through Kysely in a transaction: every field, focus and media included', async () => {
      const media: MediaInfo = { width: 4, height: 3, placeholder: 'data:image/png;base64,AAAA' }
      const full = await attach({ refKey: unique('key'), createdBy: 'user-a', ext: null, fmetaValue: null, sort: 9 }, { media })
      await repo.updateMetadata([{ id: full.id, focus: { x: 0.25, y: 0.75 } }])
      const plain = await attach({ refKey: unique('key'), createdBy: 42, ext: 'cover', fmetaValue: 'x' })
      for (const rec of [full, plain]) {
        const direct = await repo.findById(rec.id)
        const [listed] = await repo.findByIds([rec.id])
        const inTransaction = await t.db.transaction().execute((trx) => new AttachRepository(trx).findById(rec.id))
        expect(direct).toEqual(listed)
        expect(inTransaction).toEqual(listed)
      }
      expect(await repo.findById(full.id)).toMatchObject({ createdBy: 'user-a', focus: { x: 0.25, y: 0.75 }, media, sort: 9, ext: null })
      expect(await repo.findById(plain.id)).toMatchObject({ createdBy: 42, media: null, ext: 'cover', fmetaValue: 'x' })
      expect(await repo.findById(plain.id)).not.toHaveProperty('focus')
      await repo.markDeleted([plain.id])
      expect(await repo.findById(plain.id)).toBeNull()
      expect(await t.db.transaction().execute((trx) => new AttachRepository(trx).findById(plain.id))).toBeNull()
    })

    it('answers null for requireLive on a pending or dead blob, and for an unknown blob', async () => {
      const pending = await repo.reserveBlob(blobInput())
      expect(await repo.createRecord(pending.id, recInput(), { requireLive: true })).toBeNull()
      expect((await repo.findBlobById(pending.id))?.refCount).toBe(0)

      const r = await repo.createRecord(pending.id, recInput({ refKey: unique('key') }), { requireLive: false })
      const { orphanBlobs } = await repo.markDeleted([r!.id])
      expect(orphanBlobs.map((b) => b.id)).toEqual([pending.id])
      expect(await repo.createRecord(pending.id, recInput(), { requireLive: true })).toBeNull()
      expect((await repo.findBlobById(pending.id))?.refCount).toBe(0)

      expect(await repo.createRecord(987_654_321, recInput(), { requireLive: false })).toBeNull()
    })

    it('finds by ids in id order, leaving out unknown and deleted ids', async () => {
      const key = unique('key')
      const a = await attach({ refKey: key })
      const b = await attach({ refKey: key })
      const c = await attach({ refKey: key })
      await repo.markDeleted([b.id])
      const found = await repo.findByIds([c.id, 999_999_999, a.id, b.id, a.id])
      expect(found.map((r) => r.id)).toEqual([a.id, c.id])
      expect(await repo.findByIds([])).toEqual([])
    })

    it('lists a reference by category, sort, then id', async () => {
      const key = unique('key')
      const b2 = await attach({ refKey: key, refCategory: 'b', sort: 2 })
      const a1 = await attach({ refKey: key, refCategory: 'a', sort: 1 })
      const b0 = await attach({ refKey: key, refCategory: 'b', sort: 0 })
      const a0x = await attach({ refKey: key, refCategory: 'a', sort: 0 })
      const a0y = await attach({ refKey: key, refCategory: 'a', sort: 0 })
      await attach({ refKey: `${key}x`, refCategory: 'a' })
      await attach({ refKey: key, refDomain: 'other', refCategory: 'a' })

      const all = await repo.listByReference('notice', key)
      expect(all.map((r) => r.id)).toEqual([a0x.id, a0y.id, a1.id, b0.id, b2.id])
      const onlyB = await repo.listByReference('notice', key, 'b')
      expect(onlyB.map((r) => r.id)).toEqual([b0.id, b2.id])
      expect(await repo.listByReference('notice', key, 'none')).toEqual([])
    })

    it('counts only its own reference', async () => {
      const key = unique('key')
      await attach({ refKey: key, refCategory: 'img' })
      await attach({ refKey: key, refCategory: 'img' })
      const gone = await attach({ refKey: key, refCategory: 'img' })
      await repo.markDeleted([gone.id])
      await attach({ refKey: key, refCategory: 'doc' })
      await attach({ refKey: `${key}-2`, refCategory: 'img' })
      await attach({ refKey: key, refDomain: 'board', refCategory: 'img' })

      expect(await repo.countByReference('notice', key, 'img')).toBe(2)
      expect(await repo.countByReference('notice', key, 'doc')).toBe(1)
      expect(await repo.countByReference('notice', key, 'none')).toBe(0)
      expect(typeof (await repo.countByReference('notice', key, 'img'))).toBe('number')
    })

    it('lists several references by key, category, sort, then id', async () => {
      const k1 = `${unique('m')}-1`
      const k2 = k1.replace(/-1$/, '-2')
      const k2b = await attach({ refKey: k2, refCategory: 'b', sort: 0 })
      const k1a1 = await attach({ refKey: k1, refCategory: 'a', sort: 1 })
      const k2a = await attach({ refKey: k2, refCategory: 'a', sort: 5 })
      const k1a0 = await attach({ refKey: k1, refCategory: 'a', sort: 0 })
      const k1c = await attach({ refKey: k1, refCategory: 'c', sort: 0 })
      await attach({ refKey: `${k1}-other`, refCategory: 'a' })
      const deleted = await attach({ refKey: k1, refCategory: 'a', sort: 0 })
      await repo.markDeleted([deleted.id])

      const all = await repo.listByReferences('notice', [k2, k1, k1])
      expect(all.map((r) => r.id)).toEqual([k1a0.id, k1a1.id, k1c.id, k2a.id, k2b.id])
      const someCats = await repo.listByReferences('notice', [k1, k2], ['b', 'a'])
      expect(someCats.map((r) => r.id)).toEqual([k1a0.id, k1a1.id, k2a.id, k2b.id])
      expect(await repo.listByReferences('notice', [])).toEqual([])
      expect(await repo.listByReferences('notice', [k1], [])).toEqual([])
      expect(await repo.listByReferences('board', [k1, k2])).toEqual([])
    })

    it('updates sort only within the record’s own reference', async () => {
      const key = unique('key')
      const rec = await attach({ refKey: key, refCategory: 'img', sort: 0 })
      const ref = { refDomain: 'notice', refKey: key, refCategory: 'img' }

      expect(await repo.updateSort(rec.id, { ...ref, refKey: 'someone-else' }, 9)).toBe(false)
      expect(await repo.updateSort(rec.id, { ...ref, refCategory: 'doc' }, 9)).toBe(false)
      expect(await repo.updateSort(rec.id, { ...ref, refDomain: 'board' }, 9)).toBe(false)
      expect((await repo.findById(rec.id))?.sort).toBe(0)

      expect(await repo.updateSort(rec.id, ref, 5)).toBe(true)
      expect((await repo.findById(rec.id))?.sort).toBe(5)
      expect(await repo.updateSort(999_999_999, ref, 1)).toBe(false)
      await expect(repo.updateSort(rec.id, ref, -1)).rejects.toMatchObject({ code: 'bad-request', status: 400 })

      await repo.markDeleted([rec.id])
      expect(await repo.updateSort(rec.id, ref, 6)).toBe(false)
    })

    it('updates metadata in one call and never any other column', async () => {
      const key = unique('key')
      const a = await attach({ refKey: key, ext: 'old', fmetaValue: 'm' })
      const b = await attach({ refKey: key, sort: 1 })
      const gone = await attach({ refKey: key, sort: 2 })
      await repo.markDeleted([gone.id])

      const hostile = {
        id: a.id,
        displayName: 'renamed.pdf',
        ext: null,
        fmetaValue: 'x',
        sort: 4,
        // None of these may be written.
        savedName: '../../etc/passwd',
        savedDir: '/elsewhere/',
        refKey: 'stolen',
        refDomain: 'board',
        fileSize: 1,
        fileType: 'text/html',
        sha256: '00'.repeat(32),
        store: 'evil',
        blobId: 1,
        deleted: 1,
        createdBy: 666,
        createdDt: '1970-01-01T00:00:00.000Z',
      }
      const changed = await repo.updateMetadata([hostile, { id: b.id, ext: 'desc' }, { id: gone.id, sort: 9 }, { id: b.id }])
      expect(changed).toBe(2)

      expect(await repo.findById(a.id)).toEqual({ ...a, displayName: 'renamed.pdf', ext: null, fmetaValue: 'x', sort: 4 })
      expect(await repo.findById(b.id)).toEqual({ ...b, ext: 'desc' })
      expect(await repo.findById(gone.id)).toBeNull()
      expect(await repo.updateMetadata([])).toBe(0)
    })

    it('rejects a metadata update with a wrong type without writing anything', async () => {
      const rec = await attach({ refKey: unique('key') })
      const bad = [
        { id: rec.id, displayName: 'first.pdf' },
        { id: rec.id, sort: 'x' as unknown as number },
      ]
      await expect(repo.updateMetadata(bad)).rejects.toMatchObject({ code: 'bad-request' })
      expect((await repo.findById(rec.id))?.displayName).toBe('report.pdf')
    })

    it('counts references: deleting the first of two records keeps the blob, the second orphans it', async () => {
      const key = unique('key')
      const blob = await repo.reserveBlob(blobInput())
      const first = await repo.createRecord(blob.id, recInput({ refKey: key, sort: 0 }), { requireLive: false })
      const second = await repo.createRecord(blob.id, recInput({ refKey: key, sort: 1 }), { requireLive: true })
      expect((await repo.findBlobById(blob.id))?.refCount).toBe(2)

      const r1 = await repo.markDeleted([first!.id])
      expect(r1.deleted).toEqual([first])
      expect(r1.orphanBlobs).toEqual([])
      expect((await repo.findBlobById(blob.id))?.refCount).toBe(1)
      // Still referenced: the deleted row is gone for good.
      const left1 = await t.db.selectFrom(FILE_TABLE).select('id').where('blob_id', '=', blob.id).execute()
      expect(left1.map((r) => Number(r.id))).toEqual([second!.id])

      // Deleting again is a no-op, not a second decrement.
      expect(await repo.markDeleted([first!.id])).toEqual({ deleted: [], orphanBlobs: [] })
      expect((await repo.findBlobById(blob.id))?.refCount).toBe(1)

      const r2 = await repo.markDeleted([second!.id])
      expect(r2.deleted).toEqual([second])
      expect(r2.orphanBlobs).toEqual([{ ...blob, refCount: 0 }])
      // Orphaned: the row stays, marked deleted, until the blob is purged; it is invisible meanwhile.
      const left2 = await t.db.selectFrom(FILE_TABLE).select(['id', 'deleted', 'deleted_dt']).where('blob_id', '=', blob.id).execute()
      expect(left2.map((r) => [Number(r.id), Number(r.deleted)])).toEqual([[second!.id, 1]])
      expect(left2[0]?.deleted_dt).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/)
      expect(await repo.findById(second!.id)).toBeNull()
      expect(await repo.listByReference('notice', key)).toEqual([])
    })

    it('deletes two records of one blob in one call, decrementing by two', async () => {
      const key = unique('key')
      const blob = await repo.reserveBlob(blobInput())
      const ids: number[] = []
      for (let i = 0; i < 3; i++) {
        const r = await repo.createRecord(blob.id, recInput({ refKey: key, sort: i }), { requireLive: i > 0 })
        ids.push(r!.id)
      }
      const other = await attach({ refKey: key, sort: 9 })
      const res = await repo.markDeleted([ids[0]!, ids[1]!, other.id, 999_999_999])
      expect(res.deleted.map((r) => r.id)).toEqual([ids[0], ids[1], other.id])
      expect(res.orphanBlobs.map((b) => b.id)).toEqual([other.blobId])
      expect((await repo.findBlobById(blob.id))?.refCount).toBe(1)
      expect((await repo.listByReference('notice', key)).map((r) => r.id)).toEqual([ids[2]])
      expect(await repo.markDeleted([])).toEqual({ deleted: [], orphanBlobs: [] })
    })

    it('purges an orphan blob and its deleted rows, but never a referenced blob', async () => {
      const rec = await attach({ refKey: unique('key') })
      const { orphanBlobs } = await repo.markDeleted([rec.id])
      expect(await repo.purgeBlob(orphanBlobs[0]!.id)).toBe(true)
      expect(await repo.findBlobById(rec.blobId)).toBeNull()
      const rows = await t.db.selectFrom(FILE_TABLE).select('id').where('blob_id', '=', rec.blobId).execute()
      expect(rows).toEqual([])

      const live = await attach({ refKey: unique('key') })
      expect(await repo.purgeBlob(live.blobId)).toBe(false)
      expect(await repo.findById(live.id)).toEqual(live)
      expect((await repo.findBlobById(live.blobId))?.refCount).toBe(1)

      const pending = await repo.reserveBlob(blobInput())
      expect(await repo.purgeBlob(pending.id)).toBe(true)
      expect(await repo.findBlobById(pending.id)).toBeNull()
    })

    it('lists dead blobs older than a time: pending and orphaned, never live ones', async () => {
      const before = new Date(Date.now() - 1000).toISOString()
      const pending = await repo.reserveBlob(blobInput())
      const orphan = await attach({ refKey: unique('key') })
      await repo.markDeleted([orphan.id])
      const live = await attach({ refKey: unique('key') })
      const future = new Date(Date.now() + 60_000).toISOString()

      const dead = await repo.listDeadBlobs(future, 10_000)
      const deadIds = dead.map((b) => b.id)
      expect(deadIds).toEqual(expect.arrayContaining([pending.id, orphan.blobId]))
      expect(deadIds).not.toContain(live.blobId)
      expect(dead.every((b) => b.refCount === 0)).toBe(true)

      expect((await repo.listDeadBlobs(before, 10_000)).map((b) => b.id)).not.toContain(pending.id)
      expect(await repo.listDeadBlobs(future, 1)).toHaveLength(1)
      expect(await repo.listDeadBlobs(future, 0)).toEqual([])
    })

    it('never shows deleted rows', async () => {
      const key = unique('key')
      const rec = await attach({ refKey: key, refCategory: 'img' })
      const shared = await repo.createRecord(rec.blobId, recInput({ refKey: key, refCategory: 'img', sort: 1 }), { requireLive: true })
      await repo.markDeleted([rec.id, shared!.id])
      expect(await repo.findById(rec.id)).toBeNull()
      expect(await repo.findByIds([rec.id, shared!.id])).toEqual([])
      expect(await repo.listByReference('notice', key)).toEqual([])
      expect(await repo.listByReference('notice', key, 'img')).toEqual([])
      expect(await repo.listByReferences('notice', [key])).toEqual([])
      expect(await repo.countByReference('notice', key, 'img')).toBe(0)
    })

    it('maps createdBy: decimal strings become numbers, other strings stay, null stays', async () => {
      const key = unique('key')
      const cases: Array<[NewRecord['createdBy'], unknown]> = [
        [42, 42],
        ['42', 42],
        [9_007_199_254_740_991, 9_007_199_254_740_991],
        ['alice@example.com', 'alice@example.com'],
        ['3f2b8c1e-uuid-sub', '3f2b8c1e-uuid-sub'],
        ['007', '007'],
        ['99999999999999999999', '99999999999999999999'],
        [null, null],
      ]
      for (const [i, [input, expected]] of cases.entries()) {
        const r = await attach({ refKey: key, createdBy: input, sort: i })
        expect(r.createdBy).toEqual(expected)
        expect((await repo.findById(r.id))?.createdBy).toEqual(expected)
      }
    })

    it('keeps sizes above 2^32 exact (5 GiB) and ids as numbers', async () => {
      const rec = await attach({ refKey: unique('key') }, { fileSize: FIVE_GIB })
      expect(rec.fileSize).toBe(FIVE_GIB)
      const again = await repo.findById(rec.id)
      expect(again?.fileSize).toBe(FIVE_GIB)
      expect(typeof again?.id).toBe('number')
      expect(typeof again?.blobId).toBe('number')
      expect(typeof again?.sort).toBe('number')
      const blob = await repo.findBlobById(rec.blobId)
      expect(blob?.fileSize).toBe(FIVE_GIB)
      expect(typeof blob?.refCount).toBe('number')
      await expect(repo.reserveBlob(blobInput({ fileSize: -1 }))).rejects.toMatchObject({ code: 'bad-request' })
    })

    it('answers numbers over a host’s own Kysely without bigint parsing', async () => {
      const rec = await attach({ refKey: unique('key') }, { fileSize: FIVE_GIB })
      // A host's Kysely: on PostgreSQL a plain pg Pool answers bigint columns and count(*) as strings;
      // on MySQL a mysql2 pool with bigNumberStrings does too.
      const hostDb =
        dialect === 'postgres'
          ? new Kysely<any>({ dialect: new PostgresDialect({ pool: new pg.Pool({ connectionString: t.location }) }) })
          : dialect === 'mysql'
            ? new Kysely<any>({
                dialect: new MysqlDialect({ pool: createMysqlPool({ uri: t.location, supportBigNumbers: true, bigNumberStrings: true }) }),
              })
            : await openDatabase({ type: 'sqlite', file: t.location })
      const hostRepo = new AttachRepository(hostDb)
      try {
        expect(await hostRepo.findById(rec.id)).toEqual(rec)
        expect(await hostRepo.findBlobById(rec.blobId)).toMatchObject({ id: rec.blobId, fileSize: FIVE_GIB, refCount: 1 })
        expect(await hostRepo.countByReference('notice', rec.refKey, 'default')).toBe(1)
      } finally {
        await hostRepo.close()
      }
    })

    it('round-trips unicode names', async () => {
      const key = unique('키')
      const names = ['보고서 최종본 (2025).pdf', 'ñandú – ë.txt', '😀 emoji 𝄞.png', '日本語ファイル.docx', 'a\u0301-combining.txt']
      for (const [sort, displayName] of names.entries()) {
        await attach({ refKey: key, displayName, sort, ext: `설명 ${sort}` })
      }
      const listed = await repo.listByReference('notice', key)
      expect(listed.map((r) => r.displayName)).toEqual(names)
      expect(listed.map((r) => r.ext)).toEqual(names.map((_, i) => `설명 ${i}`))
      expect(listed.every((r) => r.refKey === key)).toBe(true)
    })

    it('stores SQL-looking strings literally', async () => {
      const evil = "x'); DROP TABLE attach_file; --"
      const key = `${unique('k')} ' OR '1'='1`
      const rec = await attach({ refKey: key, displayName: evil, ext: "'; DELETE FROM attach_blob; --", fmetaValue: '%_\\' })
      expect(await repo.findById(rec.id)).toEqual(rec)
      expect(rec.displayName).toBe(evil)
      expect(await repo.countByReference('notice', key, 'default')).toBe(1)
      expect(await repo.countByReference('notice', "' OR '1'='1", 'default')).toBe(0)
      expect((await repo.listByReferences('notice', [key])).map((r) => r.id)).toEqual([rec.id])
      const sorted = await repo.updateMetadata([{ id: rec.id, displayName: "'; UPDATE attach_file SET deleted = 1; --" }])
      expect(sorted).toBe(1)
      expect((await repo.findById(rec.id))?.displayName).toBe("'; UPDATE attach_file SET deleted = 1; --")
    })

    it('never leaves a record on a dead blob when reuse races the last delete', async () => {
      for (let i = 0; i < 30; i++) {
        const key = unique('race')
        const last = await attach({ refKey: key })
        // Alternate which statement starts first, so both outcomes are exercised.
        const reuse = () => repo.createRecord(last.blobId, recInput({ refKey: key, sort: 1 }), { requireLive: true })
        const remove = () => repo.markDeleted([last.id])
        const [reused, deletion] =
          i % 2 === 0 ? await Promise.all([reuse(), remove()]) : await Promise.all([remove(), reuse()]).then(([d, r]) => [r, d] as const)
        const blob = await repo.findBlobById(last.blobId)
        const liveOnBlob = await t.db
          .selectFrom(FILE_TABLE)
          .select('id')
          .where('blob_id', '=', last.blobId)
          .where('deleted', '=', 0)
          .execute()
        expect(deletion.deleted.map((r) => r.id)).toEqual([last.id])
        if (reused === null) {
          // The delete won: the blob is an orphan with nothing live on it.
          expect(deletion.orphanBlobs.map((b) => b.id)).toEqual([last.blobId])
          expect(blob?.refCount).toBe(0)
          expect(liveOnBlob).toEqual([])
        } else {
          // The reuse won: the blob stays referenced by the new record only.
          expect(deletion.orphanBlobs).toEqual([])
          expect(blob?.refCount).toBe(1)
          expect(liveOnBlob.map((r) => Number(r.id))).toEqual([reused.id])
        }
      }
    })

    it('never deadlocks when a delete naming unknown ids races reuse of the same blob', async () => {
      // On MySQL at REPEATABLE READ, a locking read of an absent id locks the gap after the last row,
      // where every new record goes: the delete then waits on the reuse's blob row while the reuse
      // waits on that gap, and InnoDB kills one of them.
      for (let i = 0; i < 30; i++) {
        const key = unique('gap')
        const a = await attach({ refKey: key })
        const b = await repo.createRecord(a.blobId, recInput({ refKey: key, sort: 1 }), { requireLive: true })
        const reuse = () => repo.createRecord(a.blobId, recInput({ refKey: key, sort: 2 }), { requireLive: true })
        const remove = () => repo.markDeleted([a.id, 2_000_000_000 + i])
        const [reused, deletion] =
          i % 2 === 0 ? await Promise.all([reuse(), remove()]) : await Promise.all([remove(), reuse()]).then(([d, r]) => [r, d] as const)
        expect(deletion.deleted.map((r) => r.id)).toEqual([a.id])
        expect(deletion.orphanBlobs).toEqual([])
        expect(reused?.blobId).toBe(a.blobId)
        expect((await repo.findBlobById(a.blobId))?.refCount).toBe(2)
        expect((await repo.listByReference('notice', key)).map((r) => r.id)).toEqual([b!.id, reused!.id])
      }
    })

    it('re-checks the blob after waiting for a concurrent delete or reuse to commit', async () => {
      if (dialect === 'sqlite') {
        // One connection serializes every transaction: the sequential outcomes are the whole story.
        const rec = await attach({ refKey: unique('key') })
        await repo.markDeleted([rec.id])
        expect(await repo.createRecord(rec.blobId, recInput(), { requireLive: true })).toBeNull()
        return
      }
      const other = await openSession(dialect, t.location)
      const waitForLockWait = async () => {
        for (let i = 0; i < 200; i++) {
          if ((await other.lockWaits()) > 0) return
          await new Promise((r) => setTimeout(r, 25))
        }
        throw new Error('the repository call never waited for the lock')
      }
      try {
        // Another transaction deletes the last record; reuse waits on the blob row, then sees 0.
        const a = await attach({ refKey: unique('key') })
        await other.query('begin')
        await other.query('update attach_file set deleted = 1 where id = ?', [a.id])
        await other.query('update attach_blob set ref_count = ref_count - 1 where id = ?', [a.blobId])
        const reuse = repo.createRecord(a.blobId, recInput(), { requireLive: true })
        reuse.catch(() => {}) // awaited below; not an unhandled rejection if the wait check fails first
        await waitForLockWait()
        await other.query('commit')
        expect(await reuse).toBeNull()
        expect((await repo.findBlobById(a.blobId))?.refCount).toBe(0)

        // Another transaction reuses the blob; the delete waits, then sees the new reference.
        const b = await attach({ refKey: unique('key') })
        await other.query('begin')
        await other.query('update attach_blob set ref_count = ref_count + 1 where id = ? and ref_count > 0', [b.blobId])
        const deletion = repo.markDeleted([b.id])
        deletion.catch(() => {})
        await waitForLockWait()
        await other.query('commit')
        const result = await deletion
        expect(result.deleted.map((r) => r.id)).toEqual([b.id])
        expect(result.orphanBlobs).toEqual([])
        expect((await repo.findBlobById(b.blobId))?.refCount).toBe(1)
      } finally {
        await other.query('rollback').catch(() => {})
        await other.close()
      }
    })
  })
}

describe('openDatabase', () => {
  it('creates the SQLite directory and sets its pragmas', async () => {
    const { mkdtemp, rm } = await import('node:fs/promises')
    const { tmpdir } = await import('node:os')
    const { join } = await import('node:path')
    const dir = await mkdtemp(join(tmpdir(), 'attach-open-'))
    const db = await openDatabase({ type: 'sqlite', file: join(dir, 'nested', 'deeper', 'a.db') })
    try {
      const pragma = async (name: string) => Object.values((await sql.raw(`pragma ${name}`).execute(db)).rows[0] as object)[0]
      expect(await pragma('journal_mode')).toBe('wal')
      // FULL (2): a commit is on the disk before it resolves (an acknowledged save survives a power loss).
      expect(await pragma('synchronous')).toBe(2)
      expect(await pragma('busy_timeout')).toBe(5000)
      expect(await pragma('foreign_keys')).toBe(1)
      expect(dialectOf(db)).toBe('sqlite')
    } finally {
      await db.destroy()
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('opens SQLite through node:sqlite from Node 24 on, better-sqlite3 before', () => {
    // better-sqlite3 12 built for Node 24.19+ aborts the process when a GC outside JavaScript collects
    // one of its objects (node-sqlite.ts).
    expect(usesNodeSqlite('20.20.2')).toBe(false)
    expect(usesNodeSqlite('22.22.0')).toBe(false)
    expect(usesNodeSqlite('24.0.0')).toBe(true)
    expect(usesNodeSqlite('24.21.0')).toBe(true)
    expect(usesNodeSqlite('26.1.0')).toBe(true)
  })

  it('answers the same on either SQLite binding: plain rows, BLOBs as Buffers, RETURNING, streams, insert ids', async () => {
    const db = await openDatabase({ type: 'sqlite', file: ':memory:' })
    try {
      await sql`create table t (id integer primary key autoincrement, name text not null unique, data blob, n integer)`.execute(db)
      const inserted = await db
        .insertInto('t')
        .values({ name: 'a', data: Buffer.from([0, 1, 255]), n: 2 ** 40 })
        .returning(['id', 'name'])
        .executeTakeFirstOrThrow()
      expect(inserted).toEqual({ id: 1, name: 'a' })
      const second = await db.insertInto('t').values({ name: 'b', data: null, n: -1 }).executeTakeFirstOrThrow()
      expect(second.insertId).toBe(2n)
      expect(second.numInsertedOrUpdatedRows).toBe(1n)
      const rows = await db.selectFrom('t').selectAll().orderBy('id').execute()
      expect(rows).toStrictEqual([
        { id: 1, name: 'a', data: Buffer.from([0, 1, 255]), n: 2 ** 40 },
        { id: 2, name: 'b', data: null, n: -1 },
      ])
      expect(Object.getPrototypeOf(rows[0])).toBe(Object.prototype)
      expect(Buffer.isBuffer(rows[0]!.data)).toBe(true)
      const updated = await db.updateTable('t').set({ n: 0 }).executeTakeFirstOrThrow()
      expect(updated.numUpdatedRows).toBe(2n)
      const streamed: unknown[] = []
      for await (const row of db.selectFrom('t').select('name').orderBy('id').stream()) streamed.push(row)
      expect(streamed).toStrictEqual([{ name: 'a' }, { name: 'b' }])
      // A failed statement rejects, and the transaction around it is rolled back.
      await expect(
        db.transaction().execute(async (trx) => {
          await trx.insertInto('t').values({ name: 'c' }).execute()
          await trx.insertInto('t').values({ name: 'a' }).execute()
        }),
      ).rejects.toThrow(/UNIQUE/)
      expect(await db.selectFrom('t').select('name').orderBy('id').execute()).toEqual([{ name: 'a' }, { name: 'b' }])
    } finally {
      await db.destroy()
    }
  })

  it('names the mysql2 package when MySQL is configured without it', async () => {
    const specifier = 'mysql2'
    const hasMysql2 = await import(specifier).then(
      () => true,
      () => false,
    )
    if (hasMysql2) {
      const db = await openDatabase({ type: 'mysql', url: 'mysql://root@127.0.0.1:1/none' })
      expect(dialectOf(db)).toBe('mysql')
      await db.destroy()
    } else {
      const err = await openDatabase({ type: 'mysql', url: 'mysql://root@127.0.0.1/none' }).catch((e: unknown) => e)
      expect(err).toBeInstanceOf(AttachStorageError)
      expect(err).toMatchObject({ code: 'config-invalid' })
      expect((err as Error).message).toContain('npm install mysql2')
    }
  })

  it('names the pg package when PostgreSQL is configured without it', async () => {
    const missing = (specifier: string) => {
      const err = new Error(`Cannot find package '${specifier}' imported from ${import.meta.url}`) as NodeJS.ErrnoException
      err.code = 'ERR_MODULE_NOT_FOUND'
      return Promise.reject(err)
    }
    const err = await openDatabase({ type: 'postgres', url: 'postgres://app@127.0.0.1:1/none' }, missing).catch((e: unknown) => e)
    expect(err).toBeInstanceOf(AttachStorageError)
    expect(err).toMatchObject({ code: 'config-invalid' })
    expect((err as Error).message).toBe('PostgreSQL support comes with the pg package: npm install pg')
    // A driver that is there but fails to load is reported with its own error, not as missing.
    const broken = () => Promise.reject(new Error('native binding mismatch'))
    const err2 = await openDatabase({ type: 'postgres', url: 'postgres://app@127.0.0.1:1/none' }, broken).catch((e: unknown) => e)
    expect(err2).toMatchObject({ code: 'config-invalid' })
    expect((err2 as Error).message).toBe('Loading the PostgreSQL driver pg failed: native binding mismatch')
    // A missing dependency of the driver is not the driver missing.
    const deep = () => missing('pg-pool')
    const err3 = await openDatabase({ type: 'postgres', url: 'postgres://app@127.0.0.1:1/none' }, deep).catch((e: unknown) => e)
    expect((err3 as Error).message).toMatch(/^Loading the PostgreSQL driver pg failed: Cannot find package 'pg-pool'/)
  })

  it('loads pg only for PostgreSQL: attach-storage imports without it, a PostgreSQL configuration fails at start', async () => {
    // A child process in which the package `pg` cannot be resolved, as in a project that never installed it.
    const { execFile } = await import('node:child_process')
    const { mkdtemp, rm } = await import('node:fs/promises')
    const { tmpdir } = await import('node:os')
    const { join } = await import('node:path')
    const { fileURLToPath } = await import('node:url')
    const root = fileURLToPath(new URL('../../../../', import.meta.url))
    const dir = await mkdtemp(join(tmpdir(), 'attach-nopg-'))
    const hook = `export async function resolve(specifier, context, next) {
      if (specifier === 'pg' || specifier.startsWith('pg/')) {
        const err = new Error("Cannot find package '" + specifier + "' imported from " + context.parentURL)
        err.code = 'ERR_MODULE_NOT_FOUND'
        throw err
      }
      return next(specifier, context)
    }`
    const script = `
      import { register } from 'node:module'
      register('data:text/javascript,' + encodeURIComponent(${JSON.stringify(hook)}))
      const out = {}
      out.pgHidden = await import('pg').then(() => false, (e) => e.code === 'ERR_MODULE_NOT_FOUND')
      const { createAttachStorage } = await import('attach-storage')
      out.imported = typeof createAttachStorage === 'function'
      const sqlite = await createAttachStorage({ config: { directory: { baseDir: ${JSON.stringify(join(dir, 'files'))} }, db: { file: ${JSON.stringify(join(dir, 'a.db'))} } } })
      out.sqliteStarted = true
      await sqlite.close()
      try {
        await createAttachStorage({ config: { directory: { baseDir: ${JSON.stringify(join(dir, 'files'))} }, db: { type: 'postgres', url: 'postgres://app@127.0.0.1:1/none' } } })
        out.postgres = 'started'
      } catch (err) {
        out.postgres = { code: err.code, message: err.message }
      }
      console.log(JSON.stringify(out))
    `
    try {
      const stdout = await new Promise<string>((resolvePromise, reject) =>
        execFile(
          process.execPath,
          ['--conditions=@attach-storage/source', '--import', 'tsx', '--input-type=module', '-e', script],
          { cwd: root, timeout: 120_000 },
          (err, out, errOut) => (err ? reject(new Error(`${err.message}\n${errOut}`)) : resolvePromise(out)),
        ),
      )
      expect(JSON.parse(stdout.trim().split('\n').pop()!)).toEqual({
        pgHidden: true,
        imported: true,
        sqliteStarted: true,
        postgres: { code: 'config-invalid', message: 'PostgreSQL support comes with the pg package: npm install pg' },
      })
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  }, 150_000)

  it('refuses an unknown database type', async () => {
    await expect(openDatabase({ type: 'oracle' } as never)).rejects.toMatchObject({ code: 'config-invalid' })
  })
})
