/**
 * `@attach-storage/store-azure`: an attach-storage {@link Store} on Azure Blob Storage (block blobs).
 * @module
 */
import { Readable } from 'node:stream'
import {
  BlobServiceClient,
  type BlobClient,
  type BlobHTTPHeaders,
  type BlockBlobClient,
  type ContainerClient,
  type ContainerListBlobFlatSegmentResponse,
  type StoragePipelineOptions,
} from '@azure/storage-blob'
import {
  AttachStorageError,
  normalizeKey,
  normalizePrefix,
  parseDuration,
  parseSize,
  type ByteRange,
  type PutOptions,
  type Store,
  type StoreFactory,
  type StoreListEntry,
  type StoreStat,
  isNormalKey,
} from 'attach-storage'

const KiB = 1024
const MiB = 1024 * KiB

/** The longest blob name Azure accepts, in characters (prefix included). */
const MAX_BLOB_NAME = 1024

/**
 * Settings of {@link AzureBlobStore}: the `attach.stores.<name>` settings of a store of type `azure`
 * (kebab-case in a configuration file, camelCase here).
 *
 * Durations are a number of seconds or a string with its unit (`'500ms'`, `'30s'`, `'10m'`); sizes are a
 * number of bytes or a string with its unit (`'4MB'`, `'512KB'`).
 *
 * @example
 * new AzureBlobStore('az', {
 *   connectionString: process.env.AZURE_STORAGE_CONNECTION_STRING,
 *   container: 'attachments',
 *   prefix: 'prod/',
 * })
 */
export interface AzureBlobStoreOptions {
  /**
   * An Azure Storage connection string: an account one (`DefaultEndpointsProtocol`, `AccountName`,
   * `AccountKey`, and `EndpointSuffix` or `BlobEndpoint`), a SAS one (`BlobEndpoint`,
   * `SharedAccessSignature`), or `UseDevelopmentStorage=true` (Azurite on 127.0.0.1:10000).
   * Required unless {@link containerClient} is given. Never shown in an error message.
   */
  connectionString?: string
  /** The container's name (3-63 lowercase letters, digits and single hyphens). Required unless {@link containerClient} is given. */
  container?: string
  /**
   * A ready client of the container, for credentials a connection string cannot carry (Microsoft Entra ID
   * through `@azure/identity`, a user delegation SAS). It then takes the place of `connectionString` and
   * `container`, and the retry settings below are the client's own business.
   */
  containerClient?: ContainerClient
  /**
   * A folder inside the container that holds every object of this store (`tenant-a/`); keys are relative
   * to it and `list` answers keys without it. Its segments follow the key rules of attach-storage.
   * @default '' (the container's root)
   */
  prefix?: string
  /** Public base address of the files. Read by the core (records' `cdnUrl`), not by the store. */
  cdnUrl?: string
  /**
   * `true`: create the container on first use when it does not exist (needs the right to create
   * containers). `false`: it must exist.
   * @default false
   */
  createContainer?: boolean
  /**
   * Attempts of each request (the first one included) before an error is reported.
   * @default 3
   */
  maxTries?: number
  /**
   * Delay before the first retry; it doubles with every further one, up to {@link maxRetryDelay}.
   * At most 60 seconds.
   * @default '500ms'
   */
  retryDelay?: number | string
  /** Longest delay between two tries. At most 10 minutes. @default '5s' */
  maxRetryDelay?: number | string
  /**
   * Server-side timeout of each try (the SDK's `tryTimeoutInMs`, sent as the `timeout` query parameter);
   * unset: the service's own default.
   */
  tryTimeout?: number | string
  /**
   * A streamed object up to this size goes up in one `Put Blob` request; a larger one in blocks of this
   * size (`Put Block`, then one `Put Block List` that makes it visible at once). Memory per upload is at
   * most about `blockSize × (uploadConcurrency + 1)`. Between 64 KiB and 256 MiB.
   * @default '4MB'
   */
  blockSize?: number | string
  /** Blocks of one upload sent at the same time. Between 1 and 32. @default 4 */
  uploadConcurrency?: number
  /**
   * How long a server-side copy (`move`, `copy`) may stay pending before it is aborted and reported as
   * a failure. Copies inside one account normally finish at once.
   * @default '10m'
   */
  copyTimeout?: number | string
}

/** The settings after validation, with their defaults. */
interface ResolvedOptions {
  prefix: string
  createContainer: boolean
  maxTries: number
  retryDelayMs: number
  maxRetryDelayMs: number
  tryTimeoutMs: number | undefined
  blockSize: number
  uploadConcurrency: number
  copyTimeoutMs: number
}

/** What {@link AzureBlobStore} knows of an SDK error (a `RestError`, or a network error). */
interface SdkError {
  name?: string
  message?: string
  code?: string
  statusCode?: number
  details?: { errorCode?: string }
  response?: { headers?: { get(name: string): string | undefined } }
}

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
  readonly #options: ResolvedOptions
  readonly #connectionString: string | undefined
  readonly #secrets: string[]
  #client: ContainerClient | undefined
  #created: Promise<void> | undefined

  constructor(name: string, options: AzureBlobStoreOptions) {
    this.name = name
    const o = (options ?? {}) as AzureBlobStoreOptions & Record<string, unknown>
    const where = `attach.stores.${name}`
    if (o.containerClient !== undefined) {
      if (!isContainerClient(o.containerClient)) {
        throw configError(`${where}: containerClient must be a ContainerClient of @azure/storage-blob`)
      }
      this.#client = o.containerClient
      this.container = o.containerClient.containerName
      this.#connectionString = undefined
      this.#secrets = []
    } else {
      const missing = ['connectionString', 'container'].filter((k) => o[k] === undefined || o[k] === null || o[k] === '')
      if (missing.length) {
        throw configError(`${where} (type azure) is missing required settings: ${missing.map(kebab).join(', ')}`)
      }
      if (typeof o.connectionString !== 'string') throw configError(`${where}.connection-string must be a string`)
      this.#secrets = secretsOf(o.connectionString)
      checkConnectionString(o.connectionString, where)
      this.#connectionString = o.connectionString
      if (typeof o.container !== 'string' || !isContainerName(o.container)) {
        throw configError(
          `${where}.container must be a container name: 3-63 lowercase letters, digits and single hyphens, starting and ending with a letter or digit (or "$root")`,
        )
      }
      this.container = o.container
    }
    this.#options = resolveOptions(o, where)
    this.prefix = this.#options.prefix
  }

  async put(key: string, body: Readable | Uint8Array, options: PutOptions = {}): Promise<{ size: number }> {
    const name = this.#blobName(key)
    const { signal } = options
    signal?.throwIfAborted()
    const client = await this.#ready('put', key)
    const blob = client.getBlockBlobClient(name)
    const headers: BlobHTTPHeaders = options.contentType ? { blobContentType: options.contentType } : {}
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
      return { size: await this.#upload(blob, body, headers, signal, options.size, state) }
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
      throw rangeError(range, (await this.#properties(blob, 'get', key)).size, key)
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
        throw rangeError(range!, total ?? (await this.#properties(blob, 'get', key)).size, key)
      }
      throw this.#error('get', key, err)
    }
    const body = response.readableStreamBody
    if (body === undefined) {
      throw new AttachStorageError('store-failure', `${this.#label('get', key)} failed: the response has no body`, {
        status: 502,
      })
    }
    const stream = body instanceof Readable ? body : new Readable().wrap(body)
    // Only a range at or past the end answers no bytes (Azurite answers 206 with none instead of 416;
    // `{start: 0}` is sent without a range header, so an empty blob answers 200).
    if (range !== undefined && response.contentLength === 0) {
      stream.destroy()
      throw rangeError(range, totalOf(response.contentRange) ?? 0, key)
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
    const pages = client
      .listBlobsFlat({ includeMetadata: true, ...(full === '' ? {} : { prefix: full }) })
      .byPage({ maxPageSize: 1000 })
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
    const name = this.prefix + normalizeKey(key)
    if (name.length > MAX_BLOB_NAME) {
      throw new AttachStorageError(
        'bad-key',
        `Invalid storage key ${JSON.stringify(key.slice(0, 120))}: with the store's prefix it is longer than ${MAX_BLOB_NAME} characters`,
        { status: 400 },
      )
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
        retryDelayInMs: o.retryDelayMs,
        maxRetryDelayInMs: o.maxRetryDelayMs,
        ...(o.tryTimeoutMs === undefined ? {} : { tryTimeoutInMs: o.tryTimeoutMs }),
      }
      try {
        this.#client = BlobServiceClient.fromConnectionString(this.#connectionString!, { retryOptions }).getContainerClient(
          this.container,
        )
      } catch (err) {
        throw configError(
          `attach.stores.${this.name}.connection-string is not usable: ${this.#redact(String((err as Error)?.message))}`,
        )
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

  /**
   * Streams `body` into the blob: read ahead up to one block; a body that ends by then is one `Put Blob`
   * (so concurrent small writers to one key never race on block lists), a longer one goes through
   * `uploadStream` (blocks, then one commit). Resolves with the bytes counted.
   */
  async #upload(
    blob: BlockBlobClient,
    body: Readable,
    headers: BlobHTTPHeaders,
    signal: AbortSignal | undefined,
    sizeHint: number | undefined,
    state: UploadState,
  ): Promise<number> {
    const { blockSize, uploadConcurrency } = this.#options
    const onAbort = (): void => {
      body.destroy(signal?.reason)
    }
    signal?.addEventListener('abort', onAbort, { once: true })
    const chunks = body[Symbol.asyncIterator]() as AsyncIterator<unknown>
    let size = 0
    const next = async (): Promise<Buffer | undefined> => {
      let chunk: Buffer
      try {
        const result = await chunks.next()
        if (result.done) return undefined
        chunk = toBuffer(result.value)
      } catch (err) {
        state.sourceError = err
        throw err
      }
      size += chunk.byteLength
      return chunk
    }
    let upload: Readable | undefined
    try {
      const head: Buffer[] = []
      let headSize = 0
      if (sizeHint === undefined || sizeHint <= blockSize) {
        for (;;) {
          const chunk = await next()
          if (chunk === undefined) {
            const data = head.length === 1 ? head[0]! : Buffer.concat(head, headSize)
            await blob.upload(data, data.byteLength, { blobHTTPHeaders: headers, abortSignal: signal })
            return size
          }
          head.push(chunk)
          headSize += chunk.byteLength
          if (headSize > blockSize) break
        }
      }
      async function* rest(): AsyncGenerator<Buffer> {
        while (head.length > 0) yield head.shift()!
        for (;;) {
          const chunk = await next()
          if (chunk === undefined) return
          yield chunk
        }
      }
      upload = Readable.from(rest(), { objectMode: false, highWaterMark: 256 * KiB })
      // Once the block list is committed the object is there: the put succeeded, even if aborted since.
      await blob.uploadStream(upload, blockSize, uploadConcurrency, { blobHTTPHeaders: headers, abortSignal: signal })
      return size
    } catch (err) {
      upload?.destroy()
      body.destroy()
      throw err
    } finally {
      signal?.removeEventListener('abort', onAbort)
    }
  }

  /** Server-side copy; streams through this process when the service refuses to copy. */
  async #copyBlob(src: BlobClient, dst: BlobClient, operation: string, from: string, to: string): Promise<void> {
    const timeout = AbortSignal.timeout(this.#options.copyTimeoutMs)
    let copyId: string | undefined
    try {
      const poller = await dst.beginCopyFromURL(src.url, { intervalInMs: 500, abortSignal: timeout })
      copyId = poller.getOperationState().result?.copyId
      const result = await poller.pollUntilDone()
      if (result.copyStatus !== undefined && result.copyStatus !== 'success') {
        throw new AttachStorageError(
          'store-failure',
          `${this.#label(operation, from)} to ${JSON.stringify(to)} failed: the copy ended with status ${result.copyStatus}`,
          { status: 502 },
        )
      }
      return
    } catch (err) {
      if (err instanceof AttachStorageError) throw err
      if (timeout.aborted) {
        if (copyId !== undefined) await dst.abortCopyFromURL(copyId).catch(() => {})
        throw new AttachStorageError(
          'store-failure',
          `${this.#label(operation, from)} to ${JSON.stringify(to)} failed: the copy did not finish within ${this.#options.copyTimeoutMs} ms`,
          { status: 502 },
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
      await this.#upload(dst.getBlockBlobClient(), stream, headers, undefined, response.contentLength, {})
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
      return new AttachStorageError('not-found', `No object at key ${JSON.stringify(key)} in store "${this.name}"`, {
        status: 404,
        cause: err,
      })
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
    return new AttachStorageError('store-failure', this.#redact(`${this.#label(operation, key)} failed: ${reason}`), {
      status: 502,
      cause: err,
    })
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
    let out = text
    for (const secret of this.#secrets) out = out.split(secret).join('[redacted]')
    return out
      .replace(/(sig=)[^&\s"';]+/gi, '$1[redacted]')
      .replace(/(AccountKey=)[^;\s"']+/gi, '$1[redacted]')
      .replace(/(SharedAccessSignature=)[^;\s"']+/gi, '$1[redacted]')
  }
}

/**
 * Creates an {@link AzureBlobStore} from the camelCase settings of `attach.stores.<name>`; what the
 * core calls for a store of type `azure`.
 */
export const createStore: StoreFactory = (name, settings) =>
  new AzureBlobStore(name, settings as AzureBlobStoreOptions)

// ----------------------------------------------------------------------------------------------------

interface UploadState {
  /** The error the caller's body stream failed with (passed on as it is, not as a store failure). */
  sourceError?: unknown
}

const configError = (message: string): AttachStorageError =>
  new AttachStorageError('config-invalid', message, { status: 500 })

const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)

function isContainerClient(value: unknown): value is ContainerClient {
  const v = value as Partial<ContainerClient> | null
  return (
    typeof v === 'object' &&
    v !== null &&
    typeof v.containerName === 'string' &&
    typeof v.getBlockBlobClient === 'function' &&
    typeof v.listBlobsFlat === 'function'
  )
}

/** Azure container names: 3-63 of `a-z0-9-`, starting and ending with a letter or digit, no `--`. */
function isContainerName(name: string): boolean {
  return name === '$root' || (/^[a-z0-9](?:[a-z0-9-]{1,61}[a-z0-9])$/.test(name) && !name.includes('--'))
}

/** `key=value` pairs of a connection string (a value may hold `=`). */
function connectionParts(connectionString: string): Map<string, string> {
  const parts = new Map<string, string>()
  for (const part of connectionString.split(';')) {
    const at = part.indexOf('=')
    if (at > 0) parts.set(part.slice(0, at).trim(), part.slice(at + 1).trim())
  }
  return parts
}

/** The values of a connection string that must never reach a message. */
function secretsOf(connectionString: string): string[] {
  const parts = connectionParts(connectionString)
  const secrets = [connectionString]
  for (const k of ['AccountKey', 'SharedAccessSignature']) {
    const v = parts.get(k)
    if (v) secrets.push(v)
  }
  // The longest first, so that a secret inside another is not left half-replaced.
  return secrets.filter((s) => s.length >= 4).sort((a, b) => b.length - a.length)
}

/** The shapes the SDK accepts, checked up front so that a bad value fails at start with a clear message. */
function checkConnectionString(connectionString: string, where: string): void {
  const parts = connectionParts(connectionString)
  const bad = (problem: string) =>
    configError(
      `${where}.connection-string is not a valid Azure Storage connection string (${problem}); use ` +
        '"DefaultEndpointsProtocol=https;AccountName=…;AccountKey=…;EndpointSuffix=core.windows.net" (or BlobEndpoint=… ' +
        'instead of EndpointSuffix), "BlobEndpoint=…;SharedAccessSignature=…", or "UseDevelopmentStorage=true"',
    )
  if (connectionString.startsWith('UseDevelopmentStorage=true')) return
  const endpoint = parts.get('BlobEndpoint')
  if (endpoint !== undefined && !/^https?:\/\/[^/]/i.test(endpoint)) throw bad('BlobEndpoint is not an http(s) URL')
  if (connectionString.includes('DefaultEndpointsProtocol=') && connectionString.includes('AccountKey=')) {
    if (!parts.get('AccountName')) throw bad('AccountName is missing')
    if (!parts.get('AccountKey')) throw bad('AccountKey is empty')
    if (!endpoint) {
      const protocol = parts.get('DefaultEndpointsProtocol')?.toLowerCase()
      if (protocol !== 'https' && protocol !== 'http') throw bad('DefaultEndpointsProtocol is not https or http')
      if (!parts.get('EndpointSuffix')) throw bad('EndpointSuffix or BlobEndpoint is missing')
    }
    return
  }
  if (parts.has('AccountKey')) throw bad('an account key needs DefaultEndpointsProtocol')
  if (!endpoint) throw bad('BlobEndpoint is missing')
  if (!parts.get('SharedAccessSignature')) throw bad('neither AccountKey nor SharedAccessSignature is given')
}

function resolveOptions(o: AzureBlobStoreOptions & Record<string, unknown>, where: string): ResolvedOptions {
  const fail = (key: string, what: string) => configError(`${where}.${kebab(key)} ${what}`)

  let prefix = ''
  if (o.prefix !== undefined && o.prefix !== null && o.prefix !== '') {
    if (typeof o.prefix !== 'string') throw fail('prefix', 'must be a string')
    const withSlash = o.prefix.endsWith('/') ? o.prefix : `${o.prefix}/`
    try {
      prefix = normalizePrefix(withSlash)
    } catch (err) {
      throw fail('prefix', `is not a valid folder prefix: ${(err as Error).message}`)
    }
  }

  let createContainer = false
  const cc = o.createContainer as unknown
  if (cc !== undefined && cc !== null) {
    if (cc === true || cc === 'true') createContainer = true
    else if (cc === false || cc === 'false') createContainer = false
    else throw fail('createContainer', 'must be true or false')
  }

  const integer = (key: keyof AzureBlobStoreOptions, def: number, min: number, max: number): number => {
    const value = o[key] as unknown
    if (value === undefined || value === null) return def
    const n = typeof value === 'string' && /^\d+$/.test(value.trim()) ? Number(value) : value
    if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) {
      throw fail(key, `must be an integer from ${min} to ${max}`)
    }
    return n
  }
  const duration = (key: keyof AzureBlobStoreOptions, def: number | undefined, max: number): number | undefined => {
    const value = o[key] as unknown
    if (value === undefined || value === null) return def
    const ms = parseDuration(value)
    if (ms === undefined) throw fail(key, 'must be a duration: a number of seconds, or a string such as "500ms", "30s", "10m"')
    if (ms > max) {
      throw fail(key, `must be at most ${max / 1000} s (a bare number means seconds; write "500ms" for milliseconds)`)
    }
    return ms
  }

  const maxTries = integer('maxTries', 3, 1, 20)
  const retryDelayMs = duration('retryDelay', 500, 60_000)!
  const maxRetryDelayMs = duration('maxRetryDelay', 5_000, 600_000)!
  if (maxRetryDelayMs < retryDelayMs) throw fail('maxRetryDelay', 'must not be shorter than retry-delay')
  const tryTimeoutMs = duration('tryTimeout', undefined, 3_600_000)
  if (tryTimeoutMs !== undefined && tryTimeoutMs < 1000) throw fail('tryTimeout', 'must be at least 1 s')
  const copyTimeoutMs = duration('copyTimeout', 600_000, 86_400_000)!
  if (copyTimeoutMs < 1000) throw fail('copyTimeout', 'must be at least 1 s')

  let blockSize = 4 * MiB
  if (o.blockSize !== undefined && o.blockSize !== null) {
    const bytes = parseSize(o.blockSize)
    if (bytes === undefined || bytes < 64 * KiB || bytes > 256 * MiB) {
      throw fail('blockSize', 'must be a size from 64KB to 256MB (a bare number means bytes)')
    }
    blockSize = bytes
  }
  const uploadConcurrency = integer('uploadConcurrency', 4, 1, 32)

  return {
    prefix,
    createContainer,
    maxTries,
    retryDelayMs,
    maxRetryDelayMs,
    tryTimeoutMs,
    blockSize,
    uploadConcurrency,
    copyTimeoutMs,
  }
}

const statusOf = (err: unknown): number | undefined => {
  const s = (err as SdkError | null)?.statusCode
  return typeof s === 'number' ? s : undefined
}

/** The service's error code (`BlobNotFound`, ...); HEAD answers carry it in `details` only. */
const errorCodeOf = (err: unknown): string | undefined => {
  const e = err as SdkError | null
  const code = e?.details?.errorCode || (statusOf(err) !== undefined ? e?.code : undefined)
  return code || undefined
}

/** Errors that mean the service will not copy for us (the source cannot be authorized, or no support). */
function copyRefused(err: unknown): boolean {
  const status = statusOf(err)
  const code = errorCodeOf(err)
  return (
    status === 401 ||
    status === 403 ||
    status === 501 ||
    code === 'CannotVerifyCopySource' ||
    code === 'NotImplemented' ||
    code === 'FeatureNotSupported'
  )
}

function firstLine(message: string | undefined): string {
  return (message ?? '').split('\n')[0]!.trim().slice(0, 300)
}

/** The total size of a `Content-Range: bytes a-b/total` (or `bytes * /total`) header. */
function totalOf(contentRange: string | undefined | null): number | undefined {
  const m = /\/(\d+)\s*$/.exec(contentRange ?? '')
  return m ? Number(m[1]) : undefined
}

function isValidRange(range: ByteRange): boolean {
  const { start, end } = range
  return Number.isSafeInteger(start) && start >= 0 && (end === undefined || (Number.isSafeInteger(end) && end >= start))
}

function rangeError(range: ByteRange, size: number, key: string): AttachStorageError {
  return new AttachStorageError(
    'range-not-satisfiable',
    `Range ${range.start}-${range.end ?? ''} is not satisfiable for key ${JSON.stringify(key)} of ${size} bytes`,
    { status: 416, details: { size } },
  )
}


function toBuffer(chunk: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
  if (typeof chunk === 'string') return Buffer.from(chunk)
  throw new TypeError('put: the body stream must yield bytes (Buffer, Uint8Array or string)')
}
