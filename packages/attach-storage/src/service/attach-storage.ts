import { join } from 'node:path'
import type { Readable } from 'node:stream'
import type { Kysely, Transaction } from 'kysely'
import { parseAttachConfig, type AttachConfigInput, type AttachConfigParsed } from '../config/schema.js'
import { AttachStorageError, configError } from '../errors.js'
import { Resizer } from '../media/resize.js'
import { Registry } from '../registry/registry.js'
import { AttachRepository } from '../repository/attach-repository.js'
import { openDatabase } from '../repository/database.js'
import { migrateAttachSchema } from '../repository/migrations.js'
import type { Store, StoreFactory } from '../stores/store.js'
import * as access from './access.js'
import { createJwtAuthenticator, type JwtOptions } from './auth.js'
import * as commit from './commit.js'
import * as commitCheck from './commit-check.js'
import * as hostTransaction from './host-transaction.js'
import type { ServiceContext } from './context.js'
import { EventHub } from './events.js'
import * as housekeeping from './housekeeping.js'
import * as records from './records.js'
import * as serving from './serving.js'
import { UrlSigner } from './signing.js'
import { createStores } from './stores.js'
import { checkReadiness, type Readiness } from './health.js'
import { fanOut, type Instrumentation, instrumentStores, tracerIfInstalled } from './instrumentation.js'
import type {
  AccessContext,
  AttachBag,
  AttachEventHook,
  AttachEvents,
  Authenticate,
  LookupFilters,
  LookupOptions,
  Logger,
} from './types.js'
import * as uploads from './uploads.js'
import { startVariantJobs } from './variant-jobs.js'
import { previewSetup } from './previews.js'
import * as zipDownload from './zip.js'

export { cleanDisplayName } from './names.js'
export { describeRecord, syntheticDescription } from './access.js'
export { EDITOR_DOMAIN } from './uploads.js'
export type {
  AttachContainer,
  AttachEventHook,
  AttachEvents,
  DirectItem,
  LookupFilters,
  LookupOptions,
  ReceivedFile,
  ServeTarget,
  TemporaryItem,
} from './types.js'

/** Closes each store once, ignoring failures (shutdown). */
async function closeStores(stores: Store[]): Promise<void> {
  await Promise.all([...new Set(stores)].map((s) => s.close().catch(() => undefined)))
}

/** The parameters of a use case after its context. */
type Args<F> = F extends (ctx: ServiceContext, ...args: infer A) => unknown ? A : never

/** Reads a service's use-case context (set by the class's static block). */
let readContext: (storage: AttachStorage) => ServiceContext

/**
 * @internal The context the use cases run over, for the route table (503 `not-ready` before init).
 * Not part of the public API.
 */
export function contextOf(storage: AttachStorage): ServiceContext {
  return readContext(storage)
}

/** Options of {@link createAttachStorage}. */
export interface AttachStorageOptions {
  /**
   * Observers of the service's work (answered requests, bytes, resizes, sweeps, store calls); see
   * `attach-storage/metrics` for Prometheus.
   */
  instrumentation?: Instrumentation | Instrumentation[]
  /**
   * OpenTelemetry spans (one per request, one per store call) through `@opentelemetry/api`.
   * @default true when an OpenTelemetry SDK is registered when the service starts
   */
  tracing?: boolean
  /** The `attach` settings tree, kebab-case or camelCase (see docs/configuration.md). */
  config?: AttachConfigInput | Record<string, unknown>
  /**
   * A Kysely instance of the host's database, typed with the host's tables or not (`openDatabase<HostTables>()`
   * answers one); the service creates and reads only its own `attach_*` tables in it. Default: one opened
   * from `config.db`, closed by {@link AttachStorage.close}.
   */
  db?: Kysely<any>
  /** Ready store instances by name (they count as declared). */
  stores?: Record<string, Store>
  /** Factories for store types of the host's own. */
  storeFactories?: Record<string, StoreFactory>
  /** Authenticates the JSON group; alternatively give `jwt`. */
  authenticate?: Authenticate
  /** Verifies Bearer JWTs on the JSON group (used when `authenticate` is absent). */
  jwt?: JwtOptions
  /** Registers domains, categories and filters once the stores are initialised. */
  registrar?: (registry: Registry, storage: AttachStorage) => void | Promise<void>
  /** @default console */
  logger?: Logger
  /** @internal Loads store packages; tests replace it. */
  importModule?: (specifier: string) => Promise<unknown>
  /** @internal The clock; tests replace it. */
  now?: () => Date
  /**
   * @internal Called at each step of a confirmed save of a temporary file (`reserved`, `moved`,
   * `recorded`, `done`) with the saving request; crash tests make it wait there and kill the process.
   */
  testPause?: ServiceContext['testPause']
  /**
   * This process runs background work: named variants (see docs/variants.md). `false` for a process
   * that only reads and maintains, such as the command-line tool: it neither queues nor makes them.
   * @default true
   */
  backgroundWork?: boolean
  /** Event hooks, the same as calling `storage.on()` for each. */
  on?: { [E in keyof AttachEvents]?: AttachEventHook<E> }
}

/**
 * The attachment service: uploads, confirmed saves, lookups, updates, deletes and what the binary group
 * serves. Create it with {@link createAttachStorage}; mount its handlers with `createAttachHandler()`.
 *
 * A thin facade: each method is a use case of `service/{uploads,commit,records,serving,zip,housekeeping,access}.ts`
 * run over the one {@link ServiceContext} that {@link AttachStorage.init} builds.
 */
export class AttachStorage {
  readonly config: AttachConfigParsed
  readonly registry: Registry
  readonly logger: Logger
  readonly authenticate: Authenticate | undefined
  /** Makes and caches resized variants. */
  readonly resizer: Resizer
  static {
    readContext = (storage) => storage.#c
  }

  readonly #options: AttachStorageOptions
  readonly #events: EventHub
  readonly #observe: ReturnType<typeof fanOut>
  #ctx: ServiceContext | undefined
  /** Set by {@link close}: readiness answers "not ready" from then on (a draining instance). */
  #closing = false
  /** The sweep running now, if any: a server never runs two at once. */
  #sweeping: Promise<housekeeping.SweepResult> | undefined
  #ownsDb = false
  #init: Promise<void> | undefined

  constructor(options: AttachStorageOptions = {}) {
    this.#options = options
    this.config = parseAttachConfig(options.config ?? {})
    this.logger = options.logger ?? console
    this.registry = new Registry(() => [...(this.#ctx?.stores.stores.keys() ?? [])])
    this.authenticate = options.authenticate ?? (options.jwt ? createJwtAuthenticator(options.jwt) : undefined)
    this.#observe = fanOut(options.instrumentation === undefined ? [] : [options.instrumentation].flat())
    this.resizer = new Resizer({
      observe: this.#observe,
      maxInputPixels: this.config.resize.maxInputPixels,
      maxVariants: this.config.resize.maxVariants,
      concurrency: this.config.resize.concurrency,
      queue: this.config.resize.queue,
      memoryTtl: this.config.resize.memoryTtl,
      memoryBytes: this.config.resize.memoryBytes,
      onUnstored: (key, err) => this.logger.warn(`attach-storage: variant ${key} was served but could not be stored`, err),
    })
    this.#events = new EventHub(this.logger)
    for (const [event, hook] of Object.entries(options.on ?? {})) {
      if (hook) this.on(event as keyof AttachEvents, hook as AttachEventHook<keyof AttachEvents>)
    }
  }

  /** Registers an event hook; returns a function that removes it. */
  on<E extends keyof AttachEvents>(event: E, hook: AttachEventHook<E>): () => void {
    return this.#events.on(event, hook)
  }

  /**
   * Resolves once this process runs no named-variant job: none waiting or running in the in-process
   * queue, none running here on pg-boss (for shutdown and tests).
   */
  async variantJobsIdle(): Promise<void> {
    await this.#c.variantJobs?.idle()
  }

  /** Resolves once every hook called so far has finished (for shutdown and tests). */
  drainEvents(): Promise<void> {
    return this.#events.drain()
  }

  /** Initialises stores, database and registry, then runs the registrar. Idempotent. */
  init(): Promise<void> {
    this.#init ??= this.#doInit()
    return this.#init
  }

  async #doInit(): Promise<void> {
    const o = this.#options
    const config = this.config
    const observe = this.#observe
    const tracer = o.tracing === false ? undefined : tracerIfInstalled()
    const stores = instrumentStores(await createStores(config, o), observe, tracer)
    let db = o.db
    try {
      if (!db) {
        const c = config.db
        if (c.type === 'sqlite') db = await openDatabase({ type: 'sqlite', file: c.file ?? join(stores.baseDir, 'attach.db') })
        else {
          if (!c.url) throw configError(`attach.db.url is required for db.type ${c.type}`)
          db = await openDatabase({ type: c.type, url: c.url })
        }
        this.#ownsDb = true
      }
      await migrateAttachSchema(db)
    } catch (err) {
      if (this.#ownsDb) await db?.destroy().catch(() => undefined)
      await closeStores([...stores.stores.values(), stores.tmpStore])
      throw err
    }
    // Built in one step: from here on every use case has all it needs.
    const now = o.now ?? (() => new Date())
    this.#ctx = {
      config,
      registry: this.registry,
      logger: this.logger,
      now,
      repo: new AttachRepository(db),
      stores,
      resizer: this.resizer,
      previews: previewSetup(config.previews, config.resize.maxInputPixels, this.logger),
      signer: config.signing.secret ? new UrlSigner(config.signing.secret, config.signing.ttl, now) : undefined,
      events: this.#events,
      zipSlots: { running: 0 },
      observe,
      tracer,
      testPause: o.testPause,
      variantJobs: undefined,
      store(name: string): Store {
        const s = stores.stores.get(name)
        if (!s) throw configError(`Store "${name}" is not declared`)
        return s
      },
    }
    this.registry.markReady()
    for (const [name, d] of Object.entries(config.domains)) {
      this.registry.registerDomain(name, { store: d.store ?? config.defaultStore, dateField: d.dateField, mayChange: d.mayChange })
      for (const [cat, c] of Object.entries(d.categories)) {
        this.registry.registerCategory(name, cat, {
          filters: c.filters,
          secureAccess: c.secureAccess,
          sizes: c.sizes,
          allowRedirect: c.allowRedirect,
          variants: c.variants,
          stripMetadata: c.stripMetadata,
          scan: c.scan,
        })
      }
    }
    await o.registrar?.(this.registry, this)
    // Editor images land in domain `editor` as direct uploads, images only unless the host says otherwise.
    if (!this.registry.domains().some((d) => d.name === uploads.EDITOR_DOMAIN)) {
      this.registry.registerDomain(uploads.EDITOR_DOMAIN, { store: config.defaultStore })
      this.registry.registerCategory(uploads.EDITOR_DOMAIN, 'default', { filters: ['image'] })
    }
    if (o.backgroundWork !== false) this.#ctx.variantJobs = await startVariantJobs(this.#ctx, db)
  }

  /** The context of the use cases; 503 `not-ready` before {@link init} has built it. */
  get #c(): ServiceContext {
    if (!this.#ctx) {
      throw new AttachStorageError('not-ready', 'The attach storage service has not initialised: await storage.init()', {
        status: 503,
      })
    }
    return this.#ctx
  }

  /** The record repository (after init). */
  get repository(): AttachRepository {
    return this.#c.repo
  }

  /** A declared store by name. */
  store(name: string): Store {
    return this.#c.store(name)
  }

  /** The store holding temporary files. */
  get tmpStore(): Store {
    return this.#c.stores.tmpStore
  }

  /** Closes the database (when opened by the service) and every store. */
  async close(): Promise<void> {
    this.#closing = true
    if (!this.#init) return
    await this.#init.catch(() => undefined)
    await this.drainEvents()
    // Variants answered already and still being written finish first.
    await this.resizer.settled()
    const ctx = this.#ctx
    if (!ctx) return
    await ctx.variantJobs?.stop()
    if (this.#ownsDb) await ctx.repo.close()
    await closeStores([...ctx.stores.stores.values(), ctx.stores.tmpStore])
  }

  /**
   * Streams one uploaded file into the temporary area. Nothing is checked yet; call
   * {@link completeTemporaryUpload} or {@link completeDirectUpload}, or {@link discardReceived}.
   */
  receiveFile(...args: Args<typeof uploads.receiveFile>) {
    return uploads.receiveFile(this.#c, ...args)
  }

  /** Removes received files (after a failed request). */
  discardReceived(...args: Args<typeof uploads.discardReceived>) {
    return uploads.discardReceived(this.#c, ...args)
  }

  /**
   * Parses a request's `filters` object: keys of registered request filters act (adding to the
   * category's chain); others are ignored with one warning.
   */
  parseRequestFilters(...args: Args<typeof uploads.parseRequestFilters>) {
    return uploads.parseRequestFilters(this.#c, ...args)
  }

  /**
   * Step 1 of the two-step upload: runs the filter chain on received files and keeps the accepted ones in
   * the temporary area. Rejected files are removed and answered with `error`.
   */
  completeTemporaryUpload(...args: Args<typeof uploads.completeTemporaryUpload>) {
    return uploads.completeTemporaryUpload(this.#c, ...args)
  }

  /**
   * Direct upload: filters, then the file goes straight to its final place
   * `/{refDomain}/{yyyy}/{MM}/_/{refCategory}/`; no record is made.
   */
  completeDirectUpload(...args: Args<typeof uploads.completeDirectUpload>) {
    return uploads.completeDirectUpload(this.#c, ...args)
  }

  /**
   * Rich-text editor upload: a direct upload into domain `editor` (category `default` unless given),
   * through that category's filters (images only by default).
   */
  completeEditorUpload(...args: Args<typeof uploads.completeEditorUpload>) {
    return uploads.completeEditorUpload(this.#c, ...args)
  }

  /**
   * Confirmed save of an AttachBag for `(refDomain, refKey)`, files placed by `date` (call time by
   * default). Entries are independent: every failure is collected, the successes stay saved, and a
   * partial failure throws `attach-save-failure` (500) with `failures`; resending only those completes
   * the save. Resolves with the reference's records of the bag's categories, in `sort` order.
   */
  commitBag(...args: Args<typeof commit.commitBag>) {
    return commit.commitBag(this.#c, ...args)
  }

  /**
   * Commits the `attachContainer` of a host entity save, in-process. Files are placed by `date` when
   * given (an explicit date wins), else by the entity's creation date-time (the domain's `dateField`,
   * default `createdDt`), else now; the month is taken in `timeZone`. Errors (a partial failure included) reach the caller.
   *
   * With `trx` (the host's tables in this service's database): every statement runs on the host's
   * transaction, so the entity's row and the records commit or roll back together; the save is all or
   * nothing, and a rollback leaves every temporary file committable. Best run in {@link transaction}.
   *
   * @example
   * const post = await storage.transaction(async (trx) => {
   *   const post = await trx.insertInto('board').values({...}).returningAll().executeTakeFirstOrThrow()
   *   await storage.commitAttachContainer({ refKey: post.id, attachContainer: body.attachContainer, entity: post, user, trx })
   *   return post
   * })
   */
  commitAttachContainer(...args: Args<typeof commit.commitAttachContainer>) {
    return commit.commitAttachContainer(this.#c, ...args)
  }

  /**
   * Says, changing nothing, whether {@link commitAttachContainer} with the same input (no `trx`) would
   * succeed now, and why not: `{ok: false, code, status, message, failureCount, failures}` with the
   * commit's codes and reasons. For hosts whose tables are in another database: check, then insert,
   * then commit.
   */
  checkAttachContainer(...args: Args<typeof commitCheck.checkAttachContainer>) {
    return commitCheck.checkAttachContainer(this.#c, ...args)
  }

  /**
   * Runs `fn` in a transaction of this service's database (MySQL at READ COMMITTED) for the host's own
   * statements and `commitAttachContainer({..., trx})`. After the commit the committed temporary files
   * and the files of deleted records are removed, then the 'saved' events fire and the named variants
   * are queued; after a rollback the copies no row holds are removed (the temporary files stay
   * committable). Resolves with `fn`'s result; rejects with its error.
   */
  transaction<T>(fn: (trx: Transaction<any>) => Promise<T>): Promise<T> {
    return hostTransaction.runTransaction(this.#c, fn)
  }

  /**
   * The AttachBag of a reference: `{refDomain, <category>: records[]}` in `sort` order, every registered
   * category of the domain present (or only `category` when given), after `filters`.
   *
   * **Pass `request`** (the caller's Request, or an access context from `accessOf()`): without it the
   * lookup is anonymous, and every record of a category with a secure-access function is silently
   * left out of the answer.
   *
   * @example
   * const bag = await storage.lookup('board', String(post.id), { request })
   * const images = await storage.lookup('board', id, { category: 'images', filters: { ext: 'png' }, request })
   * images.images // AttachmentView[]
   */
  lookup<C extends string = string>(refDomain: string, refKey: string, options?: LookupOptions<C>): Promise<AttachBag<C>>
  /**
   * @deprecated Positional form: use `lookup(refDomain, refKey, { category, filters, request })`. As
   * there, without `request` every record of a guarded category is left out.
   */
  lookup(
    refDomain: string,
    refKey: string,
    refCategory?: string,
    filters?: LookupFilters,
    request?: Request | AccessContext | null,
  ): Promise<AttachBag>
  async lookup(
    refDomain: string,
    refKey: string,
    third?: LookupOptions | string,
    filters: LookupFilters = {},
    request: Request | AccessContext | null = null,
  ): Promise<AttachBag> {
    const o = typeof third === 'object' && third !== null ? records.lookupOptions(third) : { category: third, filters, request }
    return records.lookup(this.#c, { refDomain, refKey, refCategory: o.category, filters: o.filters ?? {} }, records.accessFrom(o.request))
  }

  /**
   * The number of attachments of one reference category that the caller may read. **Pass `request`**
   * (or an access context): without it, a guarded category counts 0.
   */
  count(input: { refDomain: string; refKey: string; refCategory: string }, request: Request | AccessContext | null = null) {
    return records.count(this.#c, input, records.accessFrom(request))
  }

  /**
   * The conditional list: records of several references of a domain, ordered by refKey, refCategory,
   * sort, following the list and pagination convention; records the caller may not read are left out
   * (all of a guarded category's when no `request` or access context is given).
   */
  listByReferences(input: records.ReferencesListInput, request: Request | AccessContext | null = null) {
    return records.listByReferences(this.#c, input, records.accessFrom(request))
  }

  /**
   * The real address of the `index`-th (in `sort` order) attachment of a reference category. A guarded
   * category's needs the caller's `request` (or access context): without it, 403 `forbidden`.
   */
  directUrl(input: Parameters<typeof records.directUrl>[1], request: Request | AccessContext | null = null) {
    return records.directUrl(this.#c, input, records.accessFrom(request))
  }

  /** `{cdnUrl, domains: {<domain>: {store, categories}}}`. */
  describe() {
    return records.describe(this.#c)
  }

  /**
   * PUT `/attach/`: updates `displayName`, `ext`, `fmetaValue` and `sort` of the listed records, all or
   * nothing, only when the caller may change every one of them. Other fields are never written.
   */
  update(...args: Args<typeof records.update>) {
    return records.update(this.#c, ...args)
  }

  /** POST `/attach`: permanently deletes the listed records (and files no other record uses). */
  remove(...args: Args<typeof records.remove>) {
    return records.remove(this.#c, ...args)
  }

  /** Runs a category's secure-access function; a throw counts as a refusal. No function allows. */
  checkAccess(...args: Args<typeof access.checkAccess>) {
    return access.checkAccess(this.#c, ...args)
  }

  /** Resolves a saved attachment by id, checking the category's secure-access function (or a signed URL). */
  resolveById(...args: Args<typeof serving.resolveById>) {
    return serving.resolveById(this.#c, ...args)
  }

  /** Resolves the `idx`-th attachment of a reference (after `ext`/`extAlt`/`fmetaValue`). */
  resolveByReference(...args: Args<typeof serving.resolveByReference>) {
    return serving.resolveByReference(this.#c, ...args)
  }

  /** Resolves a temporary file for preview (synthetic file description; no resizing). */
  resolveTemporary(...args: Args<typeof serving.resolveTemporary>) {
    return serving.resolveTemporary(this.#c, ...args)
  }

  /** Resolves a directly uploaded file by its `path` (synthetic file description; no resizing). */
  resolveDirect(...args: Args<typeof serving.resolveDirect>) {
    return serving.resolveDirect(this.#c, ...args)
  }

  /** Resolves `/editor/image/{category}/{yyyy}/{MM}/{savedName}` (secure-access checked like direct files). */
  resolveEditorImage(...args: Args<typeof serving.resolveEditorImage>) {
    return serving.resolveEditorImage(this.#c, ...args)
  }

  /**
   * A ZIP of several attachments, streamed: `{title?, ids}`. Files missing or refused by their category's
   * secure-access function are skipped; when every one fails the answer is 404.
   */
  zip(...args: Args<typeof zipDownload.zip>): Promise<{ fileName: string; stream: Readable }> {
    return zipDownload.zip(this.#c, ...args)
  }

  /**
   * Removes expired temporary files (older than `tmp-ttl`), partial files a crash left, and retries the
   * physical deletion of files whose last record went (or that were never attached). Safe to run on
   * several instances at once; within one service a call made while a sweep runs answers that sweep.
   */
  sweep(): Promise<housekeeping.SweepResult> {
    this.#sweeping ??= housekeeping
      .sweep(this.#c)
      .then((result) => {
        const { failures: _failures, interrupted: _interrupted, ...removed } = result
        this.#observe.sweep(removed)
        return result
      })
      .finally(() => {
        this.#sweeping = undefined
      })
    return this.#sweeping
  }

  /**
   * Whether the database and every store answer now (each within `timeoutMs`, default 2 s): what a
   * readiness probe asks (`createHealthHandlers`). Throws `not-ready` once {@link close} was called.
   */
  async readiness(options: { timeoutMs?: number } = {}): Promise<Readiness> {
    if (this.#closing) throw new AttachStorageError('not-ready', 'The service is closing', { status: 503 })
    return checkReadiness(this.#c, options)
  }
}

/** Creates and initialises the service: the configuration is validated and every store is ready. */
export async function createAttachStorage(options: AttachStorageOptions = {}): Promise<AttachStorage> {
  const storage = new AttachStorage(options)
  try {
    await storage.init()
  } catch (err) {
    await storage.close().catch(() => undefined)
    throw err
  }
  return storage
}
