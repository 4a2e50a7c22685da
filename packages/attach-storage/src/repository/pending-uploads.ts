/**
 * The rows of `attach_pending`: one per upload not committed yet (a temporary file, an unfinished tus
 * upload, a presigned upload), with its user, its bytes and when it expires, which is what the per-user
 * quota counts (service/quota.ts). A tus upload's row also carries the lease of the PATCH writing it, so
 * that instances sharing the database never write one upload at once.
 */
import { type ColumnType, type Kysely, sql } from 'kysely'
import type { DbInteger, DialectName } from './database.js'

/** Table of pending uploads (quota reservations and tus leases). */
export const PENDING_TABLE = 'attach_pending'

/** What a pending upload is. */
export type PendingKind = 'tmp' | 'tus' | 'presign'

/** Kysely typing of `attach_pending`. */
export interface AttachPendingTable {
  /** The temporary file's name (`{uuid}.{ext}`), which is also the tus id and the presigned name. */
  name: string
  /** The uploader's id as text; `''` for uploads without a user (a host's own calls). */
  user_key: string
  kind: string
  bytes: ColumnType<DbInteger, number, number>
  /** ISO-8601 UTC with milliseconds: past it the row counts no more and the sweep forgets it. */
  expires_dt: string
  /** The holder of the PATCH lease, or null. */
  lease_id: ColumnType<string | null, string | null | undefined, string | null>
  /** When the lease ends unless renewed (ISO-8601 UTC), or null. */
  lease_until: ColumnType<string | null, string | null | undefined, string | null>
}

interface PendingDatabase {
  [PENDING_TABLE]: AttachPendingTable
}

/** A row as the quota sees it. */
export interface PendingRow {
  name: string
  userKey: string
  kind: PendingKind
  bytes: number
  expiresDt: string
}

/** A reservation to make (see {@link PendingUploads.reserve}). */
export interface Reservation {
  name: string
  userKey: string
  kind: PendingKind
  bytes: number
  expiresDt: string
}

/** The PostgreSQL advisory-lock class of the per-user quota locks (`attq`). */
const PG_LOCK_CLASS = 0x61747471
/** How long a MySQL session waits for a user's quota lock, in seconds. */
const MYSQL_LOCK_WAIT = 10

/** Reads and writes `attach_pending` (SQLite, PostgreSQL, MySQL). */
export class PendingUploads {
  readonly #db: Kysely<PendingDatabase>
  readonly #dialect: DialectName

  constructor(db: Kysely<any>, dialect: DialectName) {
    this.#db = db as Kysely<PendingDatabase>
    this.#dialect = dialect
  }

  /**
   * Runs `fn` while holding the user's quota lock, so that two reservations of one user never both
   * pass the last bytes, on one instance or several: PostgreSQL `pg_advisory_xact_lock` in a
   * transaction; MySQL `GET_LOCK` on one connection around autocommitted statements (each is committed
   * before the lock goes); SQLite a transaction whose first statement writes, which takes the database's
   * write lock at once (every writer waits its turn, `busy_timeout`).
   */
  async #lockedForUser<T>(userKey: string, fn: (db: Kysely<PendingDatabase>) => Promise<T>): Promise<T> {
    if (this.#db.isTransaction) {
      // Within a host's transaction (a commit in it): the lock is taken in that transaction.
      if (this.#dialect === 'postgres') {
        await sql`select pg_advisory_xact_lock(${sql.lit(PG_LOCK_CLASS)}::int, hashtext(${userKey}))`.execute(this.#db)
      } else if (this.#dialect === 'sqlite') {
        await this.#db.updateTable(PENDING_TABLE).set({ bytes: sql`bytes` }).where('name', '=', '').execute()
      }
      return fn(this.#db)
    }
    if (this.#dialect === 'postgres') {
      return this.#db.transaction().execute(async (trx) => {
        await sql`select pg_advisory_xact_lock(${sql.lit(PG_LOCK_CLASS)}::int, hashtext(${userKey}))`.execute(trx)
        return fn(trx)
      })
    }
    if (this.#dialect === 'mysql') {
      return this.#db.connection().execute(async (conn) => {
        const name = sql`concat('attach_quota:', sha1(${userKey}))`
        const got = await sql<{ ok: number | null }>`select get_lock(${name}, ${sql.lit(MYSQL_LOCK_WAIT)}) as ok`.execute(conn)
        if (Number(got.rows[0]?.ok) !== 1) throw new Error(`Could not take the quota lock of user ${JSON.stringify(userKey)}`)
        try {
          return await fn(conn)
        } finally {
          await sql`select release_lock(${name})`.execute(conn)
        }
      })
    }
    return this.#db.transaction().execute(async (trx) => {
      await trx.updateTable(PENDING_TABLE).set({ bytes: sql`bytes` }).where('name', '=', '').execute()
      return fn(trx)
    })
  }

  /** The bytes a user holds in live rows (expiring after `now`), leaving out `except`. */
  async #used(db: Kysely<PendingDatabase>, userKey: string, now: string, except?: string): Promise<number> {
    let q = db
      .selectFrom(PENDING_TABLE)
      .select((eb) => eb.fn.coalesce(eb.fn.sum<DbInteger>('bytes'), sql<DbInteger>`0`).as('n'))
      .where('user_key', '=', userKey)
      .where('expires_dt', '>', now)
    if (except !== undefined) q = q.where('name', '<>', except)
    return Number((await q.executeTakeFirst())?.n ?? 0)
  }

  /** The bytes a user holds in live rows now. */
  used(userKey: string, now: string): Promise<number> {
    return this.#used(this.#db, userKey, now)
  }

  /**
   * Writes a reservation (or changes the row of its name: a tus upload becoming a temporary file). With
   * `limit` > 0 it is refused, and nothing written, when it grows the row and the user's live rows would
   * then hold more than `limit` bytes (or, for a reservation of 0 bytes, when they already hold `limit`).
   * Resolves with the bytes the user held besides this row, and whether it was written.
   */
  reserve(r: Reservation, limit: number, now: string): Promise<{ ok: boolean; others: number }> {
    return this.#lockedForUser(r.userKey, async (db) => {
      const others = await this.#used(db, r.userKey, now, r.name)
      if (limit > 0) {
        const before = await db
          .selectFrom(PENDING_TABLE)
          .select(['bytes', 'user_key', 'expires_dt'])
          .where('name', '=', r.name)
          .executeTakeFirst()
        const held = before && before.user_key === r.userKey && before.expires_dt > now ? Number(before.bytes) : -1
        const grows = r.bytes > held
        if (grows && (others + r.bytes > limit || (r.bytes === 0 && others >= limit))) return { ok: false, others }
      }
      const values = { name: r.name, user_key: r.userKey, kind: r.kind, bytes: r.bytes, expires_dt: r.expiresDt }
      const changed = { user_key: r.userKey, kind: r.kind, bytes: r.bytes, expires_dt: r.expiresDt }
      const insert = db.insertInto(PENDING_TABLE).values(values)
      await (this.#dialect === 'mysql'
        ? insert.onDuplicateKeyUpdate(changed)
        : insert.onConflict((oc) => oc.column('name').doUpdateSet(changed))
      ).execute()
      return { ok: true, others }
    })
  }

  /** Forgets the rows of these names (committed, terminated, deleted). */
  async release(names: readonly string[]): Promise<void> {
    for (let i = 0; i < names.length; i += 500) {
      await this.#db
        .deleteFrom(PENDING_TABLE)
        .where('name', 'in', names.slice(i, i + 500))
        .execute()
    }
  }

  /** Forgets rows that expired at or before `now` and hold no running lease; answers how many went. */
  async forgetExpired(now: string): Promise<number> {
    const result = await this.#db
      .deleteFrom(PENDING_TABLE)
      .where('expires_dt', '<=', now)
      .where((eb) => eb.or([eb('lease_until', 'is', null), eb('lease_until', '<', now)]))
      .executeTakeFirst()
    return Number(result.numDeletedRows)
  }

  /** The live rows' bytes and count per user, most bytes first (`stats --quota`). */
  async byUser(now: string): Promise<Array<{ userKey: string; uploads: number; bytes: number }>> {
    const rows = await this.#db
      .selectFrom(PENDING_TABLE)
      .select((eb) => ['user_key', eb.fn.countAll<DbInteger>().as('n'), eb.fn.sum<DbInteger>('bytes').as('b')])
      .where('expires_dt', '>', now)
      .groupBy('user_key')
      .execute()
    return rows
      .map((r) => ({ userKey: r.user_key, uploads: Number(r.n), bytes: Number(r.b ?? 0) }))
      .sort((a, b) => b.bytes - a.bytes || (a.userKey < b.userKey ? -1 : 1))
  }

  /** The row of a name, or undefined. */
  async find(name: string): Promise<PendingRow | undefined> {
    const r = await this.#db.selectFrom(PENDING_TABLE).selectAll().where('name', '=', name).executeTakeFirst()
    return r && { name: r.name, userKey: r.user_key, kind: r.kind as PendingKind, bytes: Number(r.bytes), expiresDt: r.expires_dt }
  }

  /**
   * Takes the lease of a name's row for `holder` until `until`, unless another holder's lease runs
   * past `now` (or is `stale`: a holder known dead): one atomic UPDATE, so of two instances asking at
   * once exactly one gets it. Answers
   * `missing` when the name has no row (an upload begun before this table existed, or none at all).
   */
  async takeLease(name: string, holder: string, until: string, now: string, stale?: string): Promise<'taken' | 'held' | 'missing'> {
    const result = await this.#db
      .updateTable(PENDING_TABLE)
      .set({ lease_id: holder, lease_until: until })
      .where('name', '=', name)
      .where((eb) =>
        eb.or([
          eb('lease_until', 'is', null),
          eb('lease_until', '<=', now),
          eb('lease_id', '=', holder),
          ...(stale === undefined ? [] : [eb('lease_id', '=', stale)]),
        ]),
      )
      .executeTakeFirst()
    if (Number(result.numUpdatedRows) > 0) return 'taken'
    return (await this.find(name)) ? 'held' : 'missing'
  }

  /** Who holds the lease of a name now (whether or not it has run out), or undefined. */
  async leaseHolder(name: string): Promise<string | undefined> {
    const r = await this.#db.selectFrom(PENDING_TABLE).select('lease_id').where('name', '=', name).executeTakeFirst()
    return r?.lease_id ?? undefined
  }

  /** Moves a lease's end while `holder` still holds it; false once it was lost. */
  async renewLease(name: string, holder: string, until: string): Promise<boolean> {
    const result = await this.#db
      .updateTable(PENDING_TABLE)
      .set({ lease_until: until })
      .where('name', '=', name)
      .where('lease_id', '=', holder)
      .executeTakeFirst()
    return Number(result.numUpdatedRows) > 0
  }

  /** Gives a lease back (nothing when another holder has it now). */
  async dropLease(name: string, holder: string): Promise<void> {
    await this.#db
      .updateTable(PENDING_TABLE)
      .set({ lease_id: null, lease_until: null })
      .where('name', '=', name)
      .where('lease_id', '=', holder)
      .execute()
  }
}
