/** Answers of the HTTP layer: JSON, errors as `{code, message}`, and bounded JSON bodies. */
import { AttachStorageError, badRequest, tooLarge } from '../errors.js'
import type { Logger } from '../service/types.js'
import type { FileAnswer } from './serve.js'

/** The JSON body limit of the JSON group (AttachBags, record lists). */
const JSON_LIMIT = 2 * 1024 * 1024

/** A JSON answer, never cached, with `nosniff`. */
export function json(body: unknown, status = 200, headers?: HeadersInit): Response {
  const h = new Headers(headers)
  h.set('content-type', 'application/json; charset=utf-8')
  h.set('cache-control', 'no-store')
  h.set('x-content-type-options', 'nosniff')
  return new Response(JSON.stringify(body), { status, headers: h })
}

/**
 * The error a client is answered for `err`: an `AttachStorageError` as it is, but a 5xx with a generic
 * message (the detail, store names, keys and hosts, goes to the log), and anything else a bare 500
 * `internal-error`, logged. A 503 `busy` (a bound refusing load, with `Retry-After`) is not a fault.
 */
export function answeredError(err: unknown, logger: Logger): AttachStorageError {
  if (err instanceof AttachStorageError) {
    // busy (a bound refusing load), scan-unavailable (its message names no address) and preview-pending
    // (a job not done yet) are answered as they are.
    if (err.code === 'busy' || err.code === 'scan-unavailable' || err.code === 'preview-pending') return err
    if (err.status >= 500 && err.code !== 'attach-save-failure') {
      logger.error('attach-storage:', err)
      const message = err.status === 503 ? 'The service is not ready' : 'The storage backend failed; try again later'
      return new AttachStorageError(err.code, message, { status: err.status, headers: err.headers })
    }
    return err
  }
  logger.error('attach-storage: unexpected error', err)
  return new AttachStorageError('internal-error', 'An internal error occurred', { status: 500 })
}

/**
 * An error's answer as status, headers and bytes, the same as `AttachStorageError.toResponse(headers)`:
 * the error's own headers, then `headers`, then the JSON type, `nosniff` and `no-store` over them.
 */
export function errorAnswer(err: AttachStorageError, headers: Array<[string, string]> = []): FileAnswer {
  const merged = new Map<string, string>(Object.entries(err.headers ?? {}).map(([k, val]) => [k.toLowerCase(), val]))
  for (const [name, value] of headers) merged.set(name.toLowerCase(), value)
  merged.set('content-type', 'application/json; charset=utf-8')
  merged.set('x-content-type-options', 'nosniff')
  merged.set('cache-control', 'no-store')
  return { status: err.status, headers: [...merged], body: Buffer.from(JSON.stringify(err.toJSON())) }
}

/** Turns any error into its JSON answer; unexpected errors become a bare 500 (logged, never a stack). */
export function errorResponse(err: unknown, logger: Logger): Response {
  return answeredError(err, logger).toResponse()
}

/** Reads a JSON body of at most `limit` bytes; 400 when malformed, 413 when larger. */
export async function readJson(request: Request, limit = JSON_LIMIT): Promise<unknown> {
  const ct = request.headers.get('content-type') ?? ''
  if (ct && !/^application\/([a-z.+-]*\+)?json\b/i.test(ct)) throw badRequest('The body must be application/json')
  const declared = Number(request.headers.get('content-length') ?? NaN)
  if (Number.isFinite(declared) && declared > limit) throw tooLarge(`JSON bodies are limited to ${limit} bytes`)
  if (!request.body) throw badRequest('A JSON body is required')
  const chunks: Uint8Array[] = []
  let size = 0
  const reader = request.body.getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > limit) {
      await reader.cancel().catch(() => undefined)
      throw tooLarge(`JSON bodies are limited to ${limit} bytes`)
    }
    chunks.push(value)
  }
  const text = Buffer.concat(chunks).toString('utf8')
  try {
    return JSON.parse(text)
  } catch {
    throw badRequest('The body is not valid JSON')
  }
}
