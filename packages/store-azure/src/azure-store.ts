import { Readable } from 'node:stream'
import {
  BlobServiceClient,
  type BlobClient,
  type BlobHTTPHeaders,
  type ContainerClient,
  type ContainerListBlobFlatSegmentResponse,
  type StoragePipelineOptions,
} from '@azure/storage-blob'
import {
  AttachStorageError,
  badKeyError,
  isNormalKey,
  isValidRange,
  normalizePrefix,
  notFoundError,
  prefixedKey,
  rangeNotSatisfiable,
  redact,
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
import { blobHeaders } from './blob-headers.js'
import { holdsAccountKey, isSharedKey, presignGet, presignPut, type SasSigner } from './blob-sas.js'
import { uploadBody, type UploadState } from './blob-upload.js'
import { copyRefused, errorCodeOf, firstLine, statusOf, totalOf, type SdkError } from './sdk-errors.js'
import { resolveAzureSettings, secretsOf, type AzureBlobStoreOptions, type ResolvedAzureSettings } from './settings.js'

/** The longest blob name Azure accepts, in characters (prefix included). */
const MAX_BLOB_NAME = 1024

/**
 * A {@link Store} on one container of Azure Blob Storage, through `@azure/storage-blob`.
 *
 * - Every key goes through `normalizeKey` before the store's prefix is added, so the SDK (which resolves
 *   `..` segments in blob names on the client side) never sees a traversal.
 * - `put` is atomic: a small object is one `Put Blob`; a larger one is uploaded as uncommitted blocks
 *   (bounded buffers) and becomes visible with one `Put Block List`. A failed or aborted upload commits
 *   nothing, so nothing appears at the key (the service garbage-collects uncommitted blocks).
 * - `move` and `copy` are server-side copies (`Copy Blob`, which inside one account works with the same
 *   shared key or SAS); when the service refuses to copy (a credential that cannot authorize the
 *   source), the object is streamed through this process instead. `move` deletes the source after the
 *   copy succeeded: it is not atomic.
 * - Failures of the service are reported once, as `AttachStorageError` `store-failure` (502) naming the
 *   operation and key; a missing object is `not-found` (404). Messages never carry the account key, the
 *   connection string or a SAS signature.
 * - `presignGet` (what `serve: redirect` needs) exists only on a store that holds the account key: a
 *   connection string with `AccountKey` (or `UseDevelopmentStorage=true`), or a ready `containerClient`
 *   made with a `StorageSharedKeyCredential`. A SAS connection string, an anonymous client or a token
 *   credential (Microsoft Entra ID) cannot sign a blob SAS, so such a store has no `presignGet` and the
 *   core refuses `serve: redirect` on it at start.
 *
 * @example
 * import { AzureBlobStore } from '@attach-storage/store-azure'
 * const store = new AzureBlobStore('az', { connectionString, container: 'attachments' })
 * await store.put('demo/2026/11/42/abc.png', bytes, { contentType: 'image/png' })
 */
export class AzureBlobStore implements Store {
  readonly type = 'azure'
  readonly name: string
  /** The container's name. */
  readonly container: string
  /** The folder of this store inside the container (`''` or ending in `/`). */
  readonly prefix: string
  readonly #options: ResolvedAzureSettings
  readonly #connectionString: string | undefined
  readonly #secrets: string[]
  #client: ContainerClient | undefined
  #created: Promise<void> | undefined

  /**
   * A short-lived read-only address of `key` (a blob service SAS: permission `r`, `se` = now +
   * `expiresIn` seconds, `st` a minute back for clock skew, `rsct`/`rscd` for the given Content-Type and
   * Content-Disposition, HTTPS only unless the endpoint is plain HTTP). The key goes through the same
   * normalization and prefix as `get` (a bad key is refused with `bad-key`). Signing is local: no
   * request is made. Present only when the store holds the account key (see the class description);
   * absent otherwise (a `declare`d field: none is emitted), so the core refuses `serve: redirect` at start.
   *
   * @example
   * const url = await store.presignGet?.('demo/2026/11/42/abc.pdf', {
   *   expiresIn: 300,
   *   contentType: 'application/pdf',
   *   contentDisposition: `attachment; filename="a.pdf"; filename*=UTF-8''a.pdf`,
   * })
   */
  declare readonly presignGet?: (key: string, options: PresignGetOptions) => Promise<string>

  /**
   * A short-lived write-only address of `key` for a client's own `Put Blob` (a blob service SAS:
   * permissions `c` and `w` only, `se` = now + `expiresIn` seconds, `st` a minute back): the client
   * sends `PUT` with `x-ms-blob-type: BlockBlob`. With `create-container`, the container is created
   * first (the only request it makes). A SAS cannot fix the length, so the caller must check
   * what arrived (the core does, at commit). Present only when the store holds the account key, like
   * {@link presignGet}. The container needs a CORS rule allowing `PUT` from the page's origin
   * (docs/direct-uploads.md).
   */
  declare readonly presignPut?: (key: string, options: PresignPutOptions) => Promise<PresignedPut>

  constructor(name: string, options: AzureBlobStoreOptions) {
    this.name = name
    this.#options = resolveAzureSettings(name, options)
    this.#client = this.#options.containerClient
    this.container = this.#client?.containerName ?? this.#options.container!
    this.#connectionString = this.#client ? undefined : this.#options.connectionString
    this.#secrets = secretsOf(this.#connectionString)
    this.prefix = this.#options.prefix
    if (this.#client ? isSharedKey(this.#client.credential) : holdsAccountKey(this.#connectionString!)) {
      const signer: SasSigner = {
        name,
        container: this.container,
        blobName: (key) => this.#blobName(key),
        getClient: () => this.#getClient(),
        ready: (operation, key) => this.#ready(operation, key),
        label: (operation, key) => this.#label(operation, key),
        redact: (text) => this.#redact(text),
      }
      this.presignGet = (key, presign) => presignGet(signer, key, presign)
      this.presignPut = (key, presign) => presignPut(signer, key, presign)
    }
  }

  async put(key: string, body: Readable | Uint8Array, options: PutOptions = {}): Promise<{ size: number }> {
    const name = this.#blobName(key)
    const { signal } = options
    signal?.throwIfAborted()
    const client = await this.#ready('put', key)
    const blob = client.getBlockBlobClient(name)
    const headers = blobHeaders(options.contentType)
    const state: UploadState = {}
    try {
      if (body instanceof Uint8Array) {
        const bytes = Buffer.from(body.buffer, body.byteOffset, body.byteLength)
        await blob.uploadData(bytes, {
          blobHTTPHeaders: headers,
          abortSignal: signal,
          blockSize: this.#options.blockSize,
          maxSingleShotSize: this.#options.blockSize,
          concurrency: this.#options.uploadConcurrency,
        })
        return { size: bytes.byteLength }
      }
      return { size: await uploadBody(this.#options, blob, body, headers, signal, options.size, state) }
    } catch (err) {
      if (signal?.aborted) throw signal.reason
      if (state.sourceError !== undefined && err === state.sourceError) throw err
      throw this.#error('put', key, err)
    }
  }

  async get(key: string, range?: ByteRange): Promise<Readable> {
    const name = this.#blobName(key)
    const client = await this.#ready('get', key)
    const blob = client.getBlobClient(name)
    if (range !== undefined && !isValidRange(range)) {
      throw rangeNotSatisfiable(key, range, (await this.#properties(blob, 'get', key)).size)
    }
    let response: Awaited<ReturnType<BlobClient['download']>>
    try {
      response =
        range === undefined
          ? await blob.download()
          : await blob.download(range.start, range.end === undefined ? undefined : range.end - range.start + 1)
    } catch (err) {
      if (statusOf(err) === 416) {
        const total = totalOf((err as SdkError).response?.headers?.get('content-range'))
        throw rangeNotSatisfiable(key, range!, total ?? (await this.#properties(blob, 'get', key)).size)
      }
      throw this.#error('get', key, err)
    }
    const body = response.readableStreamBody
    if (body === undefined) {
      throw storeFailure(`${this.#label('get', key)} failed: the response has no body`)
    }
    const stream = body instanceof Readable ? body : new Readable().wrap(body)
    // Only a range at or past the end answers no bytes (Azurite answers 206 with none instead of 416;
    // `{start: 0}` is sent without a range header, so an empty blob answers 200).
    if (range !== undefined && response.contentLength === 0) {
      stream.destroy()
      throw rangeNotSatisfiable(key, range, totalOf(response.contentRange) ?? 0)
    }
    return stream
  }

  async stat(key: string): Promise<StoreStat> {
    const name = this.#blobName(key)
    const client = await this.#ready('stat', key)
    return this.#properties(client.getBlobClient(name), 'stat', key)
  }

  async exists(key: string): Promise<boolean> {
    const name = this.#blobName(key)
    const client = await this.#ready('exists', key)
    try {
      return await client.getBlobClient(name).exists()
    } catch (err) {
      throw this.#error('exists', key, err)
    }
  }

  async move(from: string, to: string): Promise<void> {
    const source = this.#blobName(from)
    const target = this.#blobName(to)
    const client = await this.#ready('move', from)
    const src = client.getBlobClient(source)
    if (source === target) {
      await this.#properties(src, 'move', from)
      return
    }
    await this.#copyBlob(src, client.getBlobClient(target), 'move', from, to)
    try {
      await src.deleteIfExists({ deleteSnapshots: 'include' })
    } catch (err) {
      throw this.#error('move (deleting the source)', from, err)
    }
  }

  async copy(from: string, to: string): Promise<void> {
    const source = this.#blobName(from)
    const target = this.#blobName(to)
    const client = await this.#ready('copy', from)
    const src = client.getBlobClient(source)
    if (source === target) {
      await this.#properties(src, 'copy', from)
      return
    }
    await this.#copyBlob(src, client.getBlobClient(target), 'copy', from, to)
  }

  async delete(key: string): Promise<void> {
    const name = this.#blobName(key)
    const client = await this.#ready('delete', key)
    try {
      await client.getBlobClient(name).deleteIfExists({ deleteSnapshots: 'include' })
    } catch (err) {
      throw this.#error('delete', key, err)
    }
  }

  async *list(prefix: string): AsyncGenerator<StoreListEntry> {
    const normalized = normalizePrefix(prefix)
    const client = await this.#ready('list', prefix)
    const full = this.prefix + normalized
    // Metadata tells the directory entries of accounts with a hierarchical namespace (`hdi_isfolder`).
    const pages = client.listBlobsFlat({ includeMetadata: true, ...(full === '' ? {} : { prefix: full }) }).byPage({ maxPageSize: 1000 })
    for (;;) {
      let page: IteratorResult<ContainerListBlobFlatSegmentResponse>
      try {
        page = await pages.next()
      } catch (err) {
        throw this.#error('list', prefix, err)
      }
      if (page.done) return
      for (const item of page.value.segment.blobItems) {
        if (!item.name.startsWith(full)) continue
        // Directory entries of accounts with a hierarchical namespace (Data Lake Gen2) are no objects.
        if (item.metadata?.hdi_isfolder === 'true') continue
        const key = item.name.slice(this.prefix.length)
        // Blobs written by others under names no key can have (`..`, `%`, ...) are skipped.
        if (!isNormalKey(key)) continue
        yield {
          key,
          size: item.properties.contentLength ?? 0,
          lastModified: item.properties.lastModified ?? new Date(0),
        }
      }
    }
  }

  /** Drops the client created from the settings (the SDK keeps no other resources to release). */
  async close(): Promise<void> {
    if (this.#connectionString !== undefined) {
      this.#client = undefined
      this.#created = undefined
    }
  }

  // ---------------------------------------------------------------------------------------------

  /** The key normalized, under the store's prefix. */
  #blobName(key: string): string {
    const name = prefixedKey(this.prefix, key)
    if (name.length > MAX_BLOB_NAME) {
      throw badKeyError(key, `with the store's prefix it is longer than ${MAX_BLOB_NAME} characters`)
    }
    return name
  }

  /** The container client, created on first use (and the container, with `createContainer`). */
  async #ready(operation: string, key: string): Promise<ContainerClient> {
    const client = this.#getClient()
    if (this.#options.createContainer) {
      if (this.#created === undefined) {
        const pending = client.createIfNotExists().then(() => {})
        this.#created = pending
        pending.catch(() => {
          if (this.#created === pending) this.#created = undefined
        })
      }
      try {
        await this.#created
      } catch (err) {
        throw this.#error(`${operation} (creating the container)`, key, err)
      }
    }
    return client
  }

  #getClient(): ContainerClient {
    if (this.#client === undefined) {
      const o = this.#options
      const retryOptions: StoragePipelineOptions['retryOptions'] = {
        maxTries: o.maxTries,
        retryDelayInMs: o.retryDelay,
        maxRetryDelayInMs: o.maxRetryDelay,
        ...(o.tryTimeout === undefined ? {} : { tryTimeoutInMs: o.tryTimeout }),
      }
      try {
        this.#client = BlobServiceClient.fromConnectionString(this.#connectionString!, { retryOptions }).getContainerClient(this.container)
      } catch (err) {
        throw settingsError(this.name, 'connectionString', `is not usable: ${this.#redact(String((err as Error)?.message))}`)
      }
    }
    return this.#client
  }

  async #properties(blob: BlobClient, operation: string, key: string): Promise<StoreStat> {
    try {
      const p = await blob.getProperties()
      return { size: p.contentLength ?? 0, lastModified: p.lastModified ?? new Date(0) }
    } catch (err) {
      throw this.#error(operation, key, err)
    }
  }

  /** Server-side copy; streams through this process when the service refuses to copy. */
  async #copyBlob(src: BlobClient, dst: BlobClient, operation: string, from: string, to: string): Promise<void> {
    const timeout = AbortSignal.timeout(this.#options.copyTimeout)
    let copyId: string | undefined
    try {
      const poller = await dst.beginCopyFromURL(src.url, { intervalInMs: 500, abortSignal: timeout })
      copyId = poller.getOperationState().result?.copyId
      const result = await poller.pollUntilDone()
      if (result.copyStatus !== undefined && result.copyStatus !== 'success') {
        throw storeFailure(
          `${this.#label(operation, from)} to ${JSON.stringify(to)} failed: the copy ended with status ${result.copyStatus}`,
        )
      }
      return
    } catch (err) {
      if (err instanceof AttachStorageError) throw err
      if (timeout.aborted) {
        if (copyId !== undefined) await dst.abortCopyFromURL(copyId).catch(() => {})
        throw storeFailure(
          `${this.#label(operation, from)} to ${JSON.stringify(to)} failed: the copy did not finish within ${this.#options.copyTimeout} ms`,
        )
      }
      // A source the service cannot authorize may answer 404 (CannotVerifyCopySource) although it
      // exists: a 404 or a refusal goes to the streamed copy, whose download tells a missing source.
      if (errorCodeOf(err) === 'ContainerNotFound' || !(statusOf(err) === 404 || copyRefused(err))) {
        throw this.#error(operation, from, err)
      }
    }
    await this.#streamCopy(src, dst, operation, from, to)
  }

  /** Copies by downloading and uploading (the fallback of {@link #copyBlob}). */
  async #streamCopy(src: BlobClient, dst: BlobClient, operation: string, from: string, to: string): Promise<void> {
    let response: Awaited<ReturnType<BlobClient['download']>>
    try {
      response = await src.download()
    } catch (err) {
      throw this.#error(operation, from, err)
    }
    const body = response.readableStreamBody
    const stream = body instanceof Readable ? body : new Readable().wrap(body!)
    const headers: BlobHTTPHeaders = {
      blobContentType: response.contentType,
      blobContentEncoding: response.contentEncoding,
      blobContentLanguage: response.contentLanguage,
      blobContentDisposition: response.contentDisposition,
      blobCacheControl: response.cacheControl,
    }
    try {
      await uploadBody(this.#options, dst.getBlockBlobClient(), stream, headers, undefined, response.contentLength, {})
    } catch (err) {
      throw this.#error(`${operation} (streamed) to ${JSON.stringify(to)}`, from, err)
    }
  }

  /** `store-name: operation of "key"` for messages. */
  #label(operation: string, key: string): string {
    return `Azure store "${this.name}" (container "${this.container}"): ${operation} of ${JSON.stringify(key)}`
  }

  /**
   * The one place SDK errors become AttachStorageErrors: 404 of a blob is `not-found`, everything else
   * `store-failure` (502) with a message that names the operation and key and holds no secret.
   */
  #error(operation: string, key: string, err: unknown): AttachStorageError {
    if (err instanceof AttachStorageError) return err
    const status = statusOf(err)
    const code = errorCodeOf(err)
    if (status === 404 && code !== 'ContainerNotFound') {
      return notFoundError(this.name, key, err)
    }
    const e = err as SdkError
    let reason: string
    if (code === 'ContainerNotFound') {
      reason = `the container "${this.container}" does not exist (create it, or set create-container: true)`
    } else if (status === 401 || status === 403) {
      reason = `the service refused the credentials (${status} ${code ?? ''}); check the account key or SAS of the connection string and its permissions`
    } else if (code === 'InvalidBlockList') {
      reason = `${status} InvalidBlockList: another upload to the same key committed first (concurrent writers of one key larger than block-size race; one of them wins whole)`
    } else if (status === undefined) {
      const what = e?.name === 'AbortError' ? 'the request was aborted' : 'the Blob service did not answer'
      reason = `${what} (${firstLine(e?.message) || e?.code || 'no details'}) at ${this.#endpoint()}`
    } else {
      reason = `${status} ${code ?? ''}: ${firstLine(e?.message)}`
    }
    return storeFailure(this.#redact(`${this.#label(operation, key)} failed: ${reason}`), { cause: err })
  }

  /** The origin of the Blob endpoint (no path, no query: a SAS lives in the query). */
  #endpoint(): string {
    try {
      return new URL(this.#client?.url ?? '').origin
    } catch {
      return 'the Blob endpoint'
    }
  }

  /** Removes every secret of the connection string, and any `sig=` SAS signature, from a text. */
  #redact(text: string): string {
    return redact(text, this.#secrets, '[redacted]')
      .replace(/(sig=)[^&\s"';]+/gi, '$1[redacted]')
      .replace(/(AccountKey=)[^;\s"']+/gi, '$1[redacted]')
      .replace(/(SharedAccessSignature=)[^;\s"']+/gi, '$1[redacted]')
  }
}

/**
 * Creates an {@link AzureBlobStore} from the camelCase settings of `attach.stores.<name>`; what the
 * core calls for a store of type `azure`.
 */
export const createStore: StoreFactory = (name, settings) => new AzureBlobStore(name, settings as AzureBlobStoreOptions)
