import type { SqliteDatabase, SqliteStatement } from 'kysely'

/**
 * Node's own SQLite binding, `node:sqlite` (Node 22.5+; without a flag or warning on Node 24), as the
 * database of Kysely's `SqliteDialect`, which expects better-sqlite3's shape: `prepare(sql)` giving a
 * statement with `reader`, and `all`, `run`, `iterate` taking the parameters as one array.
 *
 * attach-storage opens SQLite through it on Node 24 and later, where better-sqlite3 12 (the last line
 * that runs on Node 20) aborts the process: its `Database` and `Statement` derive from Node's
 * header-only `node::ObjectWrap`, which from Node 24.19 removes an environment cleanup hook in its
 * destructor, and a statement collected by a GC outside JavaScript then fails
 * `Assertion failed: (env) != nullptr`. `node:sqlite` is part of Node and has no such addon code.
 *
 * Rows come back as better-sqlite3 gives them: plain objects (`node:sqlite` makes them without a
 * prototype) and BLOBs as `Buffer` (`node:sqlite` gives a `Uint8Array`).
 */

/** The part of `node:sqlite` used here (`@types/node` 20 has no typings for it). */
export interface NodeSqliteModule {
  DatabaseSync: new (file: string, options?: { timeout?: number }) => NodeSqliteDatabase
}

interface NodeSqliteDatabase {
  readonly isTransaction: boolean
  exec(sql: string): void
  prepare(sql: string): NodeSqliteStatement
  close(): void
}

interface NodeSqliteStatement {
  columns(): unknown[]
  all(...parameters: unknown[]): Record<string, unknown>[]
  get(...parameters: unknown[]): unknown
  setReturnArrays(enabled: boolean): void
  run(...parameters: unknown[]): { changes: number | bigint; lastInsertRowid: number | bigint }
  iterate(...parameters: unknown[]): IterableIterator<Record<string, unknown>>
}

/** Whether this Node opens SQLite through `node:sqlite` rather than better-sqlite3. */
export function usesNodeSqlite(version: string = process.versions.node): boolean {
  return Number(version.split('.')[0]) >= 24
}

/** A BLOB as a Buffer, as better-sqlite3 answers it (node:sqlite answers a Uint8Array). */
const plainValue = (value: unknown): unknown =>
  value instanceof Uint8Array && !Buffer.isBuffer(value) ? Buffer.from(value.buffer, value.byteOffset, value.byteLength) : value

/** A row as better-sqlite3 gives it. */
function plainRow(row: Record<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = {}
  for (const key in row) out[key] = plainValue(row[key])
  return out
}

/** A statement that answers its first row as the array of its values, in the order of its columns. */
export interface ValuesStatement {
  /** The first row's values; undefined when there is no row. */
  get(parameters: ReadonlyArray<unknown>): unknown[] | undefined
}

class Statement implements SqliteStatement {
  readonly #statement: NodeSqliteStatement
  readonly reader: boolean

  constructor(statement: NodeSqliteStatement) {
    this.#statement = statement
    // better-sqlite3's `reader`: the statement returns columns (a SELECT, a PRAGMA, `… RETURNING`).
    this.reader = statement.columns().length > 0
  }

  all(parameters: ReadonlyArray<unknown>): unknown[] {
    return this.#statement.all(...parameters).map(plainRow)
  }

  run(parameters: ReadonlyArray<unknown>): { changes: number | bigint; lastInsertRowid: number | bigint } {
    const { changes, lastInsertRowid } = this.#statement.run(...parameters)
    return { changes, lastInsertRowid }
  }

  *iterate(parameters: ReadonlyArray<unknown>): IterableIterator<unknown> {
    for (const row of this.#statement.iterate(...parameters)) yield plainRow(row)
  }
}

/** The `node:sqlite` database behind Kysely's `SqliteDialect`; `exec` runs statements without results. */
export class NodeSqliteDatabaseAdapter implements SqliteDatabase {
  readonly #database: NodeSqliteDatabase

  constructor(sqlite: NodeSqliteModule, file: string, options: { timeout: number }) {
    this.#database = new sqlite.DatabaseSync(file, options)
  }

  exec(sql: string): void {
    this.#database.exec(sql)
  }

  /** Whether a transaction is open (better-sqlite3's `inTransaction`). */
  get inTransaction(): boolean {
    return this.#database.isTransaction
  }

  prepare(sql: string): SqliteStatement {
    return new Statement(this.#database.prepare(sql))
  }

  /** A statement answering rows as arrays (better-sqlite3's `raw(true)`). */
  prepareValues(sql: string): ValuesStatement {
    const statement = this.#database.prepare(sql)
    statement.setReturnArrays(true)
    return {
      get(parameters) {
        const values = statement.get(...parameters) as unknown[] | undefined
        if (values) for (let i = 0; i < values.length; i++) values[i] = plainValue(values[i])
        return values
      },
    }
  }

  close(): void {
    this.#database.close()
  }
}
