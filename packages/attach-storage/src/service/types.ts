import type { AttachmentRecord, AttachmentView, UserId } from '../model.js'
import type { Store } from '../stores/store.js'

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
 * Who is asking, as every use case sees it: the authenticated user, the caller's HTTP request (handed
 * unread to the host's secure-access and `mayChange` functions, which the spec says receive it) and the
 * signature of a signed view URL. Routes build it at the edge; in-process callers use {@link accessOf}.
 */
export interface AccessContext {
  /** The authenticated user of the JSON group; `null` on the binary group and for in-process calls without one. */
  readonly user: AuthUser | null
  /**
   * The caller's request, only ever passed to host functions. `null` for in-process calls: categories
   * with a secure-access function then refuse.
   */
  readonly request: Request | null
  /** The `exp` and `sig` query parameters of a signed view URL, checked against the record served. */
  readonly signature?: ViewSignature
}

/** The query parameters of a signed view URL (`exp`, `sig`), unchecked. */
export interface ViewSignature {
  readonly expires: string
  readonly signature: string
}

/** An access context for an in-process call: the user (default none) and the host's request (default none). */
export function accessOf(user: AuthUser | null = null, request: Request | null = null): AccessContext {
  return { user, request }
}

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

/**
 * What `storage.lookup()` answers (and `GET attach/{refDomain}/{refKey}`): `refDomain` and each
 * category's records in `sort` order. Name the categories for exact keys: `AttachBag<'images' | 'files'>`
 * (a lookup of one `category` is typed so); with the default `string`, `bag.images` is
 * `AttachmentView[] | undefined` under `noUncheckedIndexedAccess`.
 *
 * For what a client sends to a confirmed save or `commitAttachContainer()`, see {@link AttachContainer}
 * (an `AttachBag` is one: sending back what a lookup answered keeps the records, re-sorted).
 */
export type AttachBag<C extends string = string> = { refDomain: string } & { [K in C]: AttachmentView[] }

/**
 * The `attachContainer` a client sends for a confirmed save or a host's `commitAttachContainer()`:
 * `{refDomain?, <category>: entries[], _deleted?: [{id}]}`. Entries are new files
 * ({@link AttachBagEntry} with `savedName`), reuses (`savedName` + `savedDir`) or existing records (their
 * `id`, as a lookup answered them: only their position applies). The server checks its shape again.
 */
export interface AttachContainer {
  refDomain?: string
  /** Records to delete permanently. */
  _deleted?: Array<{ id: number }>
  [category: string]: ReadonlyArray<AttachBagEntry | AttachmentView> | string | undefined
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

/** The events a host can listen to; each fires once the fact is durable. */
export interface AttachEvents {
  /** A file passed its filters and is stored (temporary or direct upload). */
  uploaded: {
    kind: 'temporary' | 'direct' | 'editor'
    refDomain: string
    refCategory: string
    name: string
    savedDir: string | null
    displayName: string
    size: number
    type: string
    sha256: string
    user: AuthUser | null
  }
  /** Records were created by a confirmed save or a host's commit (the successes of a partial failure too). */
  saved: { refDomain: string; refKey: string; records: AttachmentRecord[]; user: AuthUser | null }
  /** Records were deleted (their files go with their last record). */
  deleted: { records: AttachmentRecord[] }
}

/** A hook; a throw (or rejection) is reported to the logger and never undoes what happened. */
export type AttachEventHook<E extends keyof AttachEvents> = (event: AttachEvents[E]) => void | Promise<void>

/** A file received from a request into the temporary area, not yet checked by any filter. */
export interface ReceivedFile {
  /** The generated stored name (`{uuid}.{ext}`). */
  name: string
  displayName: string
  extension: string
  size: number
  sha256: string
  head: Uint8Array
}

/** Temporary-upload result item (or its `error` form). */
export type TemporaryItem =
  | {
      name: string
      displayName: string
      size: number
      type: string
      url: null
      thumbnailUrl: null
      deleteUrl: null
      deleteType: 'DELETE'
    }
  | { displayName: string; size: number; error: { code: string; message: string } }

/** Direct-upload result item (or its `error` form). */
export type DirectItem =
  | { name: string; savedDir: string; url: string; displayName: string; size: number; type: string }
  | { displayName: string; size: number; error: { code: string; message: string } }

/** Lookup filters of GET `/attach/...` and of views by reference. */
export interface LookupFilters {
  ext?: string
  extAlt?: string
  fmetaValue?: string
}

/**
 * The options of `storage.lookup()`.
 *
 * **Pass `request`**: without it the lookup runs as an anonymous in-process caller, and every record of a
 * category with a secure-access function is left out of the answer, without an error.
 */
export interface LookupOptions<C extends string = string> {
  /** Only this category (default: every registered category of the domain). */
  category?: C
  /** `ext`, `extAlt` and `fmetaValue`, as on `GET attach/...`. */
  filters?: LookupFilters
  /**
   * The caller's request (shown to secure-access functions) or an access context
   * ({@link accessOf}). Without it, guarded records are left out.
   */
  request?: Request | AccessContext | null
}

/** What the binary group streams. */
export interface ServeTarget {
  store: Store
  key: string
  displayName: string
  fileType: string
  fileSize: number
  /** Strong validator (the sha256), when known. */
  etag?: string
  lastModified?: Date
  /** `immutable`: the address always names these bytes; `revalidate`: it may name other bytes later. */
  cache: 'immutable' | 'revalidate'
  /** A secure-access function guards the file: caches must keep it private. */
  private: boolean
  /** Request headers the answer depends on (`Accept` for negotiated formats). */
  vary?: string
  /** The bytes themselves, when they are in memory already (a variant just made); else read from the store. */
  bytes?: Buffer
  /** Who sends the bytes when not this process (the store's `serve` mode); absent: streamed from the store. */
  delivery?: Delivery
}

/**
 * How the bytes of an answer leave when the store's `serve` setting hands them to someone else, after
 * every access check has passed here:
 * - `x-accel-redirect`: nginx, from an internal location (`uri`), with its own Range and conditional handling;
 * - `x-sendfile`: Apache (mod_xsendfile) or lighttpd, from the file's absolute `path`;
 * - `redirect`: the store itself, through a presigned address valid for `ttlSeconds`.
 */
export type Delivery =
  | { mode: 'x-accel-redirect'; uri: string }
  | { mode: 'x-sendfile'; path: string }
  | { mode: 'redirect'; ttlSeconds: number }
