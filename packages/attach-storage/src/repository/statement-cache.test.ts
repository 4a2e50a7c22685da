import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { sql } from 'kysely'
import { describe, expect, it } from 'vitest'
import { directReadOf, openDatabase, withStatementCache } from './database.js'

describe('SQLite prepared statements kept by SQL text', () => {
  it('prepares a query once, hands the same statement out again, and keeps at most `size`, least recently used out', () => {
    const prepared: string[] = []
    const db = {
      prepare: (text: string) => {
        prepared.push(text)
        return { text }
      },
      close: () => 'closed',
    }
    const cached = withStatementCache(db, 2)
    const a = cached.prepare('a')
    expect(cached.prepare('a')).toBe(a)
    cached.prepare('b')
    cached.prepare('a') // a is now the most recent
    cached.prepare('c') // evicts b
    expect(cached.prepare('a')).toBe(a)
    cached.prepare('b')
    expect(prepared).toEqual(['a', 'b', 'c', 'b'])
    expect(cached.close()).toBe('closed')
  })

  it('gives right answers through Kysely on a real file, a schema change included', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'attach-stmt-'))
    const db = await openDatabase({ type: 'sqlite', file: join(dir, 'a.db') })
    try {
      await sql`create table t (a integer)`.execute(db)
      for (let i = 0; i < 300; i++) await db.insertInto('t').values({ a: i }).execute()
      for (let i = 0; i < 300; i += 37) {
        expect(await db.selectFrom('t').selectAll().where('a', '=', i).execute()).toEqual([{ a: i }])
      }
      await sql`alter table t add column b text default 'x'`.execute(db)
      expect(await db.selectFrom('t').selectAll().where('a', '=', 5).execute()).toEqual([{ a: 5, b: 'x' }])
      const streamed: number[] = []
      for await (const row of db.selectFrom('t').select('a').where('a', '<', 3).orderBy('a').stream()) streamed.push(row.a as number)
      expect(streamed).toEqual([0, 1, 2])
      expect(await db.selectFrom('t').select(db.fn.countAll().as('n')).executeTakeFirst()).toEqual({ n: 300 })
    } finally {
      await db.destroy()
      await rm(dir, { recursive: true, force: true })
    }
  })

  it('reads at once only while no other query holds the connection: never an uncommitted row, never beside a streamed query', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'attach-direct-'))
    const db = await openDatabase({ type: 'sqlite', file: join(dir, 'a.db') })
    const read = directReadOf(db)!
    const query = 'select a from t where a = ?'
    try {
      await sql`create table t (a integer)`.execute(db)
      await db.insertInto('t').values({ a: 1 }).execute()
      expect(read(query, [1])).toEqual([1])
      expect(read(query, [2])).toBeNull()
      // A transaction holds the connection: its row is not read from outside, the read waits its turn.
      let inside: unknown = 'not read'
      await db.transaction().execute(async (trx) => {
        await trx.insertInto('t').values({ a: 2 }).execute()
        inside = read(query, [2])
      })
      expect(inside).toBeUndefined()
      expect(read(query, [2])).toEqual([2])
      // A streamed query open on the connection: the read steps aside instead of failing.
      const seen: unknown[] = []
      for await (const row of db.selectFrom('t').select('a').orderBy('a').stream()) {
        seen.push(row.a)
        const r = read(query, [1])
        // better-sqlite3 refuses a second query while one streams; node:sqlite allows it.
        expect(r === undefined || (r !== null && r.length === 1 && r[0] === 1)).toBe(true)
      }
      expect(seen).toEqual([1, 2])
    } finally {
      await db.destroy()
      await rm(dir, { recursive: true, force: true })
    }
  })

  it("answers the values in the order of the query's columns, whatever the table's, through schema changes; a BLOB as a Buffer", async () => {
    const dir = await mkdtemp(join(tmpdir(), 'attach-direct-'))
    const db = await openDatabase({ type: 'sqlite', file: join(dir, 'a.db') })
    const read = directReadOf(db)!
    const query = 'select c, a, b from t where a = ?'
    try {
      await sql`create table t (a integer, b text, c blob)`.execute(db)
      await sql`insert into t values (1, 'one', x'0102')`.execute(db)
      expect(read(query, [1])).toEqual([Buffer.from([1, 2]), 1, 'one'])
      expect(Buffer.isBuffer(read(query, [1])![0])).toBe(true)
      // A column added, then the table made again with its columns in another order: the kept statement
      // is prepared again by SQLite, and the values keep the query's order.
      await sql`alter table t add column d text default 'x'`.execute(db)
      expect(read(query, [1])).toEqual([Buffer.from([1, 2]), 1, 'one'])
      await sql`drop table t`.execute(db)
      await sql`create table t (d text, c blob, b text, a integer)`.execute(db)
      await sql`insert into t values ('y', x'03', 'two', 1)`.execute(db)
      expect(read(query, [1])).toEqual([Buffer.from([3]), 1, 'two'])
      // A column the query names is gone: the read fails, it does not answer another column's value.
      await sql`alter table t drop column b`.execute(db)
      expect(() => read(query, [1])).toThrow(/no such column|b/)
    } finally {
      await db.destroy()
      await rm(dir, { recursive: true, force: true })
    }
  })
})
