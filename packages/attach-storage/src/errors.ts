declare const hostFilterCode: unique symbol

/**
 * The code of a refusal by a filter the host registered: the `code` of its verdict (`FilterVerdict`), or the
 * filter's name when its check threw. Any string the host chose, so it cannot be listed here; the brand
 * only keeps a misspelt literal from passing for one of the core's codes.
 *
 * Compare it with plain strings: `err.code === 'no-empty'`.
 */
export type HostFilterCode = string & { readonly [hostFilterCode]: true }

/**
 * Every `code` an {@link AttachStorageError} can carry: the stable kebab-case words attach-storage raises
 * (with the HTTP status each is answered with), the codes of the built-in filters, and
 * {@link HostFilterCode} for the filters a host registers.
 *
 * Requests:
 * - `bad-request` (400): a malformed body, query or path.
 * - `aborted` (400): the client went away, or the answer was sent before the request body was read.
 * - `no-file` (400): an upload without a file part.
 * - `unknown-domain`, `unknown-category` (400): a name that is not registered.
 * - `saved-already` (400): the temporary file of a confirmed-save entry was saved before.
 * - `presign-unsupported` (400): a presigned upload asked of a temporary store that cannot sign one.
 * - `size-not-allowed` (400): a resized view of a size the category's `sizes` does not list.
 * - `unknown-variant` (400): `?variant=` names no named variant of the category (or comes with `w`, `h` or `format`).
 * - `bad-key` (400): a storage key that the key normalizer refuses.
 * - `too-many-entries` (400): a confirmed save or `attachContainer` with more than `save.maxEntries` entries.
 * - `unauthorized` (401), `forbidden` (403), `not-found` (404), `conflict` (409), `too-large` (413),
 *   `range-not-satisfiable` (416).
 * - `quota-exceeded` (413): the user's pending uploads would pass `upload.userQuota`.
 * - `method-not-allowed` (405), `not-acceptable` (406), `request-timeout` (408), `length-required`
 *   (411), `unsupported-media-type` (415), `headers-too-large` (431): a web framework's or Node's own
 *   refusal, as `attach-storage/node` reports it.
 *
 * Filters (400): `size`, `dimension`, `type` (the built-in filters), or a {@link HostFilterCode}.
 * Scanning (a category's `scan`): `infected`, the item's error when clamd found a signature in the file;
 * `scan-unavailable` (503), clamd could not be reached or gave no verdict.
 *
 * Previews (docs/previews.md), asked with a box or `?preview=1` of a PDF or a video:
 * - `preview-pending` (503, with `Retry-After`): its background job has not made the preview yet.
 * - `preview-failed` (404): the file could not be previewed (corrupt, encrypted, beyond a bound).
 * - `previews-off` (404): this server lacks the tool for files of that kind.
 * - `no-preview` (404): `?preview=1` of a file that is neither a PDF nor a video.
 *
 * Server side:
 * - `busy` (503, with `Retry-After`): too many resizes or ZIP downloads at once.
 * - `not-ready` (503): the service is used before it has initialised.
 * - `attach-save-failure` (500): some entries of a confirmed save failed (`details.failures`).
 * - `store-failure` (502): a store's backend failed.
 * - `config-invalid` (500): the configuration, a store's settings or the database cannot be used.
 * - `migration-failed` (500): the attach-storage tables could not be migrated.
 * - `internal-error` (500): anything unexpected (logged; the client gets no detail).
 */
export type AttachErrorCode =
  | 'aborted'
  | 'attach-save-failure'
  | 'bad-key'
  | 'bad-request'
  | 'busy'
  | 'checksum-mismatch'
  | 'config-invalid'
  | 'conflict'
  | 'forbidden'
  | 'headers-too-large'
  | 'infected'
  | 'internal-error'
  | 'length-required'
  | 'method-not-allowed'
  | 'migration-failed'
  | 'no-file'
  | 'not-acceptable'
  | 'not-found'
  | 'not-ready'
  | 'no-preview'
  | 'presign-unsupported'
  | 'preview-failed'
  | 'preview-pending'
  | 'previews-off'
  | 'quota-exceeded'
  | 'range-not-satisfiable'
  | 'request-timeout'
  | 'saved-already'
  | 'scan-unavailable'
  | 'size-not-allowed'
  | 'store-failure'
  | 'too-large'
  | 'too-many-entries'
  | 'unauthorized'
  | 'unknown-category'
  | 'unknown-domain'
  | 'unknown-variant'
  | 'unsupported-media-type'
  | BuiltInFilterCode
  | HostFilterCode

/** The codes of the built-in filters: `size` (`sizeFilter`), `dimension` (`dimensionFilter`), `type` (`imageFilter`, `typeFilter`). */
export type BuiltInFilterCode = 'size' | 'dimension' | 'type'

/** Options of an {@link AttachStorageError}. */
export interface AttachStorageErrorOptions {
  /**
   * HTTP status answered when the error reaches a handler.
   * @default 500
   */
  status?: number
  /** The underlying error (`error.cause`); logged, never sent to a client. */
  cause?: unknown
  /** Extra JSON members of the error body, e.g. `failures` of `attach-save-failure`. */
  details?: Record<string, unknown>
  /** HTTP headers answered with the error, e.g. `Retry-After` of `busy`. */
  headers?: Record<string, string>
}

/**
 * The one error class of attach-storage. Every failure that can reach a caller (a host's code or an
 * HTTP client) is an `AttachStorageError` with a stable kebab-case `code` and an HTTP `status`.
 *
 * @example
 * throw new AttachStorageError('not-found', 'No attachment 42', { status: 404 })
 */
export class AttachStorageError extends Error {
  /** Stable kebab-case word, e.g. `not-found`, `unknown-domain`, `attach-save-failure` (see {@link AttachErrorCode}). */
  readonly code: AttachErrorCode
  /** HTTP status answered when this error reaches a handler. */
  readonly status: number
  /** Extra JSON members of the error body (for example `failures`). */
  readonly details: Record<string, unknown> | undefined
  /** HTTP headers answered with this error (for example `Retry-After` on a 503). */
  readonly headers: Record<string, string> | undefined

  /**
   * @param code one of {@link AttachErrorCode}; a misspelt code fails the type check.
   * @param message a sentence for the client (a 5xx's message is replaced by a generic one before it is answered).
   */
  constructor(code: AttachErrorCode, message: string, options: AttachStorageErrorOptions = {}) {
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
    new Headers(headers).forEach((value, name) => {
      h.set(name, value)
    })
    h.set('content-type', 'application/json; charset=utf-8')
    h.set('x-content-type-options', 'nosniff')
    h.set('cache-control', 'no-store')
    return new Response(JSON.stringify(this.toJSON()), { status: this.status, headers: h })
  }
}

/**
 * A 400. `code` is one of the core's codes, or the code a filter's verdict gave (a host's filter may
 * use any string), which is why it is open here and nowhere else.
 * @internal
 */
export const badRequest = (message: string, code: AttachErrorCode | (string & {}) = 'bad-request'): AttachStorageError =>
  new AttachStorageError(code as AttachErrorCode, message, { status: 400 })

/** A 404 `not-found`. @internal */
export const notFound = (message: string): AttachStorageError => new AttachStorageError('not-found', message, { status: 404 })

/** A 403 `forbidden`. @internal */
export const forbidden = (message = 'Access to this file is not permitted'): AttachStorageError =>
  new AttachStorageError('forbidden', message, { status: 403 })

/** A 401 `unauthorized`. @internal */
export const unauthorized = (message = 'Authentication is required'): AttachStorageError =>
  new AttachStorageError('unauthorized', message, { status: 401 })

/** A 413 `too-large`. @internal */
export const tooLarge = (message: string): AttachStorageError => new AttachStorageError('too-large', message, { status: 413 })

/** A 500 `config-invalid`: the configuration cannot be used. @internal */
export const configError = (message: string, cause?: unknown): AttachStorageError =>
  new AttachStorageError('config-invalid', message, { status: 500, cause })

/**
 * True when `err` is an {@link AttachStorageError}, and, when `code` is given, one with that code.
 * `code` is open to the codes of a host's own filters.
 *
 * @example
 * try {
 *   await storage.commitAttachContainer({ refDomain: 'post', refKey, attachContainer, user })
 * } catch (err) {
 *   if (isAttachError(err, 'attach-save-failure')) return Response.json(err.toJSON(), { status: 500 })
 *   throw err
 * }
 */
export function isAttachError(err: unknown, code?: AttachErrorCode | (string & {})): err is AttachStorageError {
  return err instanceof AttachStorageError && (code === undefined || err.code === code)
}
