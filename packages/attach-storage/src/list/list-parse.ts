/**
 * Parsing of a list request against a provider's whitelist: paging parameters, `sortBy`, `q` and the
 * coercion of a condition's value to its field's type. Every check a hand-built request must pass too.
 * @module
 */
import { AttachStorageError } from '../errors.js'
import {
  DEFAULT_MAX_PER_PAGE,
  DEFAULT_PER_PAGE,
  LIST_OPS,
  type ListCondition,
  type ListField,
  type ListFieldType,
  type ListOp,
  type ListProvider,
  type ListRequest,
  type ListSort,
  MAX_CONDITIONS,
  MAX_IN_VALUES,
} from './list-types.js'

const Q_SHAPE = 'q must be JSON of the form {"conds": [{"field": "...", "op": "...", "val": ...}]}'

export const badRequest = (message: string): AttachStorageError => new AttachStorageError('bad-request', message, { status: 400 })

export const hasOwn = (record: object, key: string): boolean => Object.hasOwn(record, key)

export function isPlainObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

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

export function maxPerPageOf(provider: ListProvider): number {
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
export function fieldOf(provider: ListProvider, name: string): ListField | undefined {
  if (!hasOwn(provider.fields, name)) return undefined
  const field = provider.fields[name]
  return isPlainObject(field) && Array.isArray(field.ops) ? field : undefined
}

/** The column of a sortable name, or undefined. */
export function sortColumnOf(provider: ListProvider, name: string): string | undefined {
  if (!hasOwn(provider.sortable, name)) return undefined
  const column = provider.sortable[name]
  return typeof column === 'string' && column !== '' ? column : undefined
}

/** A condition checked against the whitelist with its coerced value, or undefined (dropped). */
export function checkCondition(
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
