/**
 * Property-based tests (fast-check) of the list query on a real SQLite database: any parameters either
 * answer 400 `bad-request` or run; what runs matches a plain in-memory model of the same rows, and a page
 * is exactly its slice of the whole ordered list.
 */
import fc from 'fast-check'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openTestDatabase, type TestDatabase } from '../../../../test/databases.js'
import { AttachStorageError } from '../errors.js'
import {
  LIST_OPS,
  type ListOp,
  type ListProvider,
  type ListRequest,
  type ListResult,
  listResponse,
  parseListRequest,
  runList,
} from './list-query.js'

const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31)
console.info(`list-query.fuzz: seed ${SEED}`)
const params = (numRuns: number) => ({ seed: SEED, numRuns })

const CMP: ListOp[] = ['eq', 'ne', 'gt', 'ge', 'lt', 'le', 'in']
const provider: ListProvider = {
  fields: {
    id: { type: 'integer', ops: CMP },
    title: { type: 'string', ops: ['eq', 'ne', 'like', 'in'] },
    score: { type: 'integer', ops: CMP },
    rating: { type: 'number', ops: CMP },
    pinned: { type: 'boolean', ops: ['eq', 'ne', 'in'] },
    createdDt: { type: 'datetime', ops: CMP, column: 'created_dt' },
  },
  sortable: { id: 'id', title: 'title', score: 'score', rating: 'rating', createdDt: 'created_dt' },
  primaryKey: 'id',
  positionIdx: true,
  maxPerPage: 25,
}

interface Row {
  id: number
  title: string
  score: number
  rating: number
  pinned: number
  created_dt: string
  owner: string
}

const TITLES = [
  'Report 100% done',
  'snake_case',
  'back\\slash',
  'bang! title',
  "O'Brien",
  "' OR 1=1 --",
  'a; DROP TABLE items; --',
  '%',
  '_',
  '!',
  '!%',
  'Ünïcödé',
  '日本語',
  '\u{1f600} emoji',
  '',
  ' ',
  'null',
  'NULL',
  '"quoted"',
  'line\nbreak',
]
const N = 60
const BASE = Date.parse('2025-01-01T00:00:00.000Z')
const ROWS: Row[] = Array.from({ length: N }, (_, k) => {
  const i = k + 1
  return {
    id: i,
    title: TITLES[i % TITLES.length]! + (i % 3 === 0 ? '' : ` ${i}`),
    score: ((i * 7) % 11) - 5,
    rating: ((i * 3) % 8) * 0.25,
    pinned: i % 4 === 0 ? 1 : 0,
    created_dt: new Date(BASE + ((i * 37) % N) * 3_600_000).toISOString(),
    owner: i % 3 === 0 ? 'bob' : 'alice',
  }
})

// ---- generators ----------------------------------------------------------------------------------

const fieldName = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...Object.keys(provider.fields)) },
  { weight: 1, arbitrary: fc.constantFrom('owner', '__proto__', 'constructor', 'created_dt', 'id;', 'title ', '') },
  { weight: 1, arbitrary: fc.string({ maxLength: 8 }) },
)
const opName = fc.oneof(
  { weight: 6, arbitrary: fc.constantFrom(...LIST_OPS) },
  { weight: 1, arbitrary: fc.constantFrom('regex', 'EQ', 'like ', '', 'toString') },
)
const scalar = fc.oneof(
  fc.integer({ min: -8, max: 70 }),
  fc.double(),
  fc.constantFrom(0, -0, 1e308, -1e308, Number.MAX_SAFE_INTEGER + 2, 2 ** 63, 0.5),
  fc.boolean(),
  fc.constant(null),
  fc.constantFrom(...TITLES),
  fc.string({ maxLength: 10 }),
  fc.constantFrom('5', '-3', '1.5', '1e3', '0x10', ' 5', '5 ', '99999999999999999', 'true', '1', '0'),
  fc.constantFrom(
    '2025-01-02',
    '2025-01-02T03:00:00Z',
    '2025-01-02T03:00:00+09:00',
    '2025-02-30',
    '2025-01-02T03:00:00',
    '0000-01-01',
    '9999-12-31T23:59:59-23:59',
  ),
)
const value = fc.oneof(
  { weight: 5, arbitrary: scalar },
  { weight: 2, arbitrary: fc.array(scalar, { maxLength: 6 }) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 2 }) },
)
const anyCond = fc.record({ field: fieldName, op: opName, val: value }, { requiredKeys: ['field', 'op'] })
/** A condition that is likely to be kept: a whitelisted field, an allowed op, a value of its type. */
const typedValue: Record<string, fc.Arbitrary<unknown>> = {
  id: fc.oneof(fc.integer({ min: -2, max: 62 }), fc.integer({ min: -2, max: 62 }).map(String)),
  title: fc.oneof(fc.constantFrom(...TITLES, ...TITLES.map((t) => t.slice(0, 2)), '1', '0 2', 'E', 'é'), fc.string({ maxLength: 3 })),
  score: fc.oneof(fc.integer({ min: -6, max: 6 }), fc.integer({ min: -6, max: 6 }).map(String)),
  rating: fc.oneof(fc.constantFrom(0, 0.25, 0.5, 1, 1.75, -0, 2), fc.constantFrom('0.5', '1.', '.25', '1e0', '-0')),
  pinned: fc.constantFrom(true, false, 'true', 'false', 1, 0, '1', '0'),
  createdDt: fc
    .integer({ min: -2, max: N + 2 })
    .chain((h) =>
      fc.constantFrom(
        new Date(BASE + h * 3_600_000).toISOString(),
        new Date(BASE + h * 3_600_000).toISOString().replace('.000Z', '+09:00'),
        new Date(BASE + h * 3_600_000).toISOString().slice(0, 10),
      ),
    ),
}
const typedCond = fc
  .constantFrom(...Object.keys(provider.fields))
  .chain((field) =>
    fc
      .constantFrom(...provider.fields[field]!.ops)
      .chain((op) =>
        (op === 'in' ? fc.array(typedValue[field]!, { maxLength: 4 }) : typedValue[field]!).map((val) => ({ field, op, val })),
      ),
  )
const cond = fc.oneof({ weight: 3, arbitrary: typedCond }, { weight: 1, arbitrary: anyCond })
const qText = fc.oneof(
  { weight: 12, arbitrary: fc.array(cond, { maxLength: 5 }).map((conds) => JSON.stringify({ conds })) },
  { weight: 1, arbitrary: fc.jsonValue({ maxDepth: 3 }).map((v) => JSON.stringify(v)) },
  { weight: 1, arbitrary: fc.string({ maxLength: 30 }) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '',
      ' ',
      '{"conds":[]}',
      '{"conds":null}',
      '{conds:[]}',
      JSON.stringify({ conds: Array(101).fill({ field: 'id', op: 'eq', val: 1 }) }),
    ),
  },
)
const intText = fc.oneof(
  { weight: 6, arbitrary: fc.integer({ min: 1, max: 8 }).map(String) },
  { weight: 1, arbitrary: fc.integer({ min: -5, max: 5000 }).map(String) },
  {
    weight: 1,
    arbitrary: fc.constantFrom(
      '',
      '0',
      '-1',
      '1.5',
      '1e3',
      '+2',
      ' 2',
      'x',
      '007',
      '9007199254740993',
      '99999999999999999999999',
      '0x10',
      '２',
    ),
  },
)
const sortEntry = fc
  .tuple(
    fc.oneof(fc.constantFrom(...Object.keys(provider.sortable), 'owner', '__proto__', 'id;drop'), fc.string({ maxLength: 6 })),
    fc.constantFrom('', ':asc', ':desc', ':DESC', ':sideways', ':', '::asc'),
  )
  .map(([f, d]) => f + d)
const sortBy = fc.array(sortEntry, { maxLength: 4 }).map((e) => e.join(','))

const listParams = fc
  .record(
    {
      _usePaging: fc.constantFrom('true', 'false', 'TRUE', '1', ''),
      currentPage: intText,
      dataPerPage: intText,
      skipCount: fc.constantFrom('true', 'false', ''),
      sortBy,
      q: qText,
      linkPerPage: intText,
    },
    { requiredKeys: [] },
  )
  .chain((known) =>
    fc.array(fc.tuple(fc.string({ maxLength: 8 }), fc.string({ maxLength: 8 })), { maxLength: 3 }).map((extra) => {
      const p = new URLSearchParams(known as Record<string, string>)
      for (const [k, v] of extra) p.append(k, v)
      return p
    }),
  )

// ---- an in-memory model of the filter and the order ----------------------------------------------

const asciiLower = (s: string) => s.replace(/[A-Z]/g, (c) => c.toLowerCase())

function matches(row: Row, field: string, op: ListOp, value: unknown): boolean {
  const column = (provider.fields[field]!.column ?? field) as keyof Row
  const v = row[column]
  const type = provider.fields[field]!.type
  const norm = (x: unknown) => (type === 'boolean' ? (x ? 1 : 0) : x) as any
  const cmp = (x: any): number => (v < x ? -1 : v > x ? 1 : 0)
  switch (op) {
    case 'eq':
      return cmp(norm(value)) === 0
    case 'ne':
      return cmp(norm(value)) !== 0
    case 'gt':
      return cmp(norm(value)) > 0
    case 'ge':
      return cmp(norm(value)) >= 0
    case 'lt':
      return cmp(norm(value)) < 0
    case 'le':
      return cmp(norm(value)) <= 0
    case 'like':
      return asciiLower(String(v)).includes(asciiLower(String(value)))
    case 'in':
      return (value as unknown[]).some((x) => cmp(norm(x)) === 0)
  }
}

function model(request: ReturnType<typeof parseListRequest>, enforceAlice: boolean): number[] {
  let rows = ROWS.filter((r) => request.conds.every((c) => matches(r, c.field, c.op, c.value)))
  if (enforceAlice) rows = rows.filter((r) => r.owner === 'alice')
  const order = request.sort.length
    ? [...request.sort.map((s) => ({ column: provider.sortable[s.field] as keyof Row, dir: s.direction }))]
    : [{ column: 'id' as keyof Row, dir: 'desc' as const }]
  if (!order.some((o) => o.column === 'id')) order.push({ column: 'id', dir: order[order.length - 1]!.dir })
  // SQLite compares text by bytes (BINARY collation): compare UTF-8, not UTF-16 code units.
  const key = (x: unknown) => (typeof x === 'string' ? Buffer.from(x, 'utf8') : x)
  rows = [...rows].sort((a, b) => {
    for (const o of order) {
      const x = key(a[o.column])
      const y = key(b[o.column])
      const c = Buffer.isBuffer(x)
        ? Buffer.compare(x, y as Buffer)
        : (x as number) < (y as number)
          ? -1
          : (x as number) > (y as number)
            ? 1
            : 0
      if (c !== 0) return o.dir === 'asc' ? c : -c
    }
    return 0
  })
  return rows.map((r) => r.id)
}

// ---- the properties -------------------------------------------------------------------------------

describe('list query under fuzzing (SQLite)', () => {
  let t: TestDatabase
  beforeAll(async () => {
    t = await openTestDatabase('sqlite')
    await t.db.schema
      .createTable('items')
      .addColumn('id', 'integer', (c) => c.primaryKey())
      .addColumn('title', 'text', (c) => c.notNull())
      .addColumn('score', 'integer', (c) => c.notNull())
      .addColumn('rating', 'real', (c) => c.notNull())
      .addColumn('pinned', 'integer', (c) => c.notNull())
      .addColumn('created_dt', 'text', (c) => c.notNull())
      .addColumn('owner', 'text', (c) => c.notNull())
      .execute()
    await t.db.insertInto('items').values(ROWS).execute()
  })
  afterAll(async () => {
    await t?.cleanup()
  })

  const query = () => t.db.selectFrom('items').selectAll()

  it('any parameters: 400 bad-request, or rows that match the model exactly, page by page (800 cases)', async () => {
    const seen = { refused: 0, ran: 0, withConds: 0, paged: 0, sorted: 0 }
    await fc.assert(
      fc.asyncProperty(listParams, fc.boolean(), async (p, enforceAlice) => {
        let request: ListRequest
        try {
          request = parseListRequest(p, provider)
        } catch (err) {
          expect(err).toBeInstanceOf(AttachStorageError)
          const e = err as AttachStorageError
          expect(e.code).toBe('bad-request')
          expect(e.status).toBe(400)
          const res = e.toResponse()
          const body = (await res.json()) as Record<string, unknown>
          expect(body).toEqual({ code: 'bad-request', message: e.message })
          seen.refused++
          return
        }
        seen.ran++
        if (request.conds.length) seen.withConds++
        if (request.paging) seen.paged++
        if (request.sort.length) seen.sorted++
        expect(request.perPage).toBeGreaterThanOrEqual(1)
        expect(request.perPage).toBeLessThanOrEqual(25)
        const enforce = enforceAlice ? (qb: any) => qb.where('owner', '=', 'alice') : undefined
        const expected = model(request, enforceAlice)
        let result: ListResult<Record<string, any>>
        try {
          result = await runList(query(), provider, request, { enforce })
        } catch (err) {
          // Only a 400 may come out of a request that parsed (a page too deep to count).
          expect(err, String(err)).toBeInstanceOf(AttachStorageError)
          expect((err as AttachStorageError).status).toBe(400)
          return
        }
        const got = result.rows.map((r) => Number(r.id))
        if (!request.paging) {
          expect(got).toEqual(expected)
          expect(result.rows.map((r) => r.positionIdx)).toEqual(expected.map((_, i) => i + 1))
          expect(result.headers.get('x-app-page')).toBeNull()
        } else {
          const from = (request.page - 1) * request.perPage
          expect(got).toEqual(expected.slice(from, from + request.perPage))
          expect(result.rows.map((r) => r.positionIdx)).toEqual(got.map((_, i) => from + i + 1))
          expect(result.headers.get('x-app-page')).toBe(String(request.page))
          expect(result.headers.get('x-app-data-count')).toBe(String(request.perPage))
          if (request.skipCount) expect(result.headers.get('x-app-total-count')).toBeNull()
          else expect(result.headers.get('x-app-total-count')).toBe(String(expected.length))
        }
        if (enforceAlice) for (const r of result.rows) expect(r.owner).toBe('alice')
        const res = listResponse(result)
        expect(res.status).toBe(200)
        expect(((await res.json()) as unknown[]).length).toBe(got.length)
      }),
      params(800),
    )
    console.info('list-query.fuzz: cases', seen)
    // The generators must reach the query, not only the parser's refusals.
    expect(seen.ran).toBeGreaterThan(200)
    expect(seen.withConds).toBeGreaterThan(50)
    expect(seen.paged).toBeGreaterThan(30)
  })

  it('walking every page gives the whole list once, in order (300 cases)', async () => {
    await fc.assert(
      fc.asyncProperty(fc.array(cond, { maxLength: 3 }), sortBy, fc.integer({ min: 1, max: 25 }), async (conds, sort, perPage) => {
        const base = { q: JSON.stringify({ conds }), sortBy: sort, dataPerPage: String(perPage), _usePaging: 'true' }
        const all = await runList(query(), provider, parseListRequest(new URLSearchParams({ ...base, _usePaging: 'false' }), provider))
        const walked: number[] = []
        for (let page = 1; page <= Math.ceil(all.rows.length / perPage) + 1; page++) {
          const r = await runList(
            query(),
            provider,
            parseListRequest(new URLSearchParams({ ...base, currentPage: String(page) }), provider),
          )
          expect(r.total).toBe(all.rows.length)
          walked.push(...r.rows.map((x) => Number(x.id)))
        }
        expect(walked).toEqual(all.rows.map((x) => Number(x.id)))
      }),
      params(300),
    )
  })
})
