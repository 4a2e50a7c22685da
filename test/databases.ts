/**
 * Test databases for every dialect the repository supports. Each call gives a fresh, empty database:
 * SQLite in a file of its own temp directory, PostgreSQL and MySQL as a new database on the servers of
 * test/global-setup.ts (`inject('pgUrl')`, `inject('mysqlUrl')`), so test files running in parallel
 * never share tables.
 *
 * @example
 * for (const dialect of DIALECTS) {
 *   describe(dialect, () => {
 *     let t: TestDatabase
 *     beforeAll(async () => { t = await openTestDatabase(dialect) })
 *     afterAll(() => t.cleanup())
 *   })
 * }
 */
import { randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Kysely } from 'kysely'
import mysql from 'mysql2/promise'
import pg from 'pg'
import { inject } from 'vitest'
import { openDatabase } from '../packages/attach-storage/src/repository/database.js'

/** The dialects every repository test loops over. */
export const DIALECTS = ['sqlite', 'postgres', 'mysql'] as const
export type TestDialect = (typeof DIALECTS)[number]

export interface TestDatabase {
  db: Kysely<any>
  /** Where the database is: the SQLite file path, or the PostgreSQL / MySQL connection URL. */
  location: string
  /** Destroys `db` (if still open) and removes the database. Safe to call twice. */
  cleanup(): Promise<void>
}

export async function openTestDatabase(dialect: TestDialect): Promise<TestDatabase> {
  if (dialect === 'sqlite') {
    const dir = await mkdtemp(join(tmpdir(), 'attach-sqlite-'))
    const file = join(dir, 'attach.db')
    const db = await openDatabase({ type: 'sqlite', file })
    let done = false
    return {
      db,
      location: file,
      async cleanup() {
        if (done) return
        done = true
        await db.destroy().catch(() => {})
        await rm(dir, { recursive: true, force: true })
      },
    }
  }

  if (dialect === 'mysql') return openMysqlDatabase()

  const serverUrl = inject('pgUrl')
  const name = `t_${randomBytes(8).toString('hex')}`
  await withAdmin(serverUrl, (admin) => admin.query(`CREATE DATABASE ${name}`))
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  const db = await openDatabase({ type: 'postgres', url: url.toString() })
  let done = false
  return {
    db,
    location: url.toString(),
    async cleanup() {
      if (done) return
      done = true
      await db.destroy().catch(() => {})
      await withAdmin(serverUrl, (admin) => admin.query(`DROP DATABASE IF EXISTS ${name} WITH (FORCE)`))
    },
  }
}

async function withAdmin(url: string, fn: (client: pg.Client) => Promise<unknown>): Promise<void> {
  const client = new pg.Client({ connectionString: url })
  await client.connect()
  try {
    await fn(client)
  } finally {
    await client.end()
  }
}

/** A new utf8mb4 database on the MySQL server; cleanup ends what still uses it, then drops it. */
async function openMysqlDatabase(): Promise<TestDatabase> {
  const serverUrl = inject('mysqlUrl')
  const name = `t_${randomBytes(8).toString('hex')}`
  await withMysqlAdmin(serverUrl, (admin) => admin.query(`CREATE DATABASE ${name} CHARACTER SET utf8mb4`))
  const url = new URL(serverUrl)
  url.pathname = `/${name}`
  const db = await openDatabase({ type: 'mysql', url: url.toString() })
  let done = false
  return {
    db,
    location: url.toString(),
    async cleanup() {
      if (done) return
      done = true
      await db.destroy().catch(() => {})
      await withMysqlAdmin(serverUrl, async (admin) => {
        // Like PostgreSQL's DROP DATABASE ... WITH (FORCE): a connection a test left open would make the
        // drop wait on its metadata locks.
        const [rows] = await admin.query('SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()', [name])
        for (const row of rows as Array<{ id: number }>) await admin.query(`KILL ${Number(row.id)}`).catch(() => {})
        await admin.query(`DROP DATABASE IF EXISTS ${name}`)
      })
    },
  }
}

async function withMysqlAdmin(url: string, fn: (connection: mysql.Connection) => Promise<unknown>): Promise<void> {
  const connection = await mysql.createConnection(url)
  try {
    await fn(connection)
  } finally {
    await connection.end()
  }
}
