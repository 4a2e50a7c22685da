/**
 * The shapes of the list convention (what a provider allows, a parsed request, a result) and its limits.
 * @module
 */
import type { SelectQueryBuilder } from 'kysely'

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
