import { AttachStorageError } from '../errors.js'
import type { ByteRange } from '../stores/store.js'

/** A key as messages quote it: JSON, cut after 120 characters. */
export function quoteKey(key: string): string {
  return JSON.stringify(key.length > 120 ? `${key.slice(0, 120)}…` : key)
}

/**
 * `text` with every secret replaced by `mask`. Secrets shorter than 3 characters are left alone (they
 * would mask ordinary words); the longest are replaced first, so that no secret is left half-masked.
 */
export function redact(text: string, secrets: readonly string[], mask = '***'): string {
  let out = text
  const sorted = secrets.filter((s) => typeof s === 'string' && s.length >= 3).sort((a, b) => b.length - a.length)
  for (const secret of sorted) out = out.split(secret).join(mask)
  return out
}

/**
 * The `not-found` error (404) of a missing object, the same in every store.
 *
 * @example
 * if (err.code === 'ENOENT') throw notFoundError(this.name, key, err)
 */
export function notFoundError(store: string, key: string, cause?: unknown): AttachStorageError {
  return new AttachStorageError('not-found', `No object at key ${quoteKey(key)} in store "${store}"`, {
    status: 404,
    ...(cause !== undefined ? { cause } : {}),
  })
}

/**
 * The `store-failure` error (502) of anything else that went wrong in the transport. The message
 * names the store and the operation; every secret is masked in it.
 *
 * @example
 * throw storeFailure(`SFTP store "${this.name}": put of ${quoteKey(key)} failed: ${reason}`, { cause: err, secrets })
 */
export function storeFailure(
  message: string,
  options: { cause?: unknown; secrets?: readonly string[]; mask?: string } = {},
): AttachStorageError {
  return new AttachStorageError('store-failure', redact(message, options.secrets ?? [], options.mask), {
    status: 502,
    ...(options.cause !== undefined ? { cause: options.cause } : {}),
  })
}

/** The `range-not-satisfiable` error (416, with the object's `size` in the body) of a range past the end. */
export function rangeNotSatisfiable(key: string, range: ByteRange, size: number): AttachStorageError {
  return new AttachStorageError(
    'range-not-satisfiable',
    `Range ${range.start}-${range.end ?? ''} is not satisfiable for key ${quoteKey(key)} of ${size} bytes`,
    { status: 416, details: { size } },
  )
}

/** The `bad-key` error (400) of a key the transport cannot hold (the key normalizer refuses the others). */
export function badKeyError(key: string, reason: string): AttachStorageError {
  return new AttachStorageError('bad-key', `Invalid storage key ${quoteKey(key)}: ${reason}`, { status: 400 })
}

/** True when `range` is well formed: integers, `start >= 0`, and `end >= start` when given. */
export function isValidRange(range: ByteRange): boolean {
  const { start, end } = range
  return Number.isSafeInteger(start) && start >= 0 && (end === undefined || (Number.isSafeInteger(end) && end >= start))
}
