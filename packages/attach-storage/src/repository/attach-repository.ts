import { type CompiledQuery, type Kysely, sql, type Transaction } from 'kysely'
import { type DirectRead, directReadOf } from './database.js'
import { badRequest } from '../errors.js'
import { type ListResult, runList } from '../list/list-query.js'
import type { AttachmentRecord, BlobRecord, MediaInfo } from '../model.js'
import { BLOB_TABLE, type DbInteger, type DialectName, dialectOf, FILE_TABLE } from './database.js'
import { VariantRows } from './variant-rows.js'
import { OperationsRows } from './operations-rows.js'
import { PENDING_TABLE, PendingUploads } from './pending-uploads.js'
import {
  ATTACHMENT_LIST,
  assertId,
  assertSize,
  assertSort,
  type ConditionalListInput,
  chunk,
  type Db,
  type FileRow,
  IN_CHUNK,
  isDeadlock,
  isId,
  type MarkDeletedResult,
  type MetadataUpdate,
  mapBlob,
  mapRecord,
  type NewBlob,
  type NewRecord,
  RECORD_COLUMNS,
  type RecordReference,
  type RecordRow,
  type RecordValues,
  recordOfValues,
  recordRow,
  selectBlob,
  type Trx,
  toNumber,
} from './rows.js'
import { applySaveIn } from './save-batch.js'

export {
  ATTACHMENT_LIST,
  type ConditionalListInput,
  type MarkDeletedResult,
  type MetadataUpdate,
  mapRecord,
  type NewBlob,
  type NewRecord,
  type RecordReference,
}

/** A MySQL lock not taken at once: `NOWAIT` (MySQL 3572) or MariaDB's lock wait timeout (1205). */
const isLockBusy = (err: unknown) => {
  const errno = (err as { errno?: unknown } | null)?.errno
  return errno === 3572 || errno === 1205
}

/** How many times a transaction chosen as a deadlock victim is tried in all. */
const DEADLOCK_ATTEMPTS = 4

/**
 * The attachment records and the blobs (physical files) they point at, over a Kysely instance of SQLite,
 * PostgreSQL or MySQL. Rows marked deleted are never returned by the find/list/count methods.
 *
 * Reference counting: a blob's `ref_count` is the number of live records pointing at it. A blob at 0 is
 * either pending (reserved, file being written, not attached yet) or an orphan whose file must be
 * deleted; {@link listDeadBlobs} finds both once they are old enough, {@link purgeBlob} removes the rows.
 * A blob at -1 is retired: a pending blob given up by a later attempt, whose file (if any) is on its way
 * back to the temporary area; nothing can bind a record to it any more, and the sweep removes it.
 */
export class AttachRepository {
  readonly #db: Db
  readonly #dialect: DialectName

  #findByIdQuery: CompiledQuery<RecordRow> | undefined
  /** SQLite: the record read of a view at once when the connection is free (see {@link DirectRead}). */
  readonly #directRead: DirectRead | undefined

  /** The named variants made for records (`attach_variant`). */
  readonly variants: VariantRows

  constructor(db: Kysely<any>) {
    this.#db = db as Db
    this.#dialect = dialectOf(db)
    this.#directRead = db.isTransaction ? undefined : directReadOf(db)
    this.variants = new VariantRows(this.#db, this.#dialect)
    this.operations = new OperationsRows(this.#db, (fn) => this.#transaction(fn))
  }

  /** The queries of the `attach-storage` command. */
  readonly operations: OperationsRows

  /** The uploads not committed yet, per user (`attach_pending`, service/quota.ts). */
  get pending(): PendingUploads {
    return new PendingUploads(this.#db, this.#dialect)
  }

  /** The dialect of the underlying database. */
  get dialect(): DialectName {
    return this.#dialect
  }

  /** The Kysely instance the repository works over (a host's transaction for {@link within}'s). */
  get db(): Kysely<any> {
    return this.#db
  }

  /**
   * The same repository with every statement on the host's transaction `trx` (a commit in the host's
   * transaction): its own transactions run their work directly in `trx`, and SQLite's direct read (which
   * waits for the free connection, held by `trx`) is off.
   */
  within(trx: Transaction<any>): AttachRepository {
    return new AttachRepository(trx)
  }

  /**
   * Inside a transaction: takes the lock of the temporary file `tmpName`'s quota row (`attach_pending`)
   * until that transaction ends, without waiting. `busy` when another transaction holds it (a commit of
   * the same file in flight), `none` when the name has no row (nothing to lock: the commit goes on
   * unguarded). SQLite runs one writer at a time: always `held`.
   */
  async claimTmpName(tmpName: string): Promise<'held' | 'busy' | 'none'> {
    if (this.#dialect === 'sqlite') return 'held'
    const db = this.#db as unknown as Kysely<any>
    const row = (q: any) => q.selectFrom(PENDING_TABLE).select('name').where('name', '=', tmpName)
    if (this.#dialect === 'mysql') {
      // NOWAIT (MySQL 8, MariaDB 10.3+; SKIP LOCKED needs MariaDB 10.6): a held lock fails the statement
      // only, the transaction goes on.
      try {
        return (await row(db).forUpdate().noWait().executeTakeFirst()) ? 'held' : 'none'
      } catch (err) {
        if (isLockBusy(err)) return 'busy'
        throw err
      }
    }
    if (await row(db).forUpdate().skipLocked().executeTakeFirst()) return 'held'
    return (await row(db).executeTakeFirst()) ? 'busy' : 'none'
  }

  /**
   * Runs `fn` over a repository in a transaction of its own that holds the claim of `tmpName` (see
   * {@link claimTmpName}; `none` when there is no row to hold); answers `busy`, without running `fn`,
   * while a host's transaction commits that temporary file.
   */
  async whileClaimed<T>(tmpName: string, fn: (repo: AttachRepository, claim: 'held' | 'none') => Promise<T>): Promise<T | 'busy'> {
    return this.#transaction(async (trx) => {
      const repo = this.within(trx)
      const claim = await repo.claimTmpName(tmpName)
      return claim === 'busy' ? 'busy' : fn(repo, claim)
    })
  }

  /**
   * Runs `fn` in a transaction. MySQL: at READ COMMITTED, like PostgreSQL's default, because InnoDB's
   * REPEATABLE READ locks the gaps around what a locking read did not find (an unknown id passed to
   * {@link markDeleted} locks the end of the table, where every new record goes), which deadlocks a
   * delete against a concurrent reuse. A transaction the server still picks as a deadlock victim
   * (MySQL 1213, PostgreSQL 40P01) is rolled back whole, so it is run again, a few times at most.
   */
  async #transaction<T>(fn: (trx: Trx) => Promise<T>): Promise<T> {
    // Within a host's transaction: Kysely nests none, and the host's transaction is what commits.
    if (this.#db.isTransaction) return fn(this.#db as Trx)
    for (let attempt = 1; ; attempt++) {
      try {
        const builder = this.#db.transaction()
        return await (this.#dialect === 'mysql' ? builder.setIsolationLevel('read committed') : builder).execute(fn)
      } catch (err) {
        if (attempt >= DEADLOCK_ATTEMPTS || this.#dialect === 'sqlite' || !isDeadlock(err)) throw err
        await new Promise((resolve) => setTimeout(resolve, Math.floor(Math.random() * 20 * attempt)))
      }
    }
  }

  /**
   * SQLite answers each statement without giving the event loop a turn: between the chunks of a long
   * transaction, timers and other requests get one (their own queries wait for the connection as they
   * would anyway).
   */
  async #breathe(): Promise<void> {
    if (this.#dialect === 'sqlite') await new Promise((resolve) => setTimeout(resolve, 0))
  }

  /** Inserts a pending blob (`ref_count` 0): its file is being written and no record uses it yet. */
  async reserveBlob(blob: NewBlob): Promise<BlobRecord> {
    assertSize(blob.fileSize)
    const values = {
      store: blob.store,
      saved_dir: blob.savedDir,
      saved_name: blob.savedName,
      file_size: blob.fileSize,
      file_type: blob.fileType,
      sha256: blob.sha256,
      ref_count: 0,
      created_dt: blob.createdDt,
      updated_dt: new Date().toISOString(),
      tmp_name: blob.tmpName ?? null,
      media: blob.media ? JSON.stringify(blob.media) : null,
    }
    return this.#transaction(async (trx) => {
      if (this.#dialect === 'mysql') {
        const result = await trx.insertInto(BLOB_TABLE).values(values).executeTakeFirstOrThrow()
        return mapBlob(await selectBlob(trx, Number(result.insertId)))
      }
      return mapBlob(await trx.insertInto(BLOB_TABLE).values(values).returningAll().executeTakeFirstOrThrow())
    })
  }

  /**
   * Binds a new record to blob `blobId` and counts the reference, in one transaction. With
   * `requireLive`, only a blob still referenced by a live record is accepted (the reuse case: a blob at
   * 0 is being deleted); without it, a pending blob is accepted too, and with `requirePending` only a
   * pending one (the first record of a moved temporary file: of two attempts racing, one wins). A retired
   * blob (-1) is never accepted. Answers null when the blob is gone or not accepted.
   */
  async createRecord(
    blobId: number,
    rec: NewRecord,
    opts: { requireLive: boolean; requirePending?: boolean },
  ): Promise<AttachmentRecord | null> {
    assertId(blobId, 'blobId')
    assertSort(rec.sort)
    return this.#transaction(async (trx) => {
      let claim = trx
        .updateTable(BLOB_TABLE)
        .set({ ref_count: sql<number>`ref_count + 1`, updated_dt: new Date().toISOString() })
        .where('id', '=', blobId)
      if (opts.requireLive) claim = claim.where('ref_count', '>', 0)
      else if (opts.requirePending) claim = claim.where('ref_count', '=', 0)
      else claim = claim.where('ref_count', '>=', 0)
      const claimed = await claim.executeTakeFirst()
      if (Number(claimed.numUpdatedRows) === 0) return null

      const blob = await selectBlob(trx, blobId)
      const values = recordRow(rec, blob)
      if (this.#dialect === 'mysql') {
        const result = await trx.insertInto(FILE_TABLE).values(values).executeTakeFirstOrThrow()
        const row = await trx.selectFrom(FILE_TABLE).selectAll().where('id', '=', Number(result.insertId)).executeTakeFirstOrThrow()
        return mapRecord(row)
      }
      return mapRecord(await trx.insertInto(FILE_TABLE).values(values).returningAll().executeTakeFirstOrThrow())
    })
  }

  /** The blob stored at that place, whatever its reference count. */
  async findBlob(store: string, savedDir: string, savedName: string): Promise<BlobRecord | null> {
    const row = await this.#db
      .selectFrom(BLOB_TABLE)
      .selectAll()
      .where('store', '=', store)
      .where('saved_dir', '=', savedDir)
      .where('saved_name', '=', savedName)
      .executeTakeFirst()
    return row ? mapBlob(row) : null
  }

  /**
   * The blobs made from the temporary file `tmpName` (see {@link NewBlob.tmpName}), whatever their place
   * and reference count, oldest first. A generated name is unique, so there is one, or a few left by
   * interrupted attempts of a confirmed save.
   */
  async findBlobsByTmpName(tmpName: string): Promise<BlobRecord[]> {
    const rows = await this.#db.selectFrom(BLOB_TABLE).selectAll().where('tmp_name', '=', tmpName).orderBy('id').execute()
    return rows.map(mapBlob)
  }

  /**
   * Marks a pending blob as in use again (its `updated_dt` becomes now), so that the sweep leaves it to
   * the save resuming it, and records `tmpName` when given. False when it is no longer pending.
   */
  async touchPendingBlob(id: number, tmpName?: string): Promise<boolean> {
    if (!isId(id)) return false
    const result = await this.#db
      .updateTable(BLOB_TABLE)
      .set(tmpName === undefined ? { updated_dt: new Date().toISOString() } : { updated_dt: new Date().toISOString(), tmp_name: tmpName })
      .where('id', '=', id)
      .where('ref_count', '=', 0)
      .executeTakeFirst()
    return Number(result.numUpdatedRows) > 0
  }

  /**
   * Retires a pending blob (`ref_count` 0 to -1): no record can be bound to it any more, so its file may
   * be taken away. False when it is not pending (a record claimed it first, or it is gone).
   */
  async retireBlob(id: number): Promise<boolean> {
    if (!isId(id)) return false
    const result = await this.#db
      .updateTable(BLOB_TABLE)
      .set({ ref_count: -1, updated_dt: new Date().toISOString() })
      .where('id', '=', id)
      .where('ref_count', '=', 0)
      .executeTakeFirst()
    return Number(result.numUpdatedRows) > 0
  }

  async findBlobById(id: number): Promise<BlobRecord | null> {
    if (!isId(id)) return null
    const row = await this.#db.selectFrom(BLOB_TABLE).selectAll().where('id', '=', id).executeTakeFirst()
    return row ? mapBlob(row) : null
  }

  /**
   * Records what a stored file is, learnt after it was kept (a video's length, a PDF's pages): on its
   * blob and on every record pointing at it, in one transaction.
   */
  async setMedia(blobId: number, media: MediaInfo): Promise<void> {
    if (!isId(blobId)) return
    const json = JSON.stringify(media)
    await this.#transaction(async (trx) => {
      await trx.updateTable(BLOB_TABLE).set({ media: json }).where('id', '=', blobId).execute()
      await trx.updateTable(FILE_TABLE).set({ media: json }).where('blob_id', '=', blobId).execute()
    })
  }

  /** Asks the database one trivial query (`select 1`); throws when it does not answer. */
  async ping(): Promise<void> {
    await sql`select 1 as one`.execute(this.#db)
  }

  /** A live record by id. */
  async findById(id: number): Promise<AttachmentRecord | null> {
    if (!isId(id)) return null
    // The hot path of every view by id: the query is compiled once, only its parameters change.
    this.#findByIdQuery ??= this.#db.selectFrom(FILE_TABLE).select(RECORD_COLUMNS).where('id', '=', 0).where('deleted', '=', 0).compile()
    const parameters = [id, 0]
    const values = this.#directRead?.(this.#findByIdQuery.sql, parameters)
    if (values !== undefined) return values && recordOfValues(values as RecordValues)
    const row = (await this.#db.executeQuery<RecordRow>({ ...this.#findByIdQuery, parameters })).rows[0]
    return row ? mapRecord(row) : null
  }

  /** The live records among `ids`, ordered by id; unknown and deleted ids are left out. */
  async findByIds(ids: number[]): Promise<AttachmentRecord[]> {
    const wanted = [...new Set(ids.filter(isId))]
    const rows: FileRow[] = []
    for (const part of chunk(wanted, IN_CHUNK)) {
      rows.push(...(await this.#db.selectFrom(FILE_TABLE).selectAll().where('id', 'in', part).where('deleted', '=', 0).execute()))
    }
    return rows.map(mapRecord).sort((a, b) => a.id - b.id)
  }

  /** Ids of the live records that point at a stored file (blob), lowest first, at most `limit`. */
  async recordIdsOfBlob(blobId: number, limit: number): Promise<number[]> {
    const q = this.#db.selectFrom(FILE_TABLE).select('id').where('blob_id', '=', blobId).where('deleted', '=', 0)
    return (await q.orderBy('id').limit(limit).execute()).map((r) => toNumber(r.id))
  }

  /** The live records of a reference (all categories when `refCategory` is omitted), by category, sort, id. */
  async listByReference(refDomain: string, refKey: string, refCategory?: string): Promise<AttachmentRecord[]> {
    let q = this.#db
      .selectFrom(FILE_TABLE)
      .selectAll()
      .where('ref_domain', '=', refDomain)
      .where('ref_key', '=', refKey)
      .where('deleted', '=', 0)
    if (refCategory !== undefined) q = q.where('ref_category', '=', refCategory)
    const rows = await q.orderBy('ref_category').orderBy('sort').orderBy('id').execute()
    return rows.map(mapRecord)
  }

  /** Number of live records of exactly that reference. */
  async countByReference(refDomain: string, refKey: string, refCategory: string): Promise<number> {
    const row = await this.#db
      .selectFrom(FILE_TABLE)
      .select((eb) => eb.fn.countAll<DbInteger>().as('n'))
      .where('ref_domain', '=', refDomain)
      .where('ref_key', '=', refKey)
      .where('ref_category', '=', refCategory)
      .where('deleted', '=', 0)
      .executeTakeFirstOrThrow()
    return toNumber(row.n)
  }

  /**
   * The live records of several keys of one domain, by key, category, sort, id. `refCategories`
   * omitted means every category; an empty list (like an empty `refKeys`) matches nothing.
   */
  async listByReferences(refDomain: string, refKeys: string[], refCategories?: string[]): Promise<AttachmentRecord[]> {
    const keys = [...new Set(refKeys)]
    if (keys.length === 0) return []
    let q = this.#db
      .selectFrom(FILE_TABLE)
      .selectAll()
      .where('ref_domain', '=', refDomain)
      .where('ref_key', 'in', keys)
      .where('deleted', '=', 0)
    if (refCategories !== undefined) {
      const categories = [...new Set(refCategories)]
      if (categories.length === 0) return []
      q = q.where('ref_category', 'in', categories)
    }
    const rows = await q.orderBy('ref_key').orderBy('ref_category').orderBy('sort').orderBy('id').execute()
    return rows.map(mapRecord)
  }

  /** The conditional list of live records of several references, by {@link ATTACHMENT_LIST}. */
  async listConditional(input: ConditionalListInput): Promise<ListResult<AttachmentRecord>> {
    const { refDomain, refKeys, refCategories, cap } = input
    return runList(this.#db.selectFrom(FILE_TABLE).selectAll(), ATTACHMENT_LIST, input.list, {
      enforce: (qb) => {
        let q = qb.where('ref_domain', '=', refDomain).where('deleted', '=', 0).where('ref_key', 'in', refKeys)
        q = refCategories.length ? q.where('ref_category', 'in', refCategories) : q.where(sql<boolean>`1 = 0`)
        return cap === undefined ? q : q.limit(cap + 1)
      },
      mapRow: (row) => mapRecord(row as FileRow),
    })
  }

  /**
   * The database work of one confirmed save, in one transaction: the re-sorts (a few statements per
   * category, whatever their number) and the records of reused files (`requireLive`: one claim per blob,
   * inserted together). Answers, in the input's order, whether each re-sort found its live record of
   * `ref` (`id` and `refCategory`), and each reuse's record, or null when its blob is no longer live.
   * Give each `(id, refCategory)` once.
   */
  async applySave(
    ref: { refDomain: string; refKey: string },
    sorts: Array<{ id: number; refCategory: string; sort: number }>,
    reuses: Array<{ blobId: number; rec: NewRecord }>,
  ): Promise<{ sorted: boolean[]; created: Array<AttachmentRecord | null> }> {
    for (const s of sorts) assertSort(s.sort)
    for (const r of reuses) {
      assertId(r.blobId, 'blobId')
      assertSort(r.rec.sort)
    }
    if (sorts.length === 0 && reuses.length === 0) return { sorted: [], created: [] }
    return this.#transaction((trx) => applySaveIn(trx, this.#dialect, () => this.#breathe(), ref, sorts, reuses))
  }

  /** Sets the `sort` of a live record, only when it belongs to `ref`. True when a row was updated. */
  async updateSort(id: number, ref: RecordReference, sort: number): Promise<boolean> {
    assertSort(sort)
    if (!isId(id)) return false
    const result = await this.#db
      .updateTable(FILE_TABLE)
      .set({ sort })
      .where('id', '=', id)
      .where('ref_domain', '=', ref.refDomain)
      .where('ref_key', '=', ref.refKey)
      .where('ref_category', '=', ref.refCategory)
      .where('deleted', '=', 0)
      .executeTakeFirst()
    return Number(result.numUpdatedRows) > 0
  }

  /**
   * Applies metadata changes to live records in one transaction; answers the number of rows updated.
   * Only `displayName`, `ext`, `fmetaValue` and `sort` can be written; any other property is ignored.
   *
   * @throws AttachStorageError `bad-request` (400) when a value has the wrong type; nothing is written
   */
  async updateMetadata(updates: MetadataUpdate[]): Promise<number> {
    const planned: Array<{
      id: number
      set: {
        display_name?: string
        ext?: string | null
        fmeta_value?: string | null
        sort?: number
        focus_x?: number | null
        focus_y?: number | null
      }
    }> = []
    for (const u of updates) {
      if (!isId(u.id)) throw badRequest(`Invalid attachment id ${JSON.stringify(u.id)}`)
      const set: (typeof planned)[number]['set'] = {}
      if (u.displayName !== undefined) {
        if (typeof u.displayName !== 'string' || u.displayName === '') throw badRequest('displayName must be a non-empty string')
        set.display_name = u.displayName
      }
      if (u.ext !== undefined) {
        if (u.ext !== null && typeof u.ext !== 'string') throw badRequest('ext must be a string or null')
        set.ext = u.ext
      }
      if (u.fmetaValue !== undefined) {
        if (u.fmetaValue !== null && typeof u.fmetaValue !== 'string') throw badRequest('fmetaValue must be a string or null')
        set.fmeta_value = u.fmetaValue
      }
      if (u.sort !== undefined) {
        assertSort(u.sort)
        set.sort = u.sort
      }
      if (u.focus !== undefined) {
        set.focus_x = u.focus?.x ?? null
        set.focus_y = u.focus?.y ?? null
      }
      if (Object.keys(set).length > 0) planned.push({ id: u.id, set })
    }
    if (planned.length === 0) return 0
    return this.#transaction(async (trx) => {
      let changed = 0
      for (const { id, set } of planned) {
        const result = await trx.updateTable(FILE_TABLE).set(set).where('id', '=', id).where('deleted', '=', 0).executeTakeFirst()
        changed += Number(result.numUpdatedRows)
      }
      return changed
    })
  }

  /**
   * Deletes live records, in one transaction: marks them deleted, takes them off their blobs' counts,
   * hard-deletes those whose blob is still used, and answers the blobs that reached 0. The caller
   * deletes those blobs' files, then calls {@link purgeBlob} (which removes the remaining rows).
   */
  async markDeleted(ids: number[]): Promise<MarkDeletedResult> {
    const wanted = [...new Set(ids.filter(isId))].sort((a, b) => a - b)
    if (wanted.length === 0) return { deleted: [], orphanBlobs: [] }
    return this.#transaction(async (trx) => {
      const now = new Date().toISOString()
      const live: FileRow[] = []
      for (const part of chunk(wanted, IN_CHUNK)) {
        let q = trx.selectFrom(FILE_TABLE).selectAll().where('id', 'in', part).where('deleted', '=', 0).orderBy('id')
        // Row locks in id order: a concurrent delete of the same rows waits, then sees them deleted.
        if (this.#dialect !== 'sqlite') q = q.forUpdate()
        live.push(...(await q.execute()))
      }
      if (live.length === 0) return { deleted: [], orphanBlobs: [] }

      const byBlob = new Map<number, number[]>()
      for (const row of live) {
        const blobId = toNumber(row.blob_id)
        const list = byBlob.get(blobId) ?? []
        list.push(toNumber(row.id))
        byBlob.set(blobId, list)
      }
      for (const part of chunk(
        live.map((r) => toNumber(r.id)),
        IN_CHUNK,
      )) {
        await trx.updateTable(FILE_TABLE).set({ deleted: 1, deleted_dt: now }).where('id', 'in', part).where('deleted', '=', 0).execute()
      }
      // Their named variants' files go with the record's directory (the sweep finds them); the rows go now.
      await this.variants.forget(
        live.map((r) => toNumber(r.id)),
        trx,
      )

      const orphanBlobs: BlobRecord[] = []
      for (const blobId of [...byBlob.keys()].sort((a, b) => a - b)) {
        const recordIds = byBlob.get(blobId) ?? []
        const n = recordIds.length
        await trx
          .updateTable(BLOB_TABLE)
          .set({ ref_count: sql<number>`case when ref_count > ${n} then ref_count - ${n} else 0 end`, updated_dt: now })
          .where('id', '=', blobId)
          .execute()
        const blob = await trx.selectFrom(BLOB_TABLE).selectAll().where('id', '=', blobId).executeTakeFirst()
        if (blob !== undefined && toNumber(blob.ref_count) <= 0) {
          orphanBlobs.push(mapBlob(blob))
        } else {
          // The file stays for the other records: nothing waits on these rows any more.
          for (const part of chunk(recordIds, IN_CHUNK)) {
            await trx.deleteFrom(FILE_TABLE).where('id', 'in', part).execute()
          }
        }
      }
      return { deleted: live.map(mapRecord), orphanBlobs }
    })
  }

  /**
   * Removes a dead blob's rows once its file is gone: the deleted records pointing at it, then the blob
   * itself when still unreferenced. True when the blob row was removed.
   */
  async purgeBlob(blobId: number): Promise<boolean> {
    if (!isId(blobId)) return false
    return this.#transaction(async (trx) => {
      await trx.deleteFrom(FILE_TABLE).where('blob_id', '=', blobId).where('deleted', '=', 1).execute()
      const result = await trx.deleteFrom(BLOB_TABLE).where('id', '=', blobId).where('ref_count', '<=', 0).executeTakeFirst()
      return Number(result.numDeletedRows) > 0
    })
  }

  /**
   * Blobs at `ref_count` 0 not touched since `olderThan` (ISO-8601 UTC): pending blobs never attached,
   * and orphans whose file deletion failed. By id above `afterId`, so a walk moves past rows it could not
   * remove instead of being handed them again.
   */
  async listDeadBlobs(olderThan: string, limit: number, afterId = 0): Promise<BlobRecord[]> {
    if (!Number.isSafeInteger(limit) || limit <= 0) return []
    const rows = await this.#db
      .selectFrom(BLOB_TABLE)
      .selectAll()
      .where('id', '>', afterId)
      .where('ref_count', '<=', 0)
      .where('updated_dt', '<', olderThan)
      .orderBy('id')
      .limit(limit)
      .execute()
    return rows.map(mapBlob)
  }

  /** Closes the database (`db.destroy()`). */
  async close(): Promise<void> {
    await this.#db.destroy()
  }
}
