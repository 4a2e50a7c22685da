import type { Readable, Writable } from 'node:stream'

/** What a store knows about one stored object. */
export interface StoreStat {
  /** Size in bytes. */
  size: number
  /** Last modification time. */
  lastModified: Date
}

/** One entry of {@link Store.list}. */
export interface StoreListEntry extends StoreStat {
  /** The object's key, relative to the store's root, without a leading slash. */
  key: string
}

/** An inclusive byte range, as in HTTP: `end` defaults to the last byte. */
export interface ByteRange {
  /** The first byte, from 0. */
  start: number
  /** The last byte (inclusive); default: the object's last byte. */
  end?: number
}

/** Options of {@link Store.put}. */
export interface PutOptions {
  /** Media type recorded with the object where the store keeps one (object stores). */
  contentType?: string
  /** Size in bytes when known in advance; lets object stores choose single or multipart upload. */
  size?: number
  /** Aborts the write; nothing is left at the key. */
  signal?: AbortSignal
}

/**
 * Where the files live. Every method is required and async. Keys are relative paths
 * (`demo/2026/11/42/5b9c….png`), normalized by {@link normalizeKey} before any use: a key never
 * starts with `/`, never holds `..`, `.`, empty segments, backslashes or NUL bytes.
 *
 * Guarantees every implementation gives (checked by the conformance suite in `attach-storage/testing`):
 * - `put` is atomic: readers see the old object, no object, or the whole new one; a failed or aborted
 *   `put` leaves nothing at the key.
 * - `get` of a missing key, and `stat`, `move`, `copy` from a missing key, throw an
 *   `AttachStorageError` with code `not-found` (status 404).
 * - `delete` of a missing key succeeds.
 */
export interface Store {
  /** The name this store is declared under (`attach.stores.<name>`). */
  readonly name: string
  /** The store type (`local`, `s3`, `azure`, `sftp`, `ftp`, or a host's own). */
  readonly type: string
  /** Writes a whole object from a stream or bytes. Resolves with the stored size. */
  put(key: string, body: Readable | Uint8Array, options?: PutOptions): Promise<{ size: number }>
  /**
   * Streams an object, or the inclusive byte range of it. The stream may also have a
   * {@link writeInto} method, which the Node fast path of views and the Node bridge use instead of a pipe.
   */
  get(key: string, range?: ByteRange): Promise<Readable>
  /** Size and modification time; throws `not-found` when missing. */
  stat(key: string): Promise<StoreStat>
  /** True when an object exists at the key. */
  exists(key: string): Promise<boolean>
  /** Renames an object; an existing object at `to` is replaced. */
  move(from: string, to: string): Promise<void>
  /** Copies an object; an existing object at `to` is replaced. */
  copy(from: string, to: string): Promise<void>
  /** Removes an object; a missing one is not an error. */
  delete(key: string): Promise<void>
  /** Every object whose key starts with `prefix` (a folder prefix ending in `/`, or `''`), any depth. */
  list(prefix: string): AsyncIterable<StoreListEntry>
  /** Releases connections and handles. */
  close(): Promise<void>
  /**
   * Local stores only: the absolute file path of a key, so that a move between two local stores on one
   * file system is a rename. Absent on remote stores.
   */
  localPath?(key: string): string
  /**
   * Optional: removes what interrupted writes left behind (a local store's `.partial` files of a crash
   * in the middle of a `put`) last modified before `olderThan`; answers how many went. Stores whose
   * writes leave nothing behind (object stores) do not have it. The sweep calls it with `tmp-ttl`.
   */
  sweepPartials?(olderThan: Date): Promise<number>
  /**
   * Optional (object stores with signed URLs): a short-lived address from which a client reads the
   * object directly, answered with the given `Content-Type` and `Content-Disposition` (S3's
   * `response-content-*` overrides, Azure's `rsct`/`rscd`). A store that has it may be declared with
   * `serve: redirect`: views and downloads then answer 302 to this address.
   */
  presignGet?(key: string, options: PresignGetOptions): Promise<string>
  /**
   * Optional (object stores with signed URLs): a short-lived address to which a client writes the object
   * at `key` directly, with no other right (S3: a presigned PutObject whose `Content-Length` is signed;
   * Azure: a blob SAS with create and write permissions only). The client sends the bytes with the
   * answered method and headers. Nothing is checked of what arrives: the caller verifies the object
   * before trusting it. Direct-to-cloud uploads (`POST attach/presign`) need it on the temporary store.
   */
  presignPut?(key: string, options: PresignPutOptions): Promise<PresignedPut>
  /**
   * Optional: reads `length` bytes from `start` in one call, for a small answer whose length the record
   * already knows (no stream, no stat). Fewer bytes only when the object is shorter than that; a missing
   * object throws `not-found`. Callers keep `length` small (the handlers: at most 256 KiB). With `into`
   * (at least `length` bytes), a store may read into it and answer a view of it (the local store does);
   * one that ignores it answers a buffer of its own.
   */
  readBytes?(key: string, start: number, length: number, into?: Uint8Array): Promise<Uint8Array>
}

/**
 * The key of an optional method of a stream that {@link Store.get} answers:
 * `stream[writeInto](dest)` writes the rest of the stream's bytes into `dest`, ends it, and resolves once
 * `dest` finished; it rejects when either side fails, and then leaves `dest` to the caller, who destroys
 * it. Unlike a pipe, it may hand `dest` views of its own read buffers, and fills a buffer again only once
 * the callback of every write of it ran, so it fits a `dest` that keeps no chunk past that callback:
 * Node's sockets and HTTP responses. A stream that has it can still be read as any other. The S3 store's
 * large GetObject bodies have it (docs/stores/s3.md).
 */
export const writeInto: unique symbol = Symbol.for('attach-storage.writeInto')

/** A stream with the {@link writeInto} method. */
export interface WritesInto {
  [writeInto](dest: Writable): Promise<void>
}

/** What {@link Store.presignGet} signs. */
export interface PresignGetOptions {
  /** Seconds the address stays valid. */
  expiresIn: number
  /** The `Content-Type` the store answers with. */
  contentType: string
  /** The `Content-Disposition` the store answers with (the download name). */
  contentDisposition: string
}

/** What {@link Store.presignPut} signs. */
export interface PresignPutOptions {
  /** Seconds the address stays valid. */
  expiresIn: number
  /** The exact number of bytes the client declares; stores that can sign it (S3) refuse any other length. */
  contentLength: number
  /** The `Content-Type` the client must send, where the store can sign it. */
  contentType?: string
}

/** A write address of {@link Store.presignPut}: the client sends the bytes to `url` with `method` and `headers`. */
export interface PresignedPut {
  url: string
  /** Always `PUT` for the built-in stores. */
  method: 'PUT' | 'POST'
  /** Headers the client must send with the bytes (for example `x-ms-blob-type` on Azure). */
  headers: Record<string, string>
}

/** Creates a store from its declared settings; what a store package exports as `createStore`. */
export type StoreFactory = (name: string, settings: Record<string, unknown>) => Store | Promise<Store>
