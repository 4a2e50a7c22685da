import type { UserId } from '../model.js'

/** The authenticated caller of the JSON group. */
export interface AuthUser {
  /** The user id (a JWT's `sub`); becomes `createdBy`. */
  id: UserId
  /** Every claim of the token, or what a host's `authenticate` adds. */
  claims?: Record<string, unknown>
}

/**
 * Authenticates a request of the JSON group: resolves the user, or `null` for "not authenticated"
 * (answered 401). A thrown error is also answered 401.
 */
export type Authenticate = (request: Request) => AuthUser | null | Promise<AuthUser | null>

/**
 * What the secure-access function is shown. For saved files it is the attachment record; for temporary
 * and direct files (no record) only `refDomain`, `refCategory` and `savedName` are set, the rest `null`.
 */
export interface FileDescription {
  id: number | null
  refDomain: string
  refKey: string | null
  refCategory: string
  savedName: string
  savedDir: string | null
  displayName: string | null
  fileType: string | null
  fileSize: number | null
  ext: string | null
  createdBy: UserId | null
  createdDt: string | null
}

/** One file entry of an AttachBag, as a client sends it for a confirmed save. */
export interface AttachBagEntry {
  /** Existing attachment: only its position (sort) is applied. */
  id?: number
  /** The `name` a temporary upload answered (new files). */
  savedName?: string
  /** Present with `savedName`: reuse that stored file with a new record (no copy). */
  savedDir?: string
  displayName?: string
  /** Accepted and ignored: the server counts the stored bytes. */
  fileSize?: number
  /** Accepted and ignored: the server derives the type from the stored bytes. */
  fileType?: string
  ext?: string | null
  fmetaValue?: string | null
  [key: string]: unknown
}

/** `{refDomain, <category>: entries[], _deleted?: [{id}]}`. */
export interface AttachBag {
  refDomain?: string
  _deleted?: Array<{ id: number }>
  [category: string]: unknown
}

/** One entry of the `failures` list of a partial failure. */
export interface SaveFailure {
  refCategory: string
  index: number
  displayName: string
  reason: string
  /**
   * Why, as a stable word: `forbidden` (another user's temporary file), a filter's code (`type`,
   * `size`, ...), `not-found`, `saved-already`, `conflict`, `internal-error`, ...; the code of the error
   * that failed the entry.
   */
  code: string
}

/** Minimal logger; defaults to `console`. */
export interface Logger {
  info(message: string, ...args: unknown[]): void
  warn(message: string, ...args: unknown[]): void
  error(message: string, ...args: unknown[]): void
}
