/**
 * The one error class of attach-storage. Every failure that can reach a caller (a host's code or an
 * HTTP client) is an `AttachStorageError` with a stable kebab-case `code` and an HTTP `status`.
 *
 * @example
 * throw new AttachStorageError('not-found', 'No attachment 42', { status: 404 })
 */
export class AttachStorageError extends Error {
  /** Stable kebab-case word, e.g. `not-found`, `unknown-domain`, `attach-save-failure`. */
  readonly code: string
  /** HTTP status answered when this error reaches a handler. */
  readonly status: number
  /** Extra JSON members of the error body (for example `failures`). */
  readonly details: Record<string, unknown> | undefined
  /** HTTP headers answered with this error (for example `Retry-After` on a 503). */
  readonly headers: Record<string, string> | undefined

  constructor(
    code: string,
    message: string,
    options: {
      status?: number
      cause?: unknown
      details?: Record<string, unknown>
      headers?: Record<string, string>
    } = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause })
    this.name = 'AttachStorageError'
    this.code = code
    this.status = options.status ?? 500
    this.details = options.details
    this.headers = options.headers
  }

  /** The JSON body `{code, message, ...details}` answered for this error. */
  toJSON(): Record<string, unknown> {
    return { ...this.details, code: this.code, message: this.message }
  }

  /** A Web Response carrying this error as JSON, with its own `headers` and then `headers`. */
  toResponse(headers?: HeadersInit): Response {
    const h = new Headers(this.headers)
    new Headers(headers).forEach((value, name) => h.set(name, value))
    h.set('content-type', 'application/json; charset=utf-8')
    h.set('x-content-type-options', 'nosniff')
    h.set('cache-control', 'no-store')
    return new Response(JSON.stringify(this.toJSON()), { status: this.status, headers: h })
  }
}

export const badRequest = (message: string, code = 'bad-request'): AttachStorageError =>
  new AttachStorageError(code, message, { status: 400 })

export const notFound = (message: string): AttachStorageError =>
  new AttachStorageError('not-found', message, { status: 404 })

export const forbidden = (message = 'Access to this file is not permitted'): AttachStorageError =>
  new AttachStorageError('forbidden', message, { status: 403 })

export const unauthorized = (message = 'Authentication is required'): AttachStorageError =>
  new AttachStorageError('unauthorized', message, { status: 401 })

export const tooLarge = (message: string): AttachStorageError =>
  new AttachStorageError('too-large', message, { status: 413 })

export const configError = (message: string, cause?: unknown): AttachStorageError =>
  new AttachStorageError('config-invalid', message, { status: 500, cause })

/** True when `err` is an AttachStorageError with the given code. */
export function isAttachError(err: unknown, code?: string): err is AttachStorageError {
  return err instanceof AttachStorageError && (code === undefined || err.code === code)
}
