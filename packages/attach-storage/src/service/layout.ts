import { randomUUID } from 'node:crypto'
import { badRequest } from '../errors.js'

/** A generated stored name: a random UUID plus the original extension (lower case). */
export const SAVED_NAME = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(\.[a-z0-9]{1,16})?$/

/** Generates a stored name that keeps the extension; unguessable (122 random bits). */
export function generateSavedName(extension: string): string {
  return extension ? `${randomUUID()}.${extension}` : randomUUID()
}

/** A `refKey` that is safe as one path segment: letters, digits, `_`, `.`, `-`, starting with a letter or digit. */
const REF_KEY = /^[A-Za-z0-9][A-Za-z0-9_.-]{0,254}$/

/** Checks a `refKey` (400 `bad-request` when it is not a safe key). */
export function checkRefKey(refKey: unknown): string {
  const key = typeof refKey === 'number' && Number.isSafeInteger(refKey) ? String(refKey) : refKey
  if (typeof key !== 'string' || !REF_KEY.test(key)) {
    throw badRequest('refKey must be 1-255 letters, digits, "_", "." or "-", starting with a letter or digit')
  }
  return key
}

/** `{yyyy, MM}` of an instant in a time zone. */
export function yearMonth(date: Date, timeZone: string): { yyyy: string; MM: string } {
  const parts = new Intl.DateTimeFormat('en-US', { timeZone, year: 'numeric', month: '2-digit' }).formatToParts(date)
  const yyyy = parts.find((p) => p.type === 'year')!.value.padStart(4, '0')
  const MM = parts.find((p) => p.type === 'month')!.value
  return { yyyy, MM }
}

/** `savedDir` of a regular (confirmed) save: `/{refDomain}/{yyyy}/{MM}/{refKey}/`. */
export function regularSavedDir(refDomain: string, refKey: string, date: Date, timeZone: string): string {
  const { yyyy, MM } = yearMonth(date, timeZone)
  return `/${refDomain}/${yyyy}/${MM}/${refKey}/`
}

/** `savedDir` of a direct upload: `/{refDomain}/{yyyy}/{MM}/_/{refCategory}/`. */
export function directSavedDir(refDomain: string, refCategory: string, date: Date, timeZone: string): string {
  const { yyyy, MM } = yearMonth(date, timeZone)
  return `/${refDomain}/${yyyy}/${MM}/_/${refCategory}/`
}

/** The store key of a stored file: the savedDir without its leading `/`, plus the name. */
export function storeKey(savedDir: string, savedName: string): string {
  return savedDir.replace(/^\/+/, '') + savedName
}

const SEG = '[A-Za-z0-9][A-Za-z0-9_-]{0,63}'
const REGULAR_DIR = new RegExp(`^/(${SEG})/(\\d{4})/(\\d{2})/([A-Za-z0-9][A-Za-z0-9_.-]{0,254})/$`)

/** Parses a regular `savedDir`; undefined when it is not one. */
export function parseRegularSavedDir(savedDir: unknown): { refDomain: string; refKey: string } | undefined {
  if (typeof savedDir !== 'string') return undefined
  const m = REGULAR_DIR.exec(savedDir)
  return m ? { refDomain: m[1]!, refKey: m[4]! } : undefined
}

/**
 * Parses the `path` of a direct file (`/{refDomain}/{yyyy}/{MM}/_/{refCategory}/{savedName}`) and checks
 * that it lies in that domain's and category's direct area. Anything else, traversal included, is
 * undefined.
 */
export function parseDirectPath(
  path: unknown,
  refDomain: string,
  refCategory: string,
): { savedDir: string; savedName: string } | undefined {
  if (typeof path !== 'string' || path.length > 512) return undefined
  const m = /^\/?([^/]+)\/(\d{4})\/(\d{2})\/_\/([^/]+)\/([^/]+)$/.exec(path)
  if (!m || m[1] !== refDomain || m[4] !== refCategory || !SAVED_NAME.test(m[5]!)) return undefined
  return { savedDir: `/${m[1]}/${m[2]}/${m[3]}/_/${m[4]}/`, savedName: m[5]! }
}
