import { type Kysely, sql } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS, openTestDatabase, type TestDatabase } from '../../../../test/databases.js'
import { type AttachStorageError, isAttachError } from '../errors.js'
import {
  coerceValue,
  containsPattern,
  exportAll,
  type ListEnforce,
  type ListOp,
  type ListProvider,
  listResponse,
  parseListRequest,
  runList,
} from './list-query.js'

const ALL_OPS: ListOp[] = ['eq', 'ne', 'gt', 'ge', 'lt', 'le', 'like', 'in']
const CMP_OPS: ListOp[] = ['eq', 'ne', 'gt', 'ge', 'lt', 'le', 'in']

const provider: ListProvider = {
  fields: {
    id: { type: 'integer', ops: CMP_OPS },
    title: { type: 'string', ops: ALL_OPS },
    createdDt: { type: 'datetime', ops: CMP_OPS, column: 'created_dt' },
    score: { type: 'integer', ops: CMP_OPS },
    rating: { type: 'number', ops: CMP_OPS },
    pinned: { type: 'boolean', ops: ['eq', 'ne', 'in'] },
    // `like` on a non-string field is never applied.
    scoreLike: { type: 'integer', ops: ['like'], column: 'score' },
  },
  sortable: { id: 'id', title: 'title', createdDt: 'created_dt', score: 'score', rating: 'rating' },
  primaryKey: 'id',
  positionIdx: true,
  maxPerPage: 50,
}

interface Item {
  id: number
  title: string
  created_dt: string
  score: number
  rating: number
  pinned: boolean
  owner: string
}

const N = 60
const BASE = Date.parse('2025-01-01T00:00:00.000Z')
const SPECIAL: Record<number, string> = {
  1: 'Report 100% done',
  2: 'snake_case name',
  3: 'back\\slash',
  4: 'bang! title',
  5: "O'Brien notes",
  6: "' OR 1=1 --",
  7: 'title; DROP TABLE items; --',
}

const ITEMS: Item[] = Array.from({ length: N }, (_, k) => {
  const i = k + 1
  return {
    id: i,
    title: SPECIAL[i] ?? `Item ${String(i).padStart(2, '0')}`,
    created_dt: new Date(BASE + i * 3_600_000).toISOString(),
    score: i % 5,
    rating: (i % 4) * 0.5,
    pinned: i % 10 === 0,
    owner: i % 3 === 0 ? 'bob' : 'alice',
  }
})
const ALICE = ITEMS.filter((r) => r.owner === 'alice')
const ids = (rows: ReadonlyArray<Record<string, any>>) => rows.map((r) => Number(r.id))
const idsWhere = (pred: (r: Item) => boolean, from: Item[] = ITEMS) =>
  from
    .filter(pred)
    .map((r) => r.id)
    .sort((a, b) => b - a)

const ownerIsAlice: ListEnforce = (qb) => qb.where('owner', '=', 'alice')
const q = (...conds: Array<{ field: unknown; op: unknown; val?: unknown }>) => JSON.stringify({ conds })

describe('parseListRequest', () => {
  const parse = (params: Record<string, string> | string) => parseListRequest(new URLSearchParams(params), provider)
  const rejects = (params: Record<string, string> | string): AttachStorageError => {
    try {
      parse(params)
    } catch (err) {
      expect(isAttachError(err, 'bad-request')).toBe(true)
      expect((err as AttachStorageError).status).toBe(400)
      return err as AttachStorageError
    }
    throw new Error(`expected a 400 for ${JSON.stringify(params)}`)
  }

  it('has the documented defaults', () => {
    expect(parse('')).toEqual({ paging: false, page: 1, perPage: 40, skipCount: false, sort: [], conds: [] })
  })

  it('turns paging on with the exact string true only', () => {
    expect(parse({ _usePaging: 'true' }).paging).toBe(true)
    for (const v of ['TRUE', 'True', '1', 'yes', '', 'true ']) expect(parse({ _usePaging: v }).paging).toBe(false)
    expect(parse({ skipCount: 'true' }).skipCount).toBe(true)
    expect(parse({ skipCount: '1' }).skipCount).toBe(false)
  })

  it('refuses currentPage 0, negative, fractional or not a number with 400', () => {
    for (const v of ['0', '-1', 'abc', '1.5', '+2', ' 2', '1e3', '0x10']) {
      expect(rejects({ currentPage: v }).message).toContain('currentPage')
    }
    expect(parse({ currentPage: '' }).page).toBe(1)
    expect(parse({ currentPage: '007' }).page).toBe(7)
  })

  it('refuses dataPerPage below 1 or not a number with 400, and clamps it to maxPerPage', () => {
    for (const v of ['0', '-5', 'x', '2.5']) expect(rejects({ dataPerPage: v }).message).toContain('dataPerPage')
    expect(parse({ dataPerPage: '51' }).perPage).toBe(50)
    expect(parse({ dataPerPage: '99999999999999999999999' }).perPage).toBe(50)
    expect(parse({ dataPerPage: '20' }).perPage).toBe(20)
    const noMax: ListProvider = { ...provider, maxPerPage: undefined }
    expect(parseListRequest(new URLSearchParams({ dataPerPage: '5000' }), noMax).perPage).toBe(1000)
  })

  it('accepts linkPerPage without applying it', () => {
    expect(parse({ linkPerPage: '10' }).linkPerPage).toBe(10)
    expect(parse({ linkPerPage: 'ten' }).linkPerPage).toBeUndefined()
  })

  it('parses sortBy, dropping unknown columns, bad directions, repeats and prototype names', () => {
    expect(parse({ sortBy: 'score:desc,createdDt,title:ASC' }).sort).toEqual([
      { field: 'score', direction: 'desc' },
      { field: 'createdDt', direction: 'asc' },
      { field: 'title', direction: 'asc' },
    ])
    expect(parse({ sortBy: 'nope:asc,owner:desc,score:sideways,constructor:asc,__proto__:asc,toString,id:desc,id:asc' }).sort).toEqual([
      { field: 'id', direction: 'desc' },
    ])
  })

  it('answers a q that is not JSON or not {conds: [...]} with 400 and a JSON body', async () => {
    for (const bad of [
      'not json',
      '{conds: []}',
      'null',
      '"conds"',
      '[1]',
      '{}',
      '{"conds": {}}',
      '{"conds": [1]}',
      '{"conds": [null]}',
      '{"conds": [{"field": 1, "op": "eq", "val": 1}]}',
      '{"conds": [{"field": "id", "val": 1}]}',
      JSON.stringify({ conds: Array.from({ length: 101 }, () => ({ field: 'id', op: 'eq', val: 1 })) }),
    ]) {
      const err = rejects({ q: bad })
      expect(err.message).toMatch(/q /)
      const res = err.toResponse()
      expect(res.status).toBe(400)
      expect(res.headers.get('content-type')).toContain('application/json')
      const body = (await res.json()) as { code: string; message: string }
      expect(body.code).toBe('bad-request')
      expect(body.message).toBe(err.message)
    }
    expect(parse({ q: '' }).conds).toEqual([])
    expect(parse({ q: '{"conds": []}' }).conds).toEqual([])
  })

  it('keeps whitelisted conditions with coerced values and drops the rest silently', () => {
    const conds = parse({
      q: q(
        { field: 'id', op: 'eq', val: '5' },
        { field: 'createdDt', op: 'gt', val: '2025-01-01T09:00:00+09:00' },
        { field: 'pinned', op: 'eq', val: 'true' },
        { field: 'rating', op: 'in', val: ['1.5', 2] },
        { field: 'owner', op: 'eq', val: 'bob' }, // not whitelisted
        { field: 'title', op: 'regex', val: '.*' }, // no such op
        { field: 'pinned', op: 'gt', val: true }, // op not allowed on the field
        { field: 'scoreLike', op: 'like', val: '1' }, // like on a non-string field
        { field: 'id', op: 'eq', val: '1 OR 1=1' }, // uncoercible
        { field: 'id', op: 'in', val: [1, 'two'] }, // one uncoercible element
        { field: 'id', op: 'in', val: 3 }, // in needs an array
        { field: 'id', op: 'in', val: Array.from({ length: 101 }, (_, i) => i) }, // too many values
        { field: 'title', op: 'eq' }, // no value
        { field: 'title', op: 'eq', val: null },
        { field: 'constructor', op: 'eq', val: 1 },
        { field: '__proto__', op: 'eq', val: 1 },
      ),
    }).conds
    expect(conds).toEqual([
      { field: 'id', op: 'eq', value: 5 },
      { field: 'createdDt', op: 'gt', value: '2025-01-01T00:00:00.000Z' },
      { field: 'pinned', op: 'eq', value: true },
      { field: 'rating', op: 'in', value: [1.5, 2] },
    ])
  })
})

describe('coerceValue', () => {
  it('coerces per type or answers undefined', () => {
    expect(coerceValue('string', 'a')).toBe('a')
    expect(coerceValue('string', 5)).toBe('5')
    expect(coerceValue('string', false)).toBe('false')
    for (const v of [null, undefined, {}, [], Number.NaN]) expect(coerceValue('string', v)).toBeUndefined()

    expect(coerceValue('integer', '-12')).toBe(-12)
    expect(coerceValue('integer', 7)).toBe(7)
    for (const v of ['1.5', 1.5, '', ' 1', '1e3', '99999999999999999', true, null]) expect(coerceValue('integer', v)).toBeUndefined()

    expect(coerceValue('number', '1.25')).toBe(1.25)
    expect(coerceValue('number', '-.5')).toBe(-0.5)
    expect(coerceValue('number', '1e3')).toBe(1000)
    for (const v of ['Infinity', 'NaN', '0x10', '', '1,5', Number.POSITIVE_INFINITY, '1e999']) {
      expect(coerceValue('number', v)).toBeUndefined()
    }

    expect(coerceValue('boolean', 'true')).toBe(true)
    expect(coerceValue('boolean', 0)).toBe(false)
    for (const v of ['yes', 2, 'TRUE', null]) expect(coerceValue('boolean', v)).toBeUndefined()
  })

  it('coerces ISO-8601 date-times to the canonical toISOString form', () => {
    expect(coerceValue('datetime', '2025-03-01')).toBe('2025-03-01T00:00:00.000Z')
    expect(coerceValue('datetime', '2025-03-01T09:30:00+09:00')).toBe('2025-03-01T00:30:00.000Z')
    expect(coerceValue('datetime', '2025-03-01T09:30+0900')).toBe('2025-03-01T00:30:00.000Z')
    expect(coerceValue('datetime', '2025-03-01T00:00:00.123456Z')).toBe('2025-03-01T00:00:00.123Z')
    expect(coerceValue('datetime', '2025-01-01T00:30:00-01:00')).toBe('2025-01-01T01:30:00.000Z')
    expect(coerceValue('datetime', '2024-02-29T00:00:00Z')).toBe('2024-02-29T00:00:00.000Z')
    expect(coerceValue('datetime', '0050-06-01')).toBe('0050-06-01T00:00:00.000Z')
    for (const v of [
      '2025-02-29T00:00:00Z', // not a leap year
      '2025-13-01',
      '2025-04-31',
      '2025-03-01T24:00:00Z',
      '2025-03-01T10:00:00', // no zone: ambiguous
      '2025-03-01 10:00:00Z',
      'March 1, 2025',
      'yesterday',
      '1740787200000',
      1740787200000,
      '0000-01-01T00:00:00+01:00', // before year 0
    ]) {
      expect(coerceValue('datetime', v)).toBeUndefined()
    }
  })

  it('escapes like wildcards with a portable escape character', () => {
    expect(containsPattern('100%_a!b\\c')).toBe('%100!%!_a!!b\\c%')
  })
})

for (const dialect of DIALECTS) {
  describe(dialect, () => {
    let t: TestDatabase
    let db: Kysely<any>

    beforeAll(async () => {
      t = await openTestDatabase(dialect)
      db = t.db
      await db.schema
        .createTable('items')
        .addColumn('id', 'integer', (c) => c.primaryKey())
        .addColumn('title', 'text', (c) => c.notNull())
        .addColumn('created_dt', 'text', (c) => c.notNull())
        .addColumn('score', 'integer', (c) => c.notNull())
        .addColumn('rating', 'double precision', (c) => c.notNull())
        .addColumn('pinned', 'boolean', (c) => c.notNull())
        .addColumn('owner', 'text', (c) => c.notNull())
        .execute()
      // better-sqlite3 binds no booleans: SQLite keeps them as 0/1.
      await db
        .insertInto('items')
        .values(ITEMS.map((r) => ({ ...r, pinned: dialect === 'sqlite' ? Number(r.pinned) : r.pinned })))
        .execute()
    })
    afterAll(async () => {
      await t?.cleanup()
    })

    const items = () => db.selectFrom('items').select(['id', 'title', 'created_dt', 'score', 'owner'])
    const list = (params: Record<string, string> | string, options: { enforce?: ListEnforce; provider?: ListProvider } = {}) => {
      const p = options.provider ?? provider
      return runList(items(), p, parseListRequest(new URLSearchParams(params), p), { enforce: options.enforce })
    }
    const tableCount = async () => Number((await db.selectFrom('items').select(sql<number>`count(*)`.as('n')).executeTakeFirstOrThrow()).n)

    it('without _usePaging answers every row, in primary key descending order, without paging headers', async () => {
      const r = await list('')
      expect(ids(r.rows)).toEqual(idsWhere(() => true))
      expect(r.rows.map((row: any) => row.positionIdx)).toEqual(ITEMS.map((_, i) => i + 1))
      expect(r.total).toBeUndefined()
      expect(r.page).toBeUndefined()
      expect([...r.headers.keys()]).toEqual([])
      // Page parameters without _usePaging apply nothing.
      expect((await list({ currentPage: '2', dataPerPage: '5', _usePaging: 'TRUE' })).rows).toHaveLength(N)
    })

    it('pages with headers and a positionIdx running across pages', async () => {
      const p1 = await list({ _usePaging: 'true', currentPage: '1', dataPerPage: '20' })
      const p2 = await list({ _usePaging: 'true', currentPage: '2', dataPerPage: '20' })
      expect(ids(p1.rows)).toEqual(idsWhere(() => true).slice(0, 20))
      expect(ids(p2.rows)).toEqual(idsWhere(() => true).slice(20, 40))
      expect((p2.rows[0] as any).positionIdx).toBe(21)
      expect(p2.rows.map((row: any) => row.positionIdx)).toEqual(Array.from({ length: 20 }, (_, i) => 21 + i))
      expect(p2.headers.get('x-app-total-count')).toBe(String(N))
      expect(p2.headers.get('x-app-page')).toBe('2')
      expect(p2.headers.get('x-app-data-count')).toBe('20')
      expect(p2).toMatchObject({ total: N, page: 2, perPage: 20 })

      const beyond = await list({ _usePaging: 'true', currentPage: '9', dataPerPage: '20' })
      expect(beyond.rows).toEqual([])
      expect(beyond.headers.get('x-app-total-count')).toBe(String(N))

      const dflt = await list({ _usePaging: 'true' })
      expect(dflt.rows).toHaveLength(40)
      expect(dflt.headers.get('x-app-data-count')).toBe('40')
      expect(dflt.headers.get('x-app-page')).toBe('1')
    })

    it('skips the count with skipCount=true', async () => {
      const r = await list({ _usePaging: 'true', currentPage: '3', dataPerPage: '10', skipCount: 'true' })
      expect(r.rows).toHaveLength(10)
      expect(r.total).toBeUndefined()
      expect(r.headers.has('x-app-total-count')).toBe(false)
      expect(r.headers.get('x-app-page')).toBe('3')
      expect(r.headers.get('x-app-data-count')).toBe('10')
    })

    it('clamps dataPerPage above the maximum', async () => {
      const r = await list({ _usePaging: 'true', dataPerPage: '1000' })
      expect(r.rows).toHaveLength(50)
      expect(r.perPage).toBe(50)
      expect(r.headers.get('x-app-data-count')).toBe('50')
    })

    it('sorts by several columns, drops unknown ones, and falls back to the provider order', async () => {
      const bySorted = (cmp: (a: Item, b: Item) => number) => [...ITEMS].sort(cmp).map((r) => r.id)
      const r = await list({ sortBy: 'score:desc,createdDt:asc' })
      expect(ids(r.rows)).toEqual(bySorted((a, b) => b.score - a.score || a.created_dt.localeCompare(b.created_dt)))

      const dropped = await list({ sortBy: 'nope:asc,owner:asc,score:desc' })
      expect(ids(dropped.rows)).toEqual(bySorted((a, b) => b.score - a.score || b.id - a.id))

      const fallback = await list({ sortBy: 'nope:asc,score:sideways' })
      expect(ids(fallback.rows)).toEqual(idsWhere(() => true))

      const withDefault: ListProvider = { ...provider, defaultOrder: [{ column: 'score', direction: 'asc' }] }
      const viaDefault = await list({ sortBy: 'nope' }, { provider: withDefault })
      expect(ids(viaDefault.rows)).toEqual(bySorted((a, b) => a.score - b.score || a.id - b.id))
    })

    it('adds a primary key tie-breaker: walking every page yields each row exactly once', async () => {
      for (const [sortBy, cmp] of [
        ['score:asc', (a: Item, b: Item) => a.score - b.score || a.id - b.id],
        ['score:desc', (a: Item, b: Item) => b.score - a.score || b.id - a.id],
        ['rating:asc,score:desc', (a: Item, b: Item) => a.rating - b.rating || b.score - a.score || b.id - a.id],
      ] as const) {
        const walked: number[] = []
        for (let page = 1; page <= Math.ceil(N / 7) + 1; page++) {
          const r = await list({ _usePaging: 'true', currentPage: String(page), dataPerPage: '7', sortBy })
          walked.push(...ids(r.rows))
        }
        expect(new Set(walked).size).toBe(N)
        expect(walked).toEqual([...ITEMS].sort(cmp).map((r) => r.id))
      }
    })

    it('applies every operator with the value coerced to the field type', async () => {
      const cases: Array<[object, (r: Item) => boolean]> = [
        [{ field: 'id', op: 'eq', val: '5' }, (r) => r.id === 5],
        [{ field: 'id', op: 'ne', val: 5 }, (r) => r.id !== 5],
        [{ field: 'id', op: 'gt', val: '55' }, (r) => r.id > 55],
        [{ field: 'id', op: 'ge', val: 55 }, (r) => r.id >= 55],
        [{ field: 'id', op: 'lt', val: '4' }, (r) => r.id < 4],
        [{ field: 'id', op: 'le', val: 4 }, (r) => r.id <= 4],
        [{ field: 'id', op: 'in', val: ['1', 2, '30'] }, (r) => [1, 2, 30].includes(r.id)],
        [{ field: 'id', op: 'in', val: [] }, () => false],
        [{ field: 'score', op: 'in', val: [0, '4'] }, (r) => r.score === 0 || r.score === 4],
        [{ field: 'title', op: 'eq', val: 'Item 10' }, (r) => r.id === 10],
        [{ field: 'title', op: 'ne', val: 'Item 10' }, (r) => r.id !== 10],
        [{ field: 'title', op: 'in', val: ['Item 11', 'Item 12', 'missing'] }, (r) => r.id === 11 || r.id === 12],
        [{ field: 'title', op: 'eq', val: 12 }, () => false], // coerced to '12'
        [{ field: 'title', op: 'like', val: 'item 1' }, (r) => /^Item 1/.test(r.title)], // contains, any case
        [{ field: 'title', op: 'like', val: '100%' }, (r) => r.id === 1],
        [{ field: 'title', op: 'like', val: '%' }, (r) => r.id === 1],
        [{ field: 'title', op: 'like', val: '_' }, (r) => r.id === 2],
        [{ field: 'title', op: 'like', val: '\\' }, (r) => r.id === 3],
        [{ field: 'title', op: 'like', val: '!' }, (r) => r.id === 4],
        [{ field: 'title', op: 'like', val: "o'brien" }, (r) => r.id === 5],
        [{ field: 'title', op: 'like', val: '' }, () => true],
        [{ field: 'createdDt', op: 'eq', val: '2025-01-01T05:00:00Z' }, (r) => r.id === 5],
        [{ field: 'createdDt', op: 'gt', val: '2025-01-02T00:00:00+09:00' }, (r) => r.id > 15],
        [{ field: 'createdDt', op: 'ge', val: '2025-01-03' }, (r) => r.id >= 48],
        [{ field: 'createdDt', op: 'lt', val: '2025-01-01T03:00:00.000+00:00' }, (r) => r.id < 3],
        [{ field: 'createdDt', op: 'le', val: '2025-01-01T03:00:00.000Z' }, (r) => r.id <= 3],
        [{ field: 'createdDt', op: 'ne', val: '2025-01-01T01:00:00Z' }, (r) => r.id !== 1],
        [{ field: 'createdDt', op: 'in', val: ['2025-01-01T01:00:00Z', '2025-01-01T11:00:00+01:00'] }, (r) => r.id === 1 || r.id === 10],
        [{ field: 'rating', op: 'eq', val: '1.5' }, (r) => r.rating === 1.5],
        [{ field: 'rating', op: 'gt', val: 0.75 }, (r) => r.rating > 0.75],
        [{ field: 'rating', op: 'le', val: '5e-1' }, (r) => r.rating <= 0.5],
        [{ field: 'rating', op: 'in', val: [0, '1'] }, (r) => r.rating === 0 || r.rating === 1],
        [{ field: 'pinned', op: 'eq', val: 'true' }, (r) => r.pinned],
        [{ field: 'pinned', op: 'eq', val: 0 }, (r) => !r.pinned],
        [{ field: 'pinned', op: 'ne', val: true }, (r) => !r.pinned],
        [{ field: 'pinned', op: 'in', val: ['1'] }, (r) => r.pinned],
      ]
      for (const [cond, pred] of cases) {
        const r = await list({ q: q(cond as any) })
        expect({ cond, ids: ids(r.rows) }).toEqual({ cond, ids: idsWhere(pred) })
      }
      // Several conditions are ANDed.
      const both = await list({ q: q({ field: 'score', op: 'eq', val: 1 }, { field: 'id', op: 'gt', val: 30 }) })
      expect(ids(both.rows)).toEqual(idsWhere((r) => r.score === 1 && r.id > 30))
    })

    it('counts the filtered rows, not the table', async () => {
      const r = await list({ _usePaging: 'true', dataPerPage: '5', q: q({ field: 'score', op: 'eq', val: 2 }) }, { enforce: ownerIsAlice })
      const expected = idsWhere((x) => x.score === 2 && x.owner === 'alice')
      expect(r.total).toBe(expected.length)
      expect(ids(r.rows)).toEqual(expected.slice(0, 5))
    })

    it('counts DISTINCT and grouped queries by their rows', async () => {
      const owners: ListProvider = { fields: {}, sortable: {}, primaryKey: 'owner' }
      const r = await runList(
        db.selectFrom('items').select('owner').distinct(),
        owners,
        parseListRequest(new URLSearchParams({ _usePaging: 'true', dataPerPage: '1' }), owners),
      )
      expect(r.total).toBe(2)
      expect(r.rows).toEqual([{ owner: 'bob' }])
    })

    it('drops unknown fields, ops and uncoercible values without widening beyond enforce', async () => {
      const all = await list({ _usePaging: 'true', dataPerPage: '50' }, { enforce: ownerIsAlice })
      expect(all.total).toBe(ALICE.length)
      for (const cond of [
        { field: 'owner', op: 'eq', val: 'bob' },
        { field: 'owner', op: 'ne', val: 'alice' },
        { field: 'title', op: 'or', val: '1=1' },
        { field: 'title', op: 'EQ', val: 'Item 01' },
        { field: 'pinned', op: 'like', val: 'true' },
        { field: 'id', op: 'eq', val: '1 OR 1=1' },
        { field: 'id', op: 'in', val: [3, 'x'] },
        { field: 'score', op: 'eq', val: 2.5 },
        { field: 'createdDt', op: 'gt', val: '2025-01-01T00:00:00' },
        { field: 'createdDt', op: 'gt', val: { $ne: null } },
      ]) {
        const r = await list({ _usePaging: 'true', dataPerPage: '50', q: q(cond) }, { enforce: ownerIsAlice })
        expect({ cond, total: r.total }).toEqual({ cond, total: ALICE.length })
        expect(r.rows.every((row: any) => row.owner === 'alice')).toBe(true)
      }
    })

    it('never lets q override the enforced conditions', async () => {
      const bobIds = ITEMS.filter((r) => r.owner === 'bob').map((r) => r.id)
      const r = await list({ q: q({ field: 'id', op: 'in', val: bobIds }) }, { enforce: ownerIsAlice })
      expect(r.rows).toEqual([])
      const mixed = await list({ q: q({ field: 'id', op: 'le', val: 6 }) }, { enforce: ownerIsAlice })
      expect(ids(mixed.rows)).toEqual([5, 4, 2, 1])
      // The enforced column is not on the whitelist: naming it is dropped, never ORed in.
      const named = await list(
        { q: q({ field: 'owner', op: 'eq', val: 'bob' }, { field: 'id', op: 'le', val: 6 }) },
        { enforce: ownerIsAlice },
      )
      expect(ids(named.rows)).toEqual([5, 4, 2, 1])
    })

    it('never executes SQL-looking text in field names, operators, sort columns or values', async () => {
      const before = await tableCount()
      const injections = ['title; DROP TABLE items; --', "' OR 1=1 --", 'id) OR (1=1', 'id; DELETE FROM items', '"id"', 'title" = title --']
      for (const text of injections) {
        const r = await list({
          _usePaging: 'true',
          dataPerPage: '50',
          sortBy: `${text}:asc,${text}`,
          q: q({ field: text, op: 'eq', val: 1 }, { field: 'title', op: text, val: 'x' }, { field: 'id', op: 'eq', val: text }),
        })
        expect(r.total).toBe(N)
        expect(ids(r.rows)).toEqual(idsWhere(() => true).slice(0, 50))
        // As a value it is bound: it matches only a row holding exactly that text.
        const asValue = await list({ q: q({ field: 'title', op: 'eq', val: text }) })
        expect(ids(asValue.rows)).toEqual(idsWhere((x) => x.title === text))
        const asLike = await list({ q: q({ field: 'title', op: 'like', val: text }) })
        expect(ids(asLike.rows)).toEqual(idsWhere((x) => x.title.toLowerCase().includes(text.toLowerCase())))
        const inList = await list({ q: q({ field: 'title', op: 'in', val: [text, 'Item 09'] }) })
        expect(ids(inList.rows)).toEqual(idsWhere((x) => x.title === text || x.title === 'Item 09'))
      }
      expect(ids((await list({ q: q({ field: 'title', op: 'eq', val: "' OR 1=1 --" }) })).rows)).toEqual([6])
      expect(ids((await list({ q: q({ field: 'title', op: 'eq', val: 'title; DROP TABLE items; --' }) })).rows)).toEqual([7])
      expect(await tableCount()).toBe(before)
      const tables = (await db.introspection.getTables()).map((x) => x.name)
      expect(tables).toContain('items')
    })

    it('checks a hand-built request against the provider again', async () => {
      const r = await runList(items(), provider, {
        paging: true,
        page: 1,
        perPage: 500,
        skipCount: false,
        sort: [
          { field: 'owner', direction: 'asc' },
          { field: 'id) OR (1=1', direction: 'asc' },
        ],
        conds: [
          { field: 'owner', op: 'eq', value: 'bob' },
          { field: 'id', op: 'eq', value: '1 OR 1=1' },
          { field: 'id', op: 'le', value: '3' },
        ],
      })
      expect(ids(r.rows)).toEqual([3, 2, 1])
      expect(r.perPage).toBe(50)
      const bad = { paging: true, page: 0, perPage: 10, skipCount: false, sort: [], conds: [] }
      await expect(runList(items(), provider, bad)).rejects.toMatchObject({ code: 'bad-request', status: 400 })
      await expect(runList(items(), provider, { ...bad, page: 1, perPage: 0 })).rejects.toMatchObject({ code: 'bad-request' })
    })

    it('answers through listResponse: a JSON array, the headers and no-store', async () => {
      const r = await list({ _usePaging: 'true', currentPage: '2', dataPerPage: '3', sortBy: 'id:asc' })
      const res = listResponse(r)
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8')
      expect(res.headers.get('cache-control')).toBe('no-store')
      expect(res.headers.get('x-app-total-count')).toBe(String(N))
      expect(res.headers.get('x-app-page')).toBe('2')
      expect(res.headers.get('x-app-data-count')).toBe('3')
      expect(res.headers.get('access-control-expose-headers')).toContain('x-app-total-count')
      const body = (await res.json()) as Array<{ id: number; positionIdx: number }>
      expect(body.map((b) => [Number(b.id), b.positionIdx])).toEqual([
        [4, 4],
        [5, 5],
        [6, 6],
      ])
      const plain = listResponse(await list(''))
      expect(plain.headers.has('x-app-page')).toBe(false)
      expect(((await plain.json()) as unknown[]).length).toBe(N)
    })

    it('gives mapRow the row with its positionIdx and keeps it on the mapped row', async () => {
      const r = await runList(
        items(),
        provider,
        parseListRequest(new URLSearchParams('_usePaging=true&currentPage=3&dataPerPage=4'), provider),
        {
          mapRow: (row) => ({ key: `item-${row.id}`, seen: row.positionIdx as number }),
        },
      )
      expect(r.rows).toEqual([
        { key: 'item-52', seen: 9, positionIdx: 9 },
        { key: 'item-51', seen: 10, positionIdx: 10 },
        { key: 'item-50', seen: 11, positionIdx: 11 },
        { key: 'item-49', seen: 12, positionIdx: 12 },
      ])
    })

    it('exportAll yields every row once, in the default order, whatever the page size', async () => {
      const collect = async (p: ListProvider, pageSize: number, enforce?: ListEnforce) => {
        const out: any[] = []
        for await (const row of exportAll(items().orderBy('title').limit(3), p, { pageSize, enforce })) out.push(row)
        return out
      }
      for (const pageSize of [1, 7, 60, 500]) {
        const rows = await collect(provider, pageSize)
        expect(ids(rows)).toEqual(idsWhere(() => true))
        expect(rows.map((r) => r.positionIdx)).toEqual(ITEMS.map((_, i) => i + 1))
        expect(Object.keys(rows[0]).sort()).toEqual(['created_dt', 'id', 'owner', 'positionIdx', 'score', 'title'])
      }
      const ordered: ListProvider = {
        ...provider,
        positionIdx: false,
        defaultOrder: [
          { column: 'score', direction: 'desc' },
          { column: 'created_dt', direction: 'asc' },
        ],
      }
      const rows = await collect(ordered, 4)
      expect(ids(rows)).toEqual([...ITEMS].sort((a, b) => b.score - a.score || a.created_dt.localeCompare(b.created_dt)).map((r) => r.id))
      expect(rows[0].positionIdx).toBeUndefined()

      const mixed: ListProvider = { ...provider, defaultOrder: [{ column: 'score', direction: 'asc' }] }
      const byScore = await collect(mixed, 5, ownerIsAlice)
      expect(ids(byScore)).toEqual([...ALICE].sort((a, b) => a.score - b.score || a.id - b.id).map((r) => r.id))

      const mapped: string[] = []
      for await (const key of exportAll(items(), provider, { pageSize: 9, mapRow: (row) => `${row.id}@${row.positionIdx}` }))
        mapped.push(key)
      expect(mapped.slice(0, 2)).toEqual(['60@1', '59@2'])
      expect(mapped).toHaveLength(N)
    })

    it('exportAll refuses a bad page size', async () => {
      const gen = exportAll(items(), provider, { pageSize: 0 })
      await expect(gen.next()).rejects.toThrow(/pageSize/)
    })
  })
}
