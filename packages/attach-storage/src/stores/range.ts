import { AttachStorageError } from '../errors.js'
import type { ByteRange } from './store.js'

/**
 * Checks an inclusive HTTP-style range against an object's size, the way every store answers it: `end`
 * past the last byte is cut to it; a malformed range, or a start at or past the end, is
 * `range-not-satisfiable` (416, with `details.size`). No range is the whole object.
 */
export function resolveRange(range: ByteRange | undefined, size: number, key: string): { start: number; end: number } {
  if (range === undefined) return { start: 0, end: size - 1 }
  const { start, end } = range
  const valid = Number.isSafeInteger(start) && start >= 0 && (end === undefined || (Number.isSafeInteger(end) && end >= start))
  if (!valid || start >= size) {
    throw new AttachStorageError(
      'range-not-satisfiable',
      `Range ${start}-${end ?? ''} is not satisfiable for key ${JSON.stringify(key)} of ${size} bytes`,
      { status: 416, details: { size } },
    )
  }
  return { start, end: end === undefined ? size - 1 : Math.min(end, size - 1) }
}
