import { sql } from 'kysely'
import type { AttachmentRecord, BlobRecord } from '../model.js'
import { BLOB_TABLE, type DbInteger, FILE_TABLE } from './database.js'
import { chunk, type Db, IN_CHUNK, isId, mapBlob, mapRecord, type Trx, toNumber } from './rows.js'

/**
 * The queries of the `attach-storage` command (`repo.operations`): pages of live blobs and records, which
 * keys the table knows, a domain's blobs pointed at another store, the counts of `stats`.
 */
export class OperationsRows {
  readonly #db: Db
  readonly #transaction: <T>(fn: (trx: Trx) => Promise<T>) => Promise<T>

  constructor(db: Db, transaction: <T>(fn: (trx: Trx) => Promise<T>) => Promise<T>) {
    this.#db = db
    this.#transaction = transaction
  }

  /**
   * Every blob with at least one live record, in id order, read `pageSize` rows a query (keyset pages):
   * with `refDomain`, only blobs a live record of that domain points at; with `store`, only blobs of
   * that store. A record is made from its row as it is taken, not a page of them at once: a walk of
   * 100,000 then never holds hundreds of records that V8 would learn to make in its old generation.
   */
  async *eachLiveBlob(where: { refDomain?: string; store?: string } = {}, pageSize = 500): AsyncGenerator<BlobRecord> {
    let after = 0
    for (;;) {
      const rows = await this.#liveBlobRows(after, pageSize, where)
      for (const row of rows) yield mapBlob(row)
      if (rows.length < pageSize) return
      after = toNumber(rows[rows.length - 1]!.id)
    }
  }

  async #liveBlobRows(afterId: number, limit: number, where: { refDomain?: string; store?: string }) {
    let q = this.#db.selectFrom(BLOB_TABLE).selectAll().where('id', '>', afterId).where('ref_count', '>', 0)
    if (where.store !== undefined) q = q.where('store', '=', where.store)
    if (where.refDomain !== undefined) {
      const refDomain = where.refDomain
      q = q.where((eb) =>
        eb.exists(
          eb
            .selectFrom(FILE_TABLE)
            .select(sql<number>`1`.as('one'))
            .whereRef(`${FILE_TABLE}.blob_id`, '=', `${BLOB_TABLE}.id`)
            .where(`${FILE_TABLE}.ref_domain`, '=', refDomain)
            .where(`${FILE_TABLE}.deleted`, '=', 0),
        ),
      )
    }
    return await q.orderBy('id').limit(limit).execute()
  }

  /** live records of a domain with id above `afterId`, by id, at most `limit`. */
  async pageDomainRecords(refDomain: string, afterId: number, limit: number): Promise<AttachmentRecord[]> {
    const rows = await this.#db
      .selectFrom(FILE_TABLE)
      .selectAll()
      .where('ref_domain', '=', refDomain)
      .where('deleted', '=', 0)
      .where('id', '>', afterId)
      .orderBy('id')
      .limit(limit)
      .execute()
    return rows.map(mapRecord)
  }

  /**
   * Which of `keys` (store keys, `dir/…/name`) a blob row of `store` names, whether live or not. Keys
   * are matched as strings, with no object made per key: a walk over a store's files holds just them.
   */
  async knownKeys(store: string, keys: string[]): Promise<Set<string>> {
    const known = new Set<string>()
    for (const part of chunk(keys, IN_CHUNK)) {
      const dirs = new Set<string>()
      const names: string[] = []
      for (const key of part) {
        const slash = key.lastIndexOf('/')
        if (slash <= 0) continue
        dirs.add(`/${key.slice(0, slash + 1)}`)
        names.push(key.slice(slash + 1))
      }
      if (!names.length) continue
      const rows = await this.#db
        .selectFrom(BLOB_TABLE)
        .select(['saved_dir', 'saved_name'])
        .where('store', '=', store)
        .where('saved_dir', 'in', [...dirs])
        .where('saved_name', 'in', names)
        .execute()
      // A row's key as a store names it: its folder without the leading slash, then its name.
      for (const r of rows) known.add(r.saved_dir.slice(1) + r.saved_name)
    }
    return known
  }

  /**
   * points blobs (and their records) that are in store `from` at store `to`, whose copy of
   * the same key holds the same bytes. Answers how many blobs moved.
   */
  async switchBlobStore(blobIds: number[], from: string, to: string): Promise<number> {
    let moved = 0
    for (const part of chunk(blobIds.filter(isId), IN_CHUNK)) {
      moved += await this.#transaction(async (trx) => {
        const r = await trx
          .updateTable(BLOB_TABLE)
          .set({ store: to, updated_dt: new Date().toISOString() })
          .where('id', 'in', part)
          .where('store', '=', from)
          .executeTakeFirst()
        await trx.updateTable(FILE_TABLE).set({ store: to }).where('blob_id', 'in', part).where('store', '=', from).execute()
        return Number(r.numUpdatedRows)
      })
    }
    return moved
  }

  /** live records and their bytes per domain, category and store; blobs and bytes per store. */
  async stats(): Promise<{
    records: Array<{ refDomain: string; refCategory: string; store: string; count: number; bytes: number }>
    blobs: Array<{ store: string; count: number; bytes: number; pending: number }>
  }> {
    const records = await this.#db
      .selectFrom(FILE_TABLE)
      .select(['ref_domain', 'ref_category', 'store'])
      .select((eb) => [eb.fn.countAll<DbInteger>().as('n'), eb.fn.sum<DbInteger>('file_size').as('bytes')])
      .where('deleted', '=', 0)
      .groupBy(['ref_domain', 'ref_category', 'store'])
      .orderBy('ref_domain')
      .orderBy('ref_category')
      .orderBy('store')
      .execute()
    const blobs = await this.#db
      .selectFrom(BLOB_TABLE)
      .select('store')
      .select((eb) => [
        eb.fn.countAll<DbInteger>().as('n'),
        eb.fn.sum<DbInteger>('file_size').as('bytes'),
        eb.fn.sum<DbInteger>(sql`case when ref_count > 0 then 0 else 1 end`).as('pending'),
      ])
      .groupBy('store')
      .orderBy('store')
      .execute()
    return {
      records: records.map((r) => ({
        refDomain: r.ref_domain,
        refCategory: r.ref_category,
        store: r.store,
        count: toNumber(r.n),
        bytes: toNumber(r.bytes ?? 0),
      })),
      blobs: blobs.map((r) => ({ store: r.store, count: toNumber(r.n), bytes: toNumber(r.bytes ?? 0), pending: toNumber(r.pending ?? 0) })),
    }
  }

  /** How many blobs `AttachRepository.listDeadBlobs` would find (what a sweep purges). */
  async countDeadBlobs(olderThan: string): Promise<number> {
    const row = await this.#db
      .selectFrom(BLOB_TABLE)
      .select((eb) => eb.fn.countAll<DbInteger>().as('n'))
      .where('ref_count', '<=', 0)
      .where('updated_dt', '<', olderThan)
      .executeTakeFirstOrThrow()
    return toNumber(row.n)
  }
}
