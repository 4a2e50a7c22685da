import { Readable } from 'node:stream'
import {
  CopyObjectCommand,
  DeleteObjectCommand,
  GetObjectCommand,
  HeadBucketCommand,
  HeadObjectCommand,
  ListObjectsV2Command,
  PutObjectCommand,
  S3Client,
  type GetObjectCommandOutput,
  type HeadObjectCommandOutput,
  type S3ClientConfig,
} from '@aws-sdk/client-s3'
import { getSignedUrl } from '@aws-sdk/s3-request-presigner'
import {
  AttachStorageError,
  badKeyError,
  isActiveContent,
  isNormalKey,
  normalizePrefix,
  notFoundError,
  prefixedKey,
  quoteKey,
  rangeNotSatisfiable,
  settingsError,
  storeFailure,
  type ByteRange,
  type PresignGetOptions,
  type PresignedPut,
  type PresignPutOptions,
  type PutOptions,
  type Store,
  type StoreFactory,
  type StoreListEntry,
  type StoreStat,
} from 'attach-storage/store-kit'
import { isInvalidRange, isMissingObject, reasonOf, sanitizeCause, sizeFromRangeError } from './errors.js'
import { multipartCopy } from './multipart-copy.js'
import { bodyOf, parseContentRange, sliceOf } from './object-bodies.js'
import { lendingBody } from './lent-bodies.js'
import { ReadBufferHttpAgent, ReadBufferHttpsAgent } from './read-buffer-agents.js'
import { SAFE_TYPE } from './object-headers.js'
import { MiB, putObject, putStream, SINGLE_PUT_MAX, slices } from './object-uploads.js'
import { resolveS3Settings, type ResolvedS3Settings, type S3StoreSettings } from './settings.js'
import type { S3Calls } from './store-calls.js'

export { SINGLE_PUT_MAX } from './object-uploads.js'

/** The longest validity of a signature version 4 presigned address (7 days). */
const MAX_PRESIGN_SECONDS = 7 * 24 * 3600
/** S3's (and the core's) longest key, in bytes. */
const MAX_S3_KEY_BYTES = 1024

/**
 * Options of the {@link S3Store} constructor: the {@link S3StoreSettings} of a configuration file, plus
 * what only code can give, in the manner of flydrive's S3 driver: a ready SDK client, or extra SDK client
 * configuration.
 */
export interface S3StoreOptions extends S3StoreSettings {
  /**
   * A ready client. The store uses it as is (its region, credentials, endpoint, checksum, retry and
   * timeout configuration; the corresponding settings are then ignored, `region` is optional) and does
   * not destroy it on `close()`: its owner does.
   */
  client?: S3Client
  /**
   * Extra `S3ClientConfig`, merged over what the settings produce when the store creates its own client
   * (e.g. a custom `requestHandler`, `logger` or `credentials` provider).
   */
  clientConfig?: S3ClientConfig
}

/**
 * A {@link Store} on one S3 bucket (optionally under a key prefix).
 *
 * - Keys go through `normalizeKey` before the prefix is added, so no key the SDK sees starts with `/` or
 *   holds `..` (S3-compatible servers resolve those, real S3 keeps them literal).
 * - `put` is atomic by S3 semantics: a body of at most 5 MiB is one PutObject; a longer one (or a stream
 *   of unknown length that turns out longer) is a multipart upload (`multipart-put.ts`), completed
 *   only after the last byte was read. A failed or aborted put aborts the multipart upload, so no parts
 *   are left behind (unless S3 is unreachable at that moment: keep an `AbortIncompleteMultipartUpload`
 *   lifecycle rule on the bucket).
 * - `get` streams the GetObject body (a ranged GetObject for a range); nothing is buffered or written to
 *   a temporary file.
 * - `move` is CopyObject + DeleteObject (UploadPartCopy for objects above `multipartCopyThreshold`,
 *   5 GiB by default); it is not atomic: a crash between both leaves the object at both keys.
 * - Errors: a missing object is `not-found` (404); a range past the end is `range-not-satisfiable`
 *   (416, `details.size`); every other SDK or network failure is wrapped once as `store-failure` (502),
 *   whose message names the operation and key, and which never carries a credential.
 *
 * @example
 * const store = new S3Store('files', { bucket: 'my-bucket', region: 'eu-central-1', prefix: 'attach/' })
 * await store.put('demo/2026/11/42/abc.png', bytes, { contentType: 'image/png' })
 *
 * @example
 * // A ready client (its own configuration applies):
 * const store = new S3Store('files', { bucket: 'my-bucket', client: new S3Client({ region: 'eu-central-1' }) })
 */
export class S3Store implements Store {
  readonly type = 's3'
  readonly name: string
  /** The bucket. */
  readonly bucket: string
  /** The key prefix inside the bucket (`''` or a folder ending in `/`). */
  readonly prefix: string
  readonly #settings: ResolvedS3Settings
  readonly #clientConfig: S3ClientConfig | undefined
  readonly #ownsClient: boolean
  /** Values that must never appear in a message. */
  readonly #secrets: string[]
  /** What the upload and copy modules use of the store. */
  readonly #calls: S3Calls
  #client: S3Client | undefined

  constructor(name: string, options: S3StoreOptions) {
    const { client, clientConfig, ...settings } = options ?? ({} as S3StoreOptions)
    if (client !== undefined && !(client instanceof S3Client)) {
      throw settingsError(name, 'client', 'must be an S3Client of @aws-sdk/client-s3')
    }
    this.#settings = resolveS3Settings(name, settings as Record<string, unknown>, {
      regionOptional: client !== undefined || clientConfig?.region !== undefined,
    })
    this.name = name
    this.bucket = this.#settings.bucket
    this.prefix = this.#settings.prefix
    this.#clientConfig = clientConfig
    this.#client = client
    this.#ownsClient = client === undefined
    const c = this.#settings.credentials
    this.#secrets = [c?.secretAccessKey, c?.sessionToken, c?.accessKeyId].filter((s): s is string => !!s)
    this.#calls = {
      client: () => this.client,
      bucket: this.bucket,
      settings: this.#settings,
      call: (operation, key, run) => this.#call(operation, key, run),
      failure: (message, cause) => this.#failure(message, cause),
      wrap: (operation, key, err) => this.#wrap(operation, key, err),
    }
  }

  /** The SDK client, created on first use from the settings (or the ready one given). */
  get client(): S3Client {
    if (this.#client === undefined) {
      const s = this.#settings
      this.#client = new S3Client({
        region: s.region,
        ...(s.endpoint !== undefined ? { endpoint: s.endpoint } : {}),
        forcePathStyle: s.forcePathStyle,
        ...(s.credentials !== undefined ? { credentials: { ...s.credentials } } : {}),
        ...(s.requestChecksumCalculation !== undefined ? { requestChecksumCalculation: s.requestChecksumCalculation } : {}),
        ...(s.responseChecksumValidation !== undefined ? { responseChecksumValidation: s.responseChecksumValidation } : {}),
        maxAttempts: s.maxAttempts,
        requestHandler: {
          connectionTimeout: s.connectTimeout,
          socketTimeout: s.socketTimeout,
          httpAgent: new ReadBufferHttpAgent(),
          httpsAgent: new ReadBufferHttpsAgent(),
        },
        ...this.#clientConfig,
      })
    }
    return this.#client
  }

  /**
   * Checks the bucket and the credentials with one HeadBucket request. Resolves when both are fine;
   * otherwise throws `store-failure` saying what is wrong (missing bucket, refused credentials, no
   * permission, unreachable endpoint). `createStore()` calls it when `verify-on-start` is set.
   */
  async verify(): Promise<void> {
    try {
      await this.client.send(new HeadBucketCommand({ Bucket: this.bucket }))
    } catch (err) {
      if (isMissingObject(err) || (err as { name?: string })?.name === 'NoSuchBucket') {
        throw this.#failure(`HeadBucket of bucket "${this.bucket}" failed: the bucket "${this.bucket}" does not exist`, err)
      }
      throw this.#wrap('HeadBucket', undefined, err)
    }
  }

  async put(key: string, body: Readable | Uint8Array, options: PutOptions = {}): Promise<{ size: number }> {
    const objectKey = this.#objectKey(key)
    const { signal, contentType } = options
    signal?.throwIfAborted()
    const sizeHint = typeof options.size === 'number' && Number.isSafeInteger(options.size) && options.size >= 0 ? options.size : undefined
    if (body instanceof Uint8Array) {
      const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength)
      if (bytes.byteLength <= SINGLE_PUT_MAX) {
        await putObject(this.#calls, key, objectKey, bytes, contentType, signal)
        return { size: bytes.byteLength }
      }
      const stream = Readable.from(slices(bytes, MiB), { objectMode: false })
      return putStream(this.#calls, key, objectKey, stream, bytes.byteLength, contentType, signal)
    }
    if (!(body instanceof Readable) && typeof (body as { pipe?: unknown })?.pipe !== 'function') {
      throw new TypeError(`S3 store "${this.name}": put() takes a Readable or a Uint8Array`)
    }
    return putStream(this.#calls, key, objectKey, body, sizeHint, contentType, signal)
  }

  async get(key: string, range?: ByteRange): Promise<Readable> {
    const objectKey = this.#objectKey(key)
    if (range === undefined) {
      const out = await this.#call('GetObject', key, () => this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: objectKey })))
      return lendingBody(bodyOf(out.Body), out.ContentLength)
    }
    const { start, end } = range
    const valid = Number.isSafeInteger(start) && start >= 0 && (end === undefined || (Number.isSafeInteger(end) && end >= start))
    if (!valid) throw rangeNotSatisfiable(key, range, (await this.#head('GetObject', key, objectKey)).size)

    let out: GetObjectCommandOutput
    try {
      out = await this.client.send(new GetObjectCommand({ Bucket: this.bucket, Key: objectKey, Range: `bytes=${start}-${end ?? ''}` }))
    } catch (err) {
      if (isInvalidRange(err)) {
        const size = sizeFromRangeError(err) ?? (await this.#head('GetObject', key, objectKey)).size
        throw rangeNotSatisfiable(key, range, size)
      }
      if (isMissingObject(err)) throw notFoundError(this.name, key)
      throw this.#wrap('GetObject', key, err)
    }
    const body = bodyOf(out.Body)
    // What the server sent: a 206 names it in Content-Range; a 200 (Range ignored) is the whole object.
    const sent = parseContentRange(out.ContentRange) ?? {
      start: 0,
      end: (out.ContentLength ?? 0) - 1,
      size: out.ContentLength ?? 0,
    }
    if (start >= sent.size) {
      body.destroy()
      throw rangeNotSatisfiable(key, range, sent.size)
    }
    const last = Math.min(end ?? sent.size - 1, sent.size - 1)
    if (sent.start === start && sent.end === last) return lendingBody(body, out.ContentLength)
    if (sent.start > start || sent.end < last) {
      body.destroy()
      throw this.#failure(
        `GetObject of ${quoteKey(key)} failed: asked for bytes ${start}-${last}, the server sent bytes ${sent.start}-${sent.end}`,
      )
    }
    // Some S3-compatible servers send more than asked (s3rver answers "bytes=0-0" with the whole object).
    return Readable.from(sliceOf(body, start - sent.start, last - start + 1), { objectMode: false })
  }

  /**
   * A presigned GetObject address (signature version 4, query-string authentication) of `key`, valid
   * for `expiresIn` seconds, whose answer carries the given `Content-Type` and `Content-Disposition`
   * (`response-content-type`, `response-content-disposition`, both signed). The key goes through the
   * same normalization and prefix as `get` (a bad key is refused with `bad-key` before anything is
   * signed). Signing is local: no request is made, so a missing object is only seen by the client (404
   * from S3). The address is always the bucket's S3 endpoint, never `cdn-url` (a CDN in front would not
   * pass the signature on). The credentials must outlive the address: temporary ones (a session token,
   * an instance role) cut it short when they expire.
   *
   * @example
   * const url = await store.presignGet('demo/2026/11/42/abc.pdf', {
   *   expiresIn: 300,
   *   contentType: 'application/pdf',
   *   contentDisposition: `attachment; filename="a.pdf"; filename*=UTF-8''a.pdf`,
   * })
   */
  async presignGet(key: string, options: PresignGetOptions): Promise<string> {
    const objectKey = this.#objectKey(key)
    const expiresIn = Math.floor(options.expiresIn)
    if (!(expiresIn >= 1 && expiresIn <= MAX_PRESIGN_SECONDS)) {
      throw new RangeError(
        `S3 store "${this.name}": presignGet() expiresIn must be 1 to ${MAX_PRESIGN_SECONDS} seconds, not ${options.expiresIn}`,
      )
    }
    const command = new GetObjectCommand({
      Bucket: this.bucket,
      Key: objectKey,
      ResponseContentType: options.contentType,
      ResponseContentDisposition: options.contentDisposition,
    })
    try {
      return await getSignedUrl(this.client, command, { expiresIn })
    } catch (err) {
      throw this.#wrap('presignGet', key, err)
    }
  }

  /**
   * A presigned PutObject address (signature version 4) of `key`, valid for `expiresIn` seconds, whose
   * headers are all signed: `Content-Length` (S3 refuses a body of any other length, 403
   * SignatureDoesNotMatch, so a client cannot send more than it declared), `Content-Type` (the given
   * one, or `application/octet-stream` when none is given or it is active content),
   * `Content-Disposition: attachment`, and `If-None-Match: *`: S3 writes only when no object is at the
   * key (412 PreconditionFailed otherwise), so once the upload was committed and a tombstone left at the
   * key, the address writes nothing more. The key goes through the same normalization and prefix as
   * `put`. Signing is local: no request is made. The bucket needs a CORS rule allowing `PUT` and these
   * headers from the page's origin (docs/direct-uploads.md).
   *
   * @example
   * const { url, method, headers } = await store.presignPut('_tmp/_up/abc.png', { expiresIn: 900, contentLength: 1234 })
   * await fetch(url, { method, headers, body: file })
   */
  async presignPut(key: string, options: PresignPutOptions): Promise<PresignedPut> {
    const objectKey = this.#objectKey(key)
    const expiresIn = Math.floor(options.expiresIn)
    if (!(expiresIn >= 1 && expiresIn <= MAX_PRESIGN_SECONDS)) {
      throw new RangeError(
        `S3 store "${this.name}": presignPut() expiresIn must be 1 to ${MAX_PRESIGN_SECONDS} seconds, not ${options.expiresIn}`,
      )
    }
    const length = options.contentLength
    if (!(Number.isSafeInteger(length) && length >= 0)) {
      throw new RangeError(`S3 store "${this.name}": presignPut() contentLength must be a non-negative integer, not ${length}`)
    }
    // Signed, so the client must send exactly these: a type no browser runs for active content (and
    // `application/octet-stream` when none is given), a download disposition, and create-only.
    const type = options.contentType && !isActiveContent(options.contentType) ? options.contentType : SAFE_TYPE
    const command = new PutObjectCommand({
      Bucket: this.bucket,
      Key: objectKey,
      ContentLength: length,
      ContentType: type,
      ContentDisposition: 'attachment',
      IfNoneMatch: '*',
    })
    const signed = new Set(['content-length', 'content-type', 'content-disposition', 'if-none-match'])
    try {
      const url = await getSignedUrl(this.client, command, { expiresIn, signableHeaders: signed })
      return { url, method: 'PUT', headers: { 'content-type': type, 'content-disposition': 'attachment', 'if-none-match': '*' } }
    } catch (err) {
      throw this.#wrap('presignPut', key, err)
    }
  }

  async stat(key: string): Promise<StoreStat> {
    const head = await this.#head('HeadObject', key, this.#objectKey(key))
    return { size: head.size, lastModified: head.lastModified }
  }

  async exists(key: string): Promise<boolean> {
    const objectKey = this.#objectKey(key)
    try {
      await this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: objectKey }))
      return true
    } catch (err) {
      if (isMissingObject(err)) return false
      throw this.#wrap('HeadObject', key, err)
    }
  }

  async move(from: string, to: string): Promise<void> {
    const source = this.#objectKey(from)
    const target = this.#objectKey(to)
    const moved = await this.#copyObject(from, source, to, target)
    if (!moved) return
    await this.#call('DeleteObject', from, () => this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: source })))
  }

  async copy(from: string, to: string): Promise<void> {
    await this.#copyObject(from, this.#objectKey(from), to, this.#objectKey(to))
  }

  async delete(key: string): Promise<void> {
    const objectKey = this.#objectKey(key)
    try {
      await this.client.send(new DeleteObjectCommand({ Bucket: this.bucket, Key: objectKey }))
    } catch (err) {
      if (isMissingObject(err)) return
      throw this.#wrap('DeleteObject', key, err)
    }
  }

  async *list(prefix: string): AsyncGenerator<StoreListEntry> {
    const normalized = normalizePrefix(prefix)
    const full = this.prefix + normalized
    let token: string | undefined
    do {
      const page = await this.#call('ListObjectsV2', normalized === '' ? '(all)' : normalized, () =>
        this.client.send(
          new ListObjectsV2Command({
            Bucket: this.bucket,
            ...(full !== '' ? { Prefix: full } : {}),
            ...(token !== undefined ? { ContinuationToken: token } : {}),
          }),
        ),
      )
      for (const object of page.Contents ?? []) {
        const key = object.Key
        if (key === undefined || !key.startsWith(full)) continue
        const relative = key.slice(this.prefix.length)
        // Objects no key can name (folder markers "x/", "..", names outside the key alphabet) are skipped.
        if (!isNormalKey(relative)) continue
        yield { key: relative, size: object.Size ?? 0, lastModified: object.LastModified ?? new Date(0) }
      }
      token = page.IsTruncated ? page.NextContinuationToken : undefined
    } while (token !== undefined)
  }

  async close(): Promise<void> {
    if (this.#ownsClient && this.#client !== undefined) {
      this.#client.destroy()
      this.#client = undefined
    }
  }

  // ---------------------------------------------------------------------------------------------

  /** The normalized key under the store's prefix: what the SDK is given. Throws `bad-key` first. */
  #objectKey(key: string): string {
    const full = prefixedKey(this.prefix, key)
    if (Buffer.byteLength(full) > MAX_S3_KEY_BYTES) {
      throw badKeyError(key, `with the store prefix it is longer than ${MAX_S3_KEY_BYTES} bytes`)
    }
    return full
  }

  #failure(message: string, cause?: unknown): AttachStorageError {
    return storeFailure(`S3 store "${this.name}": ${message}`, {
      secrets: this.#secrets,
      ...(cause !== undefined ? { cause: sanitizeCause(cause, this.#secrets) } : {}),
    })
  }

  /** Wraps an SDK or network error once; AttachStorageErrors pass unchanged. */
  #wrap(operation: string, key: string | undefined, err: unknown): AttachStorageError {
    if (err instanceof AttachStorageError) return err
    const what = key === undefined ? operation : `${operation} of ${quoteKey(key)}`
    return this.#failure(`${what} failed: ${reasonOf(err, this.bucket)}`, err)
  }

  /** Runs one SDK call: a missing object becomes `not-found`, anything else `store-failure`. */
  async #call<T>(operation: string, key: string, run: () => Promise<T>): Promise<T> {
    try {
      return await run()
    } catch (err) {
      if (isMissingObject(err)) throw notFoundError(this.name, key)
      throw this.#wrap(operation, key, err)
    }
  }

  async #head(
    operation: string,
    key: string,
    objectKey: string,
  ): Promise<{ size: number; lastModified: Date; head: HeadObjectCommandOutput }> {
    const head = await this.#call(operation === 'HeadObject' ? operation : `${operation} (HeadObject)`, key, () =>
      this.client.send(new HeadObjectCommand({ Bucket: this.bucket, Key: objectKey })),
    )
    return { size: head.ContentLength ?? 0, lastModified: head.LastModified ?? new Date(0), head }
  }

  /**
   * Copies `source` to `target` (CopyObject, or a multipart copy above the threshold). Resolves `false`
   * when both are the same key (nothing to do), `true` after a copy. A missing source is `not-found`.
   */
  async #copyObject(from: string, source: string, to: string, target: string): Promise<boolean> {
    const head = await this.#head('CopyObject', from, source)
    if (source === target) return false
    const copySource = `${encodeURIComponent(this.bucket)}/${source.split('/').map(encodeURIComponent).join('/')}`
    if (head.size <= this.#settings.multipartCopyThreshold) {
      await this.#call('CopyObject', from, () =>
        this.client.send(new CopyObjectCommand({ Bucket: this.bucket, Key: target, CopySource: copySource, MetadataDirective: 'COPY' })),
      )
      return true
    }
    await multipartCopy(this.#calls, from, to, target, copySource, head.size, head.head)
    return true
  }
}

/**
 * Creates an {@link S3Store} from its declared settings (camelCase, as the core passes them). With
 * `verify-on-start`, checks bucket and credentials once before resolving.
 *
 * @example
 * const store = await createStore('files', { type: 's3', bucket: 'b', region: 'eu-central-1' })
 */
export const createStore: StoreFactory = async (name, settings) => {
  const store = new S3Store(name, settings as unknown as S3StoreOptions)
  // The constructor validated the flag already.
  if (settings.verifyOnStart === true || settings.verifyOnStart === 'true') await store.verify()
  return store
}
