import { mkdirSync } from 'node:fs'
import { dirname, resolve } from 'node:path'
import type BetterSqlite3 from 'better-sqlite3'
import { LRUCache } from 'lru-cache'
import { type ColumnType, Kysely, MysqlAdapter, MysqlDialect, PostgresAdapter, PostgresDialect, SqliteAdapter, SqliteDialect } from 'kysely'
import type Pg from 'pg'
import { AttachStorageError } from '../errors.js'
import { NodeSqliteDatabaseAdapter, type NodeSqliteModule, usesNodeSqlite, type ValuesStatement } from './node-sqlite.js'

/** Name of the table of physical files (one row per stored file, shared by several records). */
export const BLOB_TABLE = 'attach_blob'
/** Name of the table of attachment records. */
export const FILE_TABLE = 'attach_file'
/** Table of the named variants made for records. */
export const VARIANT_TABLE = 'attach_variant'

/**
 * How an integer column comes back from a driver: a number (better-sqlite3, node:sqlite, `pg` with the
 * parser that {@link openDatabase} installs, mysql2), a decimal string (`pg` bigint without that parser)
 * or a bigint.
 * The repository turns every one of them into a number.
 */
export type DbInteger = number | string | bigint

/** Kysely typing of `attach_blob`. */
export interface AttachBlobTable {
  id: ColumnType<DbInteger, never, never>
  store: string
  saved_dir: string
  saved_name: string
  file_size: ColumnType<DbInteger, number, number>
  file_type: string
  sha256: string
  ref_count: ColumnType<DbInteger, number | undefined, number>
  /** ISO-8601 UTC with milliseconds and `Z` (24 characters). */
  created_dt: string
  updated_dt: string
  /**
   * The temporary file a confirmed save moves here (its name in the temporary area), so that a retry
   * after a crash finds this blob wherever it was placed; null for blobs not made from a temporary file.
   */
  tmp_name: ColumnType<string | null, string | null | undefined, string | null>
  /** The file's media as JSON (model.ts MediaInfo), null when none or not known (migration 0005). */
  media: ColumnType<string | null, string | null | undefined, string | null>
}

/** Kysely typing of `attach_file`, the attachment record. */
export interface AttachFileTable {
  id: ColumnType<DbInteger, never, never>
  ref_domain: string
  ref_key: string
  ref_category: string
  display_name: string
  saved_name: string
  saved_dir: string
  file_type: string
  file_size: ColumnType<DbInteger, number, number>
  ext: string | null
  fmeta_value: string | null
  sort: ColumnType<DbInteger, number, number>
  /** The user id as text; a decimal string is answered as a number. */
  created_by: string | null
  created_dt: string
  /** 0 = live, 1 = deleted (waiting for its blob to be purged). */
  deleted: ColumnType<DbInteger, number | undefined, number>
  deleted_dt: string | null
  sha256: string
  store: string
  blob_id: ColumnType<DbInteger, number, never>
  /** The focal point (0..1 from the top left; both or neither), migration 0006. */
  focus_x: ColumnType<number | null, number | null | undefined, number | null>
  focus_y: ColumnType<number | null, number | null | undefined, number | null>
  /** Its blob's `media`, copied when the record is made (migration 0005). */
  media: ColumnType<string | null, string | null | undefined, string | null>
}

/**
 * Kysely typing of `attach_variant`: a named variant made for a record. `spec` is the box and format it
 * was made for (`200x0.webp`), so a variant whose configuration changed since is made again.
 */
export interface AttachVariantTable {
  file_id: ColumnType<DbInteger, number, never>
  name: string
  spec: string
  file_size: ColumnType<DbInteger, number, number>
  file_type: string
  created_dt: string
}

/** The tables attach-storage owns, for `Kysely<AttachDatabase>`. */
export interface AttachDatabase {
  [BLOB_TABLE]: AttachBlobTable
  [FILE_TABLE]: AttachFileTable
  [VARIANT_TABLE]: AttachVariantTable
}

/**
 * Where the attachment records live.
 *
 * @example
 * { type: 'sqlite', file: './data/attach.db' }
 * { type: 'postgres', url: 'postgres://app@db/app' }
 * { type: 'mysql', url: 'mysql://app:secret@db:3306/app' }
 */
export type DatabaseOptions = { type: 'sqlite'; file: string } | { type: 'postgres'; url: string } | { type: 'mysql'; url: string }

/** The SQL dialects the repository knows. */
export type DialectName = 'sqlite' | 'postgres' | 'mysql'

const PG_INT8_OID = 20

/** `bigint` as a JS number when it fits exactly, else the decimal string `pg` gives. */
function parsePgInt8(value: string): number | string {
  const n = Number(value)
  return Number.isSafeInteger(n) ? n : value
}

/** Loads a database driver package; injectable for tests. */
export type ImportDriver = (specifier: string) => Promise<unknown>

// A variable specifier keeps TypeScript and bundlers from requiring the optional packages.
const importDriver: ImportDriver = (specifier) => import(specifier)

function isModuleNotFound(err: unknown, specifier: string): boolean {
  const e = err as { code?: string; message?: string }
  return (
    (e?.code === 'ERR_MODULE_NOT_FOUND' || e?.code === 'MODULE_NOT_FOUND') &&
    typeof e.message === 'string' &&
    e.message.includes(`'${specifier}'`)
  )
}

/**
 * Loads the driver of a database type, an optional peer of attach-storage installed by the host. A
 * driver that is not installed fails with a message naming the package to install; one that is there
 * but fails to load is reported with its own error.
 */
async function loadDriver<T>(specifier: string, database: string, load: ImportDriver): Promise<T> {
  let mod: { default?: T } & T
  try {
    mod = (await load(specifier)) as { default?: T } & T
  } catch (cause) {
    if (isModuleNotFound(cause, specifier)) {
      throw new AttachStorageError('config-invalid', `${database} support comes with the ${specifier} package: npm install ${specifier}`, {
        status: 500,
        cause,
      })
    }
    throw new AttachStorageError('config-invalid', `Loading the ${database} driver ${specifier} failed: ${(cause as Error).message}`, {
      status: 500,
      cause,
    })
  }
  return mod.default ?? mod
}

/**
 * Opens a Kysely instance for the configured database. The caller owns it (`db.destroy()`).
 *
 * - sqlite: `file` (its directory is created) through better-sqlite3 on Node 20 and 22, through Node's
 *   own `node:sqlite` on Node 24 and later (node-sqlite.ts); WAL, `synchronous = FULL` (a commit is on
 *   the disk before it resolves, so an acknowledged save survives a power loss, not only a crash),
 *   `busy_timeout = 5000`, foreign keys on.
 * - postgres: a `pg` Pool (the optional `pg` package, loaded only here); `bigint` columns come back as
 *   numbers when they fit.
 * - mysql: a `mysql2` pool (the optional `mysql2` package), utf8mb4; `bigint` columns come back as
 *   numbers when they fit (`supportBigNumbers`), else as decimal strings. See docs/databases.md.
 *
 * A driver package that is not installed fails with a message naming it (`npm install pg`).
 * `importModule` replaces the loader of the driver packages (tests).
 *
 * `DB` is the host's own tables, for checked queries (Kysely's database interface); without it the
 * instance is untyped (`Kysely<any>`). The service takes either (its `db` option), and keeps its own
 * `attach_*` tables to itself.
 *
 * @example
 * interface HostTables {
 *   board: { id: Generated<number>; title: string; createdDt: string }
 * }
 * const db = await openDatabase<HostTables>({ type: 'sqlite', file: './data/app.db' })
 * await db.insertInto('board').values({ title: 'Hello', createdDt: new Date().toISOString() }).execute()
 * const storage = await createAttachStorage({ db, config })
 */
export async function openDatabase<DB = any>(options: DatabaseOptions, importModule: ImportDriver = importDriver): Promise<Kysely<DB>> {
  switch (options.type) {
    case 'sqlite':
      return openSqlite(options.file)
    case 'postgres':
      return openPostgres(options.url, importModule)
    case 'mysql':
      return openMysql(options.url, importModule)
    default: {
      const type = (options as { type?: unknown }).type
      throw new AttachStorageError('config-invalid', `Unknown database type ${JSON.stringify(type)}; use sqlite, postgres or mysql`)
    }
  }
}

async function openSqlite(file: string): Promise<Kysely<any>> {
  const inMemory = file === ':memory:' || file === ''
  let database: NodeSqliteDatabaseAdapter | BetterSqlite3.Database
  try {
    if (!inMemory) mkdirSync(dirname(resolve(file)), { recursive: true })
    if (usesNodeSqlite()) {
      // Node 24+: Node's own binding (better-sqlite3 12 aborts there, see node-sqlite.ts).
      database = new NodeSqliteDatabaseAdapter((await importDriver('node:sqlite')) as NodeSqliteModule, file, { timeout: 5000 })
    } else {
      const { default: Database } = await import('better-sqlite3')
      database = new Database(file, { timeout: 5000 })
    }
  } catch (cause) {
    throw new AttachStorageError('config-invalid', `Cannot open the SQLite database ${file}`, { cause })
  }
  database.exec('PRAGMA journal_mode = WAL')
  database.exec('PRAGMA synchronous = FULL')
  database.exec('PRAGMA busy_timeout = 5000')
  database.exec('PRAGMA foreign_keys = ON')
  const cached = withStatementCache(database)
  const db = new Kysely<any>({ dialect: new SqliteDialect({ database: cached }) })
  // Kept apart from Kysely's statements: these answer arrays.
  const valueStatements = new LRUCache<string, ValuesStatement>({ max: 32 })
  const valuesOf = (sql: string): ValuesStatement => {
    if (database instanceof NodeSqliteDatabaseAdapter) return database.prepareValues(sql)
    const statement = database.prepare(sql).raw(true)
    return { get: (parameters) => statement.get(parameters) as unknown[] | undefined }
  }
  directReads.set(db, (sql, parameters) => {
    // Inside a transaction another query holds the connection (and its uncommitted rows): wait for it.
    if (database.inTransaction) return undefined
    try {
      let statement = valueStatements.get(sql)
      if (!statement) {
        statement = valuesOf(sql)
        valueStatements.set(sql, statement)
      }
      return statement.get(parameters) ?? null
    } catch (err) {
      // better-sqlite3 while a streamed query is open on the connection: wait for it too.
      if (err instanceof TypeError && /busy/i.test(err.message)) return undefined
      throw err
    }
  })
  return db
}

/**
 * Runs a compiled read at once on a SQLite database, on a kept statement, when no other query holds the
 * connection (no transaction, no streamed query open), and answers its first row as the array of its
 * values in the order of the query's columns (null when there is none); otherwise answers undefined and
 * the caller goes through Kysely, which queues it. SQLite's calls are synchronous, so such a read sees
 * exactly the committed rows, as a queued one would, without the queue's turns. An array, not an object
 * keyed by column name: a row object of twenty columns costs more than the query itself. The query
 * names its columns (not `*`), so their order is its own whatever the table's.
 */
export type DirectRead = (sql: string, parameters: readonly unknown[]) => unknown[] | null | undefined

const directReads = new WeakMap<Kysely<any>, DirectRead>()

/** The {@link DirectRead} of a database opened by {@link openDatabase} on SQLite; undefined on the others. */
export function directReadOf(db: Kysely<any>): DirectRead | undefined {
  return directReads.get(db)
}

/** Most prepared statements kept per SQLite database (least recently used first out). */
export const STATEMENT_CACHE_SIZE = 256

/**
 * The database as Kysely's SQLite dialect sees it, with its prepared statements kept by SQL text, so a
 * query run again (a list page, a save's lookups) skips SQLite's parse and plan. Kysely runs one query
 * at a time on a SQLite connection, streaming ones included, so a kept statement is never busy when
 * it is handed out again. SQLite re-prepares a kept statement itself after a schema change.
 */
export function withStatementCache<S, D extends { prepare(sql: string): S }>(database: D, size = STATEMENT_CACHE_SIZE): D {
  // lru-cache, not a Map re-inserted on every hit: that made V8 rebuild the Map's table now and then in
  // the old generation, a full collection's work on every view.
  const kept = new LRUCache<string, S & {}>({ max: size })
  const prepare = (sql: string): S => {
    let statement = kept.get(sql)
    if (statement === undefined) {
      statement = database.prepare(sql) as S & {}
      kept.set(sql, statement)
    }
    return statement
  }
  return new Proxy(database, {
    get(target, property) {
      if (property === 'prepare') return prepare
      const value = Reflect.get(target, property, target)
      return typeof value === 'function' ? value.bind(target) : value
    },
  })
}

async function openPostgres(url: string, load: ImportDriver): Promise<Kysely<any>> {
  const pg = await loadDriver<typeof Pg>('pg', 'PostgreSQL', load)
  const pool = new pg.Pool({
    connectionString: url,
    types: {
      getTypeParser: ((oid: number, format?: 'text' | 'binary') =>
        oid === PG_INT8_OID && format !== 'binary'
          ? parsePgInt8
          : pg.types.getTypeParser(oid, format as 'text')) as typeof pg.types.getTypeParser,
    },
  })
  // A connection the server drops (a restart, a failover, a network cut) is an 'error' event of its
  // client, and of the pool when the client was idle; pg then removes that client and the next query
  // opens a new one, and a query running on it fails by itself. Without listeners the event would end
  // the process.
  pool.on('error', () => {})
  pool.on('connect', (client) => {
    client.on('error', () => {})
  })
  return new Kysely<any>({ dialect: new PostgresDialect({ pool }) })
}

async function openMysql(url: string, load: ImportDriver): Promise<Kysely<any>> {
  const mysql = await loadDriver<any>('mysql2', 'MySQL', load)
  const pool = mysql.createPool({ uri: url, supportBigNumbers: true, bigNumberStrings: false, charset: 'utf8mb4' })
  return new Kysely<any>({ dialect: new MysqlDialect({ pool }) })
}

/** Which SQL dialect a Kysely instance speaks, from its adapter (works for a host's own Kysely too). */
export function dialectOf(db: Kysely<any>): DialectName {
  const adapter = db.getExecutor().adapter
  if (adapter instanceof SqliteAdapter) return 'sqlite'
  if (adapter instanceof PostgresAdapter) return 'postgres'
  if (adapter instanceof MysqlAdapter) return 'mysql'
  // A host may hold another copy of kysely: fall back to the class names along the prototype chain.
  for (let proto = Object.getPrototypeOf(adapter); proto && proto !== Object.prototype; proto = Object.getPrototypeOf(proto)) {
    const name = (proto.constructor as { name?: string } | undefined)?.name
    if (name === 'SqliteAdapter') return 'sqlite'
    if (name === 'PostgresAdapter') return 'postgres'
    if (name === 'MysqlAdapter') return 'mysql'
  }
  throw new AttachStorageError(
    'config-invalid',
    `Unsupported Kysely dialect (${adapter.constructor.name}); attach-storage supports SQLite, PostgreSQL and MySQL`,
  )
}
