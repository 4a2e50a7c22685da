/**
 * The host application's list and pagination convention (spec: "List and pagination convention of the
 * host application") as a helper for any Kysely select query. Framework-neutral: it reads
 * `URLSearchParams` and answers Web `Headers` / `Response`.
 *
 * @example
 * const provider: ListProvider = {
 *   fields: {
 *     title: { type: 'string', ops: ['eq', 'like'] },
 *     id: { type: 'integer', ops: ['eq', 'gt', 'lt'] },
 *     createdDt: { type: 'datetime', ops: ['gt', 'lt'], column: 'created_dt' },
 *   },
 *   sortable: { id: 'id', title: 'title', createdDt: 'created_dt' },
 *   primaryKey: 'id',
 *   positionIdx: true,
 * }
 * const request = parseListRequest(new URL(req.url).searchParams, provider) // throws 400 on bad input
 * const result = await runList(db.selectFrom('board').selectAll(), provider, request, {
 *   enforce: (qb) => qb.where('tenant_id', '=', user.tenantId), // never reachable from `q`
 * })
 * return listResponse(result)
 *
 * See docs/lists.md for the rules, the choices made where the spec leaves them open, and deep pages.
 * This module runs a request, answers it and exports every row; list-parse.ts reads a request and
 * list-types.ts holds the shapes and limits (both re-exported here).
 */
import {
  AliasNode,
  IdentifierNode,
  type KyselyPlugin,
  type PluginTransformQueryArgs,
  type PluginTransformResultArgs,
  type QueryResult,
  type RawBuilder,
  type RootOperationNode,
  SelectionNode,
  type SelectQueryBuilder,
  SelectQueryNode,
  sql,
  type UnknownRow,
} from 'kysely'
import { AttachStorageError } from '../errors.js'
import { badRequest, checkCondition, hasOwn, isPlainObject, maxPerPageOf, sortColumnOf } from './list-parse.js'
import {
  type AnySelectQuery,
  type ExportAllOptions,
  LIST_HEADERS,
  type ListCondition,
  type ListFieldType,
  type ListOp,
  type ListProvider,
  type ListRequest,
  type ListResult,
  type ListSort,
  type RunListOptions,
} from './list-types.js'

export { coerceValue, parseListRequest } from './list-parse.js'
export * from './list-types.js'

// ---------------------------------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------------------------------

interface OrderEntry {
  column: string
  direction: 'asc' | 'desc'
}

/** `like` escape character: `!` is a plain character in string literals of SQLite, PostgreSQL and MySQL. */
const LIKE_ESCAPE = '!'

/** A `like` value as a "contains" pattern: `%`, `_` and `!` matched literally (backslash is plain text). */
export function containsPattern(value: string): string {
  return `%${value.replace(/[!%_]/g, (c) => LIKE_ESCAPE + c)}%`
}

function conditionExpression(column: string, op: ListOp, type: ListFieldType, value: unknown): RawBuilder<boolean> {
  const ref = sql.ref(column)
  // better-sqlite3 cannot bind booleans and PostgreSQL cannot compare a boolean with an integer: the
  // literals TRUE/FALSE work on SQLite (0/1), PostgreSQL (boolean) and MySQL (tinyint) alike.
  const bind = (v: unknown) => (type === 'boolean' ? sql.lit(v === true) : sql`${v}`)
  switch (op) {
    case 'eq':
      return sql<boolean>`${ref} = ${bind(value)}`
    case 'ne':
      return sql<boolean>`${ref} <> ${bind(value)}`
    case 'gt':
      return sql<boolean>`${ref} > ${bind(value)}`
    case 'ge':
      return sql<boolean>`${ref} >= ${bind(value)}`
    case 'lt':
      return sql<boolean>`${ref} < ${bind(value)}`
    case 'le':
      return sql<boolean>`${ref} <= ${bind(value)}`
    case 'like':
      return sql<boolean>`lower(${ref}) like lower(${containsPattern(String(value))}) escape ${sql.lit(LIKE_ESCAPE)}`
    case 'in': {
      const values = value as unknown[]
      if (values.length === 0) return sql<boolean>`1 = 0`
      return sql<boolean>`${ref} in (${sql.join(values.map(bind))})`
    }
  }
}

/** Applies the whitelisted conditions of a request (re-checked, so a hand-built request is safe too). */
function applyConditions(query: AnySelectQuery, provider: ListProvider, conds: readonly ListCondition[]): AnySelectQuery {
  let qb = query
  for (const cond of conds) {
    const checked = checkCondition(provider, cond.field, cond.op, cond.value)
    if (!checked) continue
    qb = qb.where(conditionExpression(checked.column, checked.op, checked.field.type, checked.value))
  }
  return qb
}

/** The provider's default order (or primary key descending), made unique. */
function defaultOrderOf(provider: ListProvider): OrderEntry[] {
  const order: OrderEntry[] = []
  for (const entry of provider.defaultOrder ?? []) {
    if (typeof entry?.column !== 'string' || entry.column === '') continue
    if (order.some((o) => o.column === entry.column)) continue
    order.push({ column: entry.column, direction: entry.direction === 'desc' ? 'desc' : 'asc' })
  }
  if (order.length === 0) order.push({ column: provider.primaryKey, direction: 'desc' })
  return withTieBreaker(order, provider.primaryKey)
}

/** The order of a request: its sortBy, else the default order; always ending on the primary key. */
function requestOrderOf(provider: ListProvider, sort: readonly ListSort[]): OrderEntry[] {
  const order: OrderEntry[] = []
  for (const entry of sort) {
    const column = sortColumnOf(provider, entry.field)
    if (column === undefined || order.some((o) => o.column === column)) continue
    order.push({ column, direction: entry.direction === 'desc' ? 'desc' : 'asc' })
  }
  return order.length === 0 ? defaultOrderOf(provider) : withTieBreaker(order, provider.primaryKey)
}

/** Appends the primary key (in the direction of the last entry) unless the order already holds it. */
function withTieBreaker(order: OrderEntry[], primaryKey: string): OrderEntry[] {
  if (order.some((o) => o.column === primaryKey)) return order
  return [...order, { column: primaryKey, direction: order[order.length - 1]?.direction ?? 'desc' }]
}

function applyOrder(query: AnySelectQuery, order: readonly OrderEntry[]): AnySelectQuery {
  let qb = query.clearOrderBy()
  for (const o of order) qb = qb.orderBy(sql.ref(o.column), o.direction)
  return qb
}

/** Wraps a select into `select count(*) from (<select>) as list_count_src`: right for DISTINCT, GROUP BY, unions. */
class CountWrapPlugin implements KyselyPlugin {
  transformQuery({ node }: PluginTransformQueryArgs): RootOperationNode {
    if (!SelectQueryNode.is(node)) return node
    const from = SelectQueryNode.createFrom([AliasNode.create(node, IdentifierNode.create('list_count_src'))])
    const count = SelectionNode.create(sql`count(*)`.as('list_total').toOperationNode())
    return SelectQueryNode.cloneWithSelections(from, [count])
  }

  async transformResult({ result }: PluginTransformResultArgs): Promise<QueryResult<UnknownRow>> {
    return result
  }
}

const countWrap = new CountWrapPlugin()

async function countRows(filtered: AnySelectQuery): Promise<number> {
  const row = (await filtered.clearOrderBy().clearLimit().clearOffset().withPlugin(countWrap).executeTakeFirst()) as
    | { list_total?: unknown }
    | undefined
  const total = Number(row?.list_total ?? 0)
  return Number.isFinite(total) ? total : 0
}

function withPosition<T>(row: Record<string, any>, position: number | undefined, mapRow: ((row: Record<string, any>) => T) | undefined): T {
  if (position !== undefined) row.positionIdx = position
  if (!mapRow) return row as T
  const out = mapRow(row)
  if (position !== undefined && isPlainObject(out) && !hasOwn(out, 'positionIdx') && Object.isExtensible(out)) {
    ;(out as Record<string, unknown>).positionIdx = position
  }
  return out
}

/**
 * Runs a list request on a query: the `q` conditions (values bound), then `enforce`, then the order
 * (`sortBy`, else the provider's default order, else primary key descending; always ending on the primary
 * key), then the page (LIMIT/OFFSET) and, unless `skipCount`, a `count(*)` over the same filtered query.
 * Without paging: every row, no count, no paging headers. An ORDER BY, LIMIT or OFFSET already on `query`
 * is replaced (put a fixed order in `defaultOrder`).
 *
 * @throws AttachStorageError `bad-request` (400) when a hand-built request has a bad page or perPage.
 */
export async function runList<T = Record<string, any>>(
  query: SelectQueryBuilder<any, any, any>,
  provider: ListProvider,
  request: ListRequest,
  options: RunListOptions<T> = {},
): Promise<ListResult<T>> {
  let filtered = applyConditions(query, provider, request.conds)
  if (options.enforce) filtered = options.enforce(filtered)
  const ordered = applyOrder(filtered, requestOrderOf(provider, request.sort))
  const headers = new Headers()

  if (!request.paging) {
    const raw = (await ordered.execute()) as Record<string, any>[]
    const rows = raw.map((row, i) => withPosition(row, provider.positionIdx ? i + 1 : undefined, options.mapRow))
    return { rows, headers }
  }

  const page = request.page
  if (!Number.isSafeInteger(page) || page < 1) throw badRequest('currentPage must be a positive integer (from 1)')
  if (!(request.perPage >= 1)) throw badRequest('dataPerPage must be a positive integer (from 1)')
  const perPage = Math.min(Math.floor(request.perPage), maxPerPageOf(provider))
  const offset = (page - 1) * perPage
  if (!Number.isSafeInteger(offset)) throw badRequest(`currentPage ${page} is too large`)

  const [raw, total] = await Promise.all([
    ordered.clearLimit().clearOffset().limit(perPage).offset(offset).execute() as Promise<Record<string, any>[]>,
    request.skipCount ? Promise.resolve(undefined) : countRows(filtered),
  ])
  const rows = raw.map((row, i) => withPosition(row, provider.positionIdx ? offset + i + 1 : undefined, options.mapRow))
  if (total !== undefined) headers.set(LIST_HEADERS.totalCount, String(total))
  headers.set(LIST_HEADERS.page, String(page))
  headers.set(LIST_HEADERS.dataCount, String(perPage))
  const result: ListResult<T> = { rows, page, perPage, headers }
  if (total !== undefined) result.total = total
  return result
}

/** JSON text of rows; a bigint becomes a number when exact, else its decimal string. */
function rowsJson(rows: unknown[]): string {
  return JSON.stringify(rows, (_key, value: unknown) =>
    typeof value === 'bigint' ? (Number.isSafeInteger(Number(value)) ? Number(value) : value.toString()) : value,
  )
}

/**
 * The 200 answer of a list: a JSON array of the rows, the paging headers, `cache-control: no-store`,
 * `x-content-type-options: nosniff`, and `access-control-expose-headers` naming the paging headers (so a
 * browser on another allowed origin can read them; it means nothing without CORS).
 */
export function listResponse<T>(result: ListResult<T>): Response {
  const headers = new Headers(result.headers)
  headers.set('content-type', 'application/json; charset=utf-8')
  headers.set('cache-control', 'no-store')
  headers.set('x-content-type-options', 'nosniff')
  if (headers.has(LIST_HEADERS.page)) {
    headers.set('access-control-expose-headers', Object.values(LIST_HEADERS).join(', '))
  }
  return new Response(rowsJson(result.rows), { status: 200, headers })
}

// ---------------------------------------------------------------------------------------------------
// Bulk export
// ---------------------------------------------------------------------------------------------------

const KEY_PREFIX = '__list_k'

/**
 * Every row of `query` (after `enforce`), in the provider's deterministic default order (`defaultOrder`
 * + primary key, else primary key descending), whatever a request asked. Pages are fetched by keyset
 * (`WHERE (order columns) after (last row's values)`), not OFFSET, so the cost of a page does not grow
 * with its depth given an index on the order columns + primary key. Rows get `positionIdx` (1-based)
 * when the provider fills it.
 *
 * The order columns are selected under extra aliases (`__list_k0`, ...) removed from the yielded rows; a
 * query with GROUP BY must group by them. They must be NOT NULL: a NULL in the cursor throws
 * `config-invalid`, since NULLs sort differently per database.
 */
export async function* exportAll<T = Record<string, any>>(
  query: SelectQueryBuilder<any, any, any>,
  provider: ListProvider,
  options: ExportAllOptions<T> = {},
): AsyncGenerator<T, void, undefined> {
  const pageSize = options.pageSize ?? 500
  if (!Number.isSafeInteger(pageSize) || pageSize < 1) {
    throw new AttachStorageError('config-invalid', `exportAll pageSize must be a positive integer, got ${pageSize}`)
  }
  const order = defaultOrderOf(provider)
  let base = query.clearOrderBy().clearLimit().clearOffset()
  if (options.enforce) base = options.enforce(base)
  order.forEach((o, i) => {
    base = base.select(sql.ref(o.column).as(`${KEY_PREFIX}${i}`))
  })
  base = applyOrder(base, order)

  let cursor: unknown[] | undefined
  let position = 0
  for (;;) {
    const after = cursor
    const qb = after ? base.where(keysetPredicate(order, after)) : base
    const rows = (await qb.limit(pageSize).execute()) as Record<string, any>[]
    const last = rows[rows.length - 1]
    if (last) {
      cursor = order.map((o, i) => {
        const v = last[`${KEY_PREFIX}${i}`]
        if (v === null || v === undefined) {
          throw new AttachStorageError(
            'config-invalid',
            `exportAll needs NOT NULL order columns; ${o.column} is NULL in a row (give defaultOrder NOT NULL columns)`,
          )
        }
        return v
      })
    }
    for (const row of rows) {
      for (let i = 0; i < order.length; i++) delete row[`${KEY_PREFIX}${i}`]
      position++
      yield withPosition(row, provider.positionIdx ? position : undefined, options.mapRow)
    }
    if (rows.length < pageSize) return
  }
}

/**
 * Rows strictly after the cursor in `order`: `c1 ≥ v1 AND (c1 > v1 OR (c1 = v1 AND c2 > v2) OR ...)`
 * (flipped for `desc`). The redundant leading bound lets the database seek the index on c1.
 */
function keysetPredicate(order: readonly OrderEntry[], cursor: readonly unknown[]): RawBuilder<boolean> {
  const first = order[0]!
  const alternatives = order.map((o, i) => {
    const parts = order.slice(0, i).map((p, j) => sql<boolean>`${sql.ref(p.column)} = ${cursor[j]}`)
    parts.push(
      o.direction === 'asc' ? sql<boolean>`${sql.ref(o.column)} > ${cursor[i]}` : sql<boolean>`${sql.ref(o.column)} < ${cursor[i]}`,
    )
    return sql<boolean>`(${sql.join(parts, sql` and `)})`
  })
  const any = sql<boolean>`(${sql.join(alternatives, sql` or `)})`
  if (order.length === 1) return any
  const bound =
    first.direction === 'asc'
      ? sql<boolean>`${sql.ref(first.column)} >= ${cursor[0]}`
      : sql<boolean>`${sql.ref(first.column)} <= ${cursor[0]}`
  return sql<boolean>`(${bound} and ${any})`
}
