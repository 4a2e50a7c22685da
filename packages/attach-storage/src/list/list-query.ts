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

/** The operators a search field may allow. `like` is "contains"; `in` takes an array. */
export type ListOp = 'eq' | 'ne' | 'gt' | 'ge' | 'lt' | 'le' | 'like' | 'in'

/** Every operator, in a stable order. */
export const LIST_OPS: readonly ListOp[] = ['eq', 'ne', 'gt', 'ge', 'lt', 'le', 'like', 'in']

/** The value types a search field may have; a condition's value is coerced to it or dropped. */
export type ListFieldType = 'string' | 'integer' | 'number' | 'boolean' | 'datetime'

/** One whitelisted search field. */
export interface ListField {
  /** The field's value type; a condition's value is coerced to it, or the condition is dropped. */
  type: ListFieldType
  /** The operators allowed on this field. `like` applies to `string` fields only. */
  ops: readonly ListOp[]
  /** The column (`col` or `table.col`); default: the field's name in {@link ListProvider.fields}. */
  column?: string
}

/** What one list endpoint allows: the search whitelist, the sortable columns, the order rules. */
export interface ListProvider {
  /** Search whitelist: API field name → field. Server-enforced columns never belong here. */
  fields: Record<string, ListField>
  /** Sortable API name → column. */
  sortable: Record<string, string>
  /** The primary key column: unique, the tie-breaker of every order. */
  primaryKey: string
  /** Fallback order (and the order of {@link exportAll}); default: primary key descending. */
  defaultOrder?: Array<{ column: string; direction: 'asc' | 'desc' }>
  /**
   * Largest `dataPerPage`; larger requests are clamped to it.
   * @default 1000
   */
  maxPerPage?: number
  /** Fill `positionIdx` (1-based running number across pages) on every row. */
  positionIdx?: boolean
}

/** One parsed search condition. Its value is already coerced to the field's type. */
export interface ListCondition {
  /** The API name of a whitelisted field. */
  field: string
  /** An operator the field allows. */
  op: ListOp
  /** The value, of the field's type (an array for `in`). */
  value: unknown
}

/** One parsed sort entry (an API name of {@link ListProvider.sortable}). */
export interface ListSort {
  /** The API name of a sortable column. */
  field: string
  /** The direction. */
  direction: 'asc' | 'desc'
}

/** A parsed list request: what {@link parseListRequest} answers and {@link runList} takes. */
export interface ListRequest {
  /** `_usePaging=true`. */
  paging: boolean
  /** `currentPage`, from 1. */
  page: number
  /** `dataPerPage`, clamped to the provider's maximum. */
  perPage: number
  /** `linkPerPage`: accepted, not applied (the client draws its page links). */
  linkPerPage?: number
  /** `skipCount=true`: no total count query. */
  skipCount: boolean
  /** Whitelisted `sortBy` entries, in request order (unknown ones already dropped). */
  sort: ListSort[]
  /** Whitelisted `q` conditions (dropped ones already removed), ANDed. */
  conds: ListCondition[]
}

/** Any Kysely select query. */
export type AnySelectQuery = SelectQueryBuilder<any, any, any>

/** Adds the server-enforced conditions (tenant, owner, ...) to a query. */
export type ListEnforce = (qb: AnySelectQuery) => AnySelectQuery

/** Options of {@link runList}. */
export interface RunListOptions<T> {
  /** Server-enforced conditions, applied apart from and after `q`. */
  enforce?: ListEnforce
  /** Turns a database row (with `positionIdx` when the provider fills it) into the answered row. */
  mapRow?: (row: Record<string, any>) => T
}

/** What {@link runList} answers. */
export interface ListResult<T> {
  /** The rows of the page (every row without paging), mapped by `mapRow` when given. */
  rows: T[]
  /** Total matching rows (paging without `skipCount`). */
  total?: number
  /** Current page (paging only). */
  page?: number
  /** Rows per page (paging only). */
  perPage?: number
  /** `x-app-total-count`, `x-app-page`, `x-app-data-count` when paging (none without paging). */
  headers: Headers
}

/** Options of {@link exportAll}. */
export interface ExportAllOptions<T> extends RunListOptions<T> {
  /**
   * Rows fetched per round trip.
   * @default 500
   */
  pageSize?: number
}

/** Default `dataPerPage`. */
export const DEFAULT_PER_PAGE = 40
/** Default {@link ListProvider.maxPerPage}. */
export const DEFAULT_MAX_PER_PAGE = 1000
/** Largest number of values of one `in` condition; more makes the condition uncoercible (dropped). */
export const MAX_IN_VALUES = 100
/** Largest number of conditions in one `q`; more is a 400. */
export const MAX_CONDITIONS = 100

/** The names of the paging headers a paged list answers (and exposes to other origins). */
export const LIST_HEADERS = {
  totalCount: 'x-app-total-count',
  page: 'x-app-page',
  dataCount: 'x-app-data-count',
} as const

const Q_SHAPE = 'q must be JSON of the form {"conds": [{"field": "...", "op": "...", "val": ...}]}'

const badRequest = (message: string): AttachStorageError => new AttachStorageError('bad-request', message, { status: 400 })

const hasOwn = (record: object, key: string): boolean => Object.hasOwn(record, key)

function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

// ---------------------------------------------------------------------------------------------------
// Parsing
// ---------------------------------------------------------------------------------------------------

/**
 * Reads the list parameters of a request against a provider's whitelist.
 *
 * - `_usePaging`: only the exact string `true` turns paging on.
 * - `currentPage` (default 1), `dataPerPage` (default 40): decimal digits only. `currentPage` below 1 or
 *   not a number, `dataPerPage` below 1 or not a number: 400 `bad-request`. `dataPerPage` above the
 *   provider's `maxPerPage`: clamped to it. An empty value counts as absent. Checked with or without paging.
 * - `linkPerPage`: accepted (kept when a positive integer), not applied.
 * - `skipCount`: only `true` skips the count.
 * - `sortBy`: `name:dir,name2:dir2` (`asc`/`desc`, any case, default `asc`); entries naming a column
 *   outside `sortable`, with another direction, or repeated, are dropped silently.
 * - `q`: JSON `{conds: [{field, op, val}]}`; not JSON, or another shape (including more than 100
 *   conditions): 400 `bad-request`. A condition whose field is not whitelisted, whose op is not allowed on
 *   it, or whose value cannot be coerced to the field's type is dropped silently.
 *
 * @throws AttachStorageError `bad-request` (status 400) with a message that names the parameter.
 */
export function parseListRequest(params: URLSearchParams, provider: ListProvider): ListRequest {
  const maxPerPage = maxPerPageOf(provider)
  const page = positiveIntParam(params, 'currentPage', 1)
  const requestedPerPage = positiveIntParam(params, 'dataPerPage', DEFAULT_PER_PAGE)
  const perPage = Math.min(requestedPerPage, maxPerPage)
  if (!Number.isSafeInteger((page - 1) * perPage)) throw badRequest(`currentPage ${page} is too large`)

  const request: ListRequest = {
    paging: params.get('_usePaging') === 'true',
    page,
    perPage,
    skipCount: params.get('skipCount') === 'true',
    sort: parseSortBy(params.getAll('sortBy').join(','), provider),
    conds: parseQ(params.get('q'), provider),
  }
  const link = params.get('linkPerPage')
  if (link !== null && /^[0-9]{1,9}$/.test(link) && Number(link) >= 1) request.linkPerPage = Number(link)
  return request
}

function maxPerPageOf(provider: ListProvider): number {
  const max = provider.maxPerPage
  return typeof max === 'number' && Number.isSafeInteger(max) && max >= 1 ? max : DEFAULT_MAX_PER_PAGE
}

/** A positive integer parameter; absent or empty → `fallback`. Above MAX_SAFE_INTEGER → Infinity (clamped by the caller). */
function positiveIntParam(params: URLSearchParams, name: string, fallback: number): number {
  const raw = params.get(name)
  if (raw === null || raw === '') return fallback
  if (!/^[0-9]+$/.test(raw)) {
    throw badRequest(`${name} must be a positive integer (from 1), got ${JSON.stringify(raw.slice(0, 40))}`)
  }
  const n = Number(raw)
  if (n < 1) throw badRequest(`${name} must be a positive integer (from 1), got ${JSON.stringify(raw.slice(0, 40))}`)
  return Number.isSafeInteger(n) ? n : Number.POSITIVE_INFINITY
}

function parseSortBy(raw: string, provider: ListProvider): ListSort[] {
  const sort: ListSort[] = []
  const seen = new Set<string>()
  for (const entry of raw.split(',')) {
    const trimmed = entry.trim()
    if (trimmed === '') continue
    const colon = trimmed.lastIndexOf(':')
    const field = (colon === -1 ? trimmed : trimmed.slice(0, colon)).trim()
    const dir =
      colon === -1
        ? 'asc'
        : trimmed
            .slice(colon + 1)
            .trim()
            .toLowerCase()
    if (dir !== 'asc' && dir !== 'desc') continue
    if (!hasOwn(provider.sortable, field) || typeof provider.sortable[field] !== 'string') continue
    if (seen.has(field)) continue
    seen.add(field)
    sort.push({ field, direction: dir })
  }
  return sort
}

function parseQ(raw: string | null, provider: ListProvider): ListCondition[] {
  if (raw === null || raw.trim() === '') return []
  let parsed: unknown
  try {
    parsed = JSON.parse(raw)
  } catch {
    throw badRequest(`q is not valid JSON; ${Q_SHAPE}`)
  }
  if (!isPlainObject(parsed) || !Array.isArray(parsed.conds)) throw badRequest(Q_SHAPE)
  if (parsed.conds.length > MAX_CONDITIONS) throw badRequest(`q has more than ${MAX_CONDITIONS} conditions`)
  const conds: ListCondition[] = []
  for (const cond of parsed.conds) {
    if (!isPlainObject(cond) || typeof cond.field !== 'string' || typeof cond.op !== 'string') throw badRequest(Q_SHAPE)
    const checked = checkCondition(provider, cond.field, cond.op, cond.val)
    if (checked) conds.push({ field: cond.field, op: checked.op, value: checked.value })
  }
  return conds
}

/** The whitelisted field of a name (own properties only: `__proto__`, `constructor` are not fields). */
function fieldOf(provider: ListProvider, name: string): ListField | undefined {
  if (!hasOwn(provider.fields, name)) return undefined
  const field = provider.fields[name]
  return isPlainObject(field) && Array.isArray(field.ops) ? field : undefined
}

/** The column of a sortable name, or undefined. */
function sortColumnOf(provider: ListProvider, name: string): string | undefined {
  if (!hasOwn(provider.sortable, name)) return undefined
  const column = provider.sortable[name]
  return typeof column === 'string' && column !== '' ? column : undefined
}

/** A condition checked against the whitelist with its coerced value, or undefined (dropped). */
function checkCondition(
  provider: ListProvider,
  name: string,
  op: unknown,
  val: unknown,
): { field: ListField; column: string; op: ListOp; value: unknown } | undefined {
  const field = fieldOf(provider, name)
  if (!field) return undefined
  if (typeof op !== 'string' || !(LIST_OPS as readonly string[]).includes(op) || !field.ops.includes(op as ListOp)) return undefined
  const listOp = op as ListOp
  if (listOp === 'like' && field.type !== 'string') return undefined
  let value: unknown
  if (listOp === 'in') {
    if (!Array.isArray(val) || val.length > MAX_IN_VALUES) return undefined
    const values: unknown[] = []
    for (const item of val) {
      const v = coerceValue(field.type, item)
      if (v === undefined) return undefined
      values.push(v)
    }
    value = values
  } else {
    value = coerceValue(field.type, val)
    if (value === undefined) return undefined
  }
  return { field, column: field.column ?? name, op: listOp, value }
}

/**
 * A value coerced to a field type, or undefined when it cannot be.
 *
 * - string: a string; a finite number or a boolean becomes its text.
 * - integer: a safe integer, or a string of an optional `-` and digits.
 * - number: a finite number, or a decimal string (`1.5`, `-2`, `1e3`).
 * - boolean: `true`/`false`, `"true"`/`"false"`, `1`/`0`, `"1"`/`"0"`.
 * - datetime: an ISO-8601 string, answered as `Date.toISOString()` (UTC, milliseconds, `Z`). A date
 *   (`2025-03-01`) is midnight UTC; a date-time needs its zone (`Z` or `±hh:mm`): without one it is dropped.
 */
export function coerceValue(type: ListFieldType, value: unknown): unknown {
  switch (type) {
    case 'string':
      if (typeof value === 'string') return value
      if (typeof value === 'number' && Number.isFinite(value)) return String(value)
      if (typeof value === 'boolean') return String(value)
      return undefined
    case 'integer':
      if (typeof value === 'number') return Number.isSafeInteger(value) ? value : undefined
      if (typeof value === 'string' && /^-?[0-9]{1,16}$/.test(value)) {
        const n = Number(value)
        return Number.isSafeInteger(n) ? n : undefined
      }
      return undefined
    case 'number':
      if (typeof value === 'number') return Number.isFinite(value) ? value : undefined
      if (typeof value === 'string' && /^-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?$/.test(value)) {
        const n = Number(value)
        return Number.isFinite(n) ? n : undefined
      }
      return undefined
    case 'boolean':
      if (value === true || value === 'true' || value === 1 || value === '1') return true
      if (value === false || value === 'false' || value === 0 || value === '0') return false
      return undefined
    case 'datetime':
      return typeof value === 'string' ? coerceIsoDateTime(value) : undefined
    default:
      return undefined
  }
}

const ISO_DATE_TIME =
  /^([0-9]{4})-([0-9]{2})-([0-9]{2})(?:[Tt]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:[.,]([0-9]{1,9}))?)?(?:([Zz])|([-+])([0-9]{2}):?([0-9]{2})))?$/

function coerceIsoDateTime(text: string): string | undefined {
  const m = ISO_DATE_TIME.exec(text)
  if (!m) return undefined
  const [, y, mo, d, hh, mi, ss, frac, z, sign, oh, om] = m
  const year = Number(y)
  const month = Number(mo)
  const day = Number(d)
  if (month < 1 || month > 12 || day < 1 || day > daysInMonth(year, month)) return undefined
  let hour = 0
  let minute = 0
  let second = 0
  let ms = 0
  let offsetMinutes = 0
  if (hh !== undefined) {
    // A date-time without a zone is ambiguous (the server's zone is not the client's): not coerced.
    if (z === undefined && sign === undefined) return undefined
    hour = Number(hh)
    minute = Number(mi)
    second = ss === undefined ? 0 : Number(ss)
    if (hour > 23 || minute > 59 || second > 59) return undefined
    ms = frac === undefined ? 0 : Number(frac.slice(0, 3).padEnd(3, '0'))
    if (sign !== undefined) {
      const offH = Number(oh)
      const offM = Number(om)
      if (offH > 23 || offM > 59) return undefined
      offsetMinutes = (sign === '-' ? -1 : 1) * (offH * 60 + offM)
    }
  }
  const date = new Date(0)
  date.setUTCFullYear(year, month - 1, day) // not Date.UTC: it maps years 0..99 to 1900..1999
  date.setUTCHours(hour, minute - offsetMinutes, second, ms)
  if (Number.isNaN(date.getTime())) return undefined
  const iso = date.toISOString()
  // Years outside 0000..9999 (after the offset) have no canonical 24-character form.
  return /^[0-9]{4}-/.test(iso) ? iso : undefined
}

function daysInMonth(year: number, month: number): number {
  if (month === 2) return (year % 4 === 0 && year % 100 !== 0) || year % 400 === 0 ? 29 : 28
  return [4, 6, 9, 11].includes(month) ? 30 : 31
}

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
