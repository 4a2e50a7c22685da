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
      expect(read(query, [1])).toEqual([{ a: 1 }])
      expect(read(query, [2])).toEqual([])
      // A transaction holds the connection: its row is not read from outside, the read waits its turn.
      let inside: unknown = 'not read'
      await db.transaction().execute(async (trx) => {
        await trx.insertInto('t').values({ a: 2 }).execute()
        inside = read(query, [2])
      })
      expect(inside).toBeUndefined()
      expect(read(query, [2])).toEqual([{ a: 2 }])
      // A streamed query open on the connection: the read steps aside instead of failing.
      const seen: unknown[] = []
      for await (const row of db.selectFrom('t').select('a').orderBy('a').stream()) {
        seen.push(row.a)
        const r = read(query, [1])
        // better-sqlite3 refuses a second query while one streams; node:sqlite allows it.
        expect(r === undefined || (r.length === 1 && r[0]!.a === 1)).toBe(true)
      }
      expect(seen).toEqual([1, 2])
    } finally {
      await db.destroy()
      await rm(dir, { recursive: true, force: true })
    }
  })
})
