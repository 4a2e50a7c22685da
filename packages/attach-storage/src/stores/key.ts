import { AttachStorageError } from '../errors.js'

/**
 * The longest key accepted, in characters (all allowed characters are ASCII, so also in bytes).
 * S3 and Azure allow 1024 bytes.
 */
export const MAX_KEY_LENGTH = 1024

/** The longest segment accepted: most file systems limit one file name to 255 bytes. */
export const MAX_SEGMENT_LENGTH = 255

/**
 * One key segment: starts with an ASCII letter, digit, `_`, `@`, `+`, `=` or `-`; goes on with those,
 * `.`, `,` and the space; ends with anything but `.` or a space.
 */
const SEGMENT = /^[A-Za-z0-9_@+=-](?:[A-Za-z0-9._@+=, -]*[A-Za-z0-9_@+=,-])?$/

// biome-ignore lint/suspicious/noControlCharactersInRegex: finds the control characters a key must not hold
const CONTROL = /[\u0000-\u001f\u007f]/

const badKey = (what: string, key: string, reason: string): AttachStorageError =>
  new AttachStorageError('bad-key', `Invalid storage ${what} ${quote(key)}: ${reason}`, { status: 400 })

/** The key quoted for an error message: escaped (no raw control bytes in logs) and cut to a sane length. */
function quote(key: string): string {
  const shown = key.length > 120 ? `${key.slice(0, 120)}…` : key
  return JSON.stringify(shown)
}

/**
 * True when `segment` is one valid key segment (see {@link normalizeKey}); used by stores that walk
 * directories to skip names no key can have.
 */
export function isValidKeySegment(segment: string): boolean {
  return segment.length <= MAX_SEGMENT_LENGTH && SEGMENT.test(segment)
}

function checkSegments(what: string, original: string, body: string): void {
  const segments = body.split('/')
  for (let i = 0; i < segments.length; i++) {
    const segment = segments[i] as string
    if (segment === '') {
      throw badKey(what, original, i === segments.length - 1 ? 'it ends with "/"' : 'it has an empty segment ("//")')
    }
    if (segment === '.' || segment === '..') throw badKey(what, original, `it has a "${segment}" segment`)
    if (segment.length > MAX_SEGMENT_LENGTH) {
      throw badKey(what, original, `a segment is longer than ${MAX_SEGMENT_LENGTH} characters`)
    }
    if (!SEGMENT.test(segment)) {
      throw badKey(
        what,
        original,
        segment.startsWith('.')
          ? 'a segment starts with "."'
          : 'a segment holds a character outside A-Z a-z 0-9 . _ @ + = , - and inner spaces, or ends with "." or a space',
      )
    }
  }
}

function checkCommon(what: string, key: string): string {
  if (typeof key !== 'string') throw badKey(what, String(key), 'it is not a string')
  if (key.length > MAX_KEY_LENGTH + 1) throw badKey(what, key, `it is longer than ${MAX_KEY_LENGTH} characters`)
  if (CONTROL.test(key)) throw badKey(what, key, 'it holds a control character')
  if (key.includes('\\')) throw badKey(what, key, 'it holds a backslash')
  if (key.includes('%')) throw badKey(what, key, 'it holds "%" (percent-encoding is not decoded, nor accepted)')
  const body = key.startsWith('/') ? key.slice(1) : key
  if (body.length > MAX_KEY_LENGTH) throw badKey(what, key, `it is longer than ${MAX_KEY_LENGTH} characters`)
  return body
}

/**
 * The one key normalizer: every {@link Store} method passes its keys through it before touching storage.
 * Returns the key without its leading `/` (one is stripped, so `savedDir + name` values work), or throws
 * an `AttachStorageError` with code `bad-key` (status 400).
 *
 * A key is one or more `/`-separated segments, at most {@link MAX_KEY_LENGTH} characters in all. It is an
 * allowlist, not a blocklist — generated keys (`demo/2026/11/42/5b9c….png`) always pass:
 * - each segment matches `^[A-Za-z0-9_@+=-]([A-Za-z0-9._@+=, -]*[A-Za-z0-9_@+=,-])?$`: ASCII letters, digits,
 *   `.` `_` `@` `+` `=` `,` `-` and inner spaces; it never starts with `.` (so no `.`/`..` segments, no
 *   hidden files, no clash with a local store's `.name.x.partial` temporary files) and never ends with
 *   `.` or a space (Windows drops those, which would make two keys one file);
 * - each segment is at most {@link MAX_SEGMENT_LENGTH} characters;
 * - rejected: the empty key, empty segments (`a//b`, a trailing `/`), a second leading `/` (`//etc`),
 *   backslashes, NUL and every other control character, `:`, and `%`. Percent-encoding is never decoded,
 *   and `%` is refused outright, so `%2e%2e`, `%252e` or `%2f` cannot mean anything to a store
 *   or an SDK that decodes names further down.
 *
 * @example
 * normalizeKey('/demo/2026/11/42/abc.png') // 'demo/2026/11/42/abc.png'
 * normalizeKey('demo/../etc/passwd')       // throws bad-key
 */
export function normalizeKey(key: string): string {
  const body = checkCommon('key', key)
  if (body === '') throw badKey('key', key, 'it is empty')
  checkSegments('key', key, body)
  return body
}

/**
 * Normalizes a {@link Store.list} prefix: `''` (or `'/'`) for everything, otherwise a folder prefix
 * that ends with `/` and whose segments obey the rules of {@link normalizeKey}. One leading `/` is
 * stripped. A prefix that does not end with `/` is rejected (not completed), so that every store means
 * the same thing by it: `demo/20` is not a folder and would match differently on object stores and
 * file systems.
 *
 * @example
 * normalizePrefix('/demo/2026/') // 'demo/2026/'
 * normalizePrefix('')            // ''
 * normalizePrefix('demo')        // throws bad-key
 */
export function normalizePrefix(prefix: string): string {
  const body = checkCommon('prefix', prefix)
  if (body === '') return ''
  if (!body.endsWith('/')) throw badKey('prefix', prefix, 'a non-empty prefix must end with "/"')
  checkSegments('prefix', prefix, body.slice(0, -1))
  return body
}

/**
 * Joins key parts with `/` and normalizes the result with {@link normalizeKey}. Each part may hold
 * several segments; one leading and one trailing `/` of each part are dropped and parts that are then
 * empty are skipped, so `savedDir` values join as expected. Anything else (`..`, `//` inside a part)
 * is still rejected.
 *
 * @example
 * joinKey('/demo/2026/11/42/', 'abc.png') // 'demo/2026/11/42/abc.png'
 * joinKey('demo', '', 'a.png')            // 'demo/a.png'
 */
export function joinKey(...parts: string[]): string {
  const kept: string[] = []
  for (const part of parts) {
    if (typeof part !== 'string') throw badKey('key part', String(part), 'it is not a string')
    let p = part.startsWith('/') ? part.slice(1) : part
    if (p.endsWith('/')) p = p.slice(0, -1)
    if (p.startsWith('/') || p.endsWith('/')) throw badKey('key part', part, 'it has an empty segment ("//")')
    if (p !== '') kept.push(p)
  }
  return normalizeKey(kept.join('/'))
}

/** True when `key` is already in normal form (what {@link normalizeKey} would return unchanged). */
export function isNormalKey(key: string): boolean {
  try {
    return normalizeKey(key) === key
  } catch {
    return false
  }
}
