import { rename } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import type { Readable } from 'node:stream'
import { sql, type Kysely } from 'kysely'
import { parseAttachConfig, type AttachConfigInput, type AttachConfigParsed } from '../config/schema.js'
import { AttachStorageError, badRequest, configError, forbidden, notFound } from '../errors.js'
import type { FileProbe } from '../filters/filters.js'
import { checkAllowedSize, isResizable, Resizer, variantKey, variantPrefix, type ResizeRequest } from '../media/resize.js'
import { extensionOf, SNIFF_BYTES, sniffType } from '../media/sniff.js'
import { readAll } from '../stores/read-all.js'
import { createZipStream, isCompressed, uniqueNames, type ZipSource } from '../media/zip.js'
import type { AttachmentRecord, AttachmentView, BlobRecord } from '../model.js'
import { Registry, type RegisteredCategory, type RegisteredDomain } from '../registry/registry.js'
import { AttachRepository, mapRecord } from '../repository/attach-repository.js'
import { LIST_HEADERS, parseListRequest, runList, type ListProvider, type ListRequest, type ListResult } from '../list/list-query.js'
import { openDatabase } from '../repository/database.js'
import { migrateAttachSchema } from '../repository/migrations.js'
import { mkdirDurable, syncDir } from '../stores/local-store.js'
import type { Store, StoreFactory } from '../stores/store.js'
import { createJwtAuthenticator, type JwtOptions } from './auth.js'
import { UrlSigner } from './signing.js'
import { ingest } from './ingest.js'
import {
  checkRefKey,
  directSavedDir,
  generateSavedName,
  parseDirectPath,
  parseRegularSavedDir,
  regularSavedDir,
  SAVED_NAME,
  storeKey,
} from './layout.js'
import { createStores, type StoreSet } from './stores.js'
import type {
  AttachBag,
  AttachBagEntry,
  Authenticate,
  AuthUser,
  FileDescription,
  Logger,
  SaveFailure,
} from './types.js'

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

/** Options of {@link createAttachStorage}. */
export interface AttachStorageOptions {
  /** The `attach` settings tree, kebab-case or camelCase (see docs/configuration.md). */
  config?: AttachConfigInput | Record<string, unknown>
  /** A Kysely instance of the host's database; default: one opened from `config.db`. */
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
  testPause?: (step: 'reserved' | 'moved' | 'recorded' | 'done', request: Request | null) => void | Promise<void>
  /** Event hooks, the same as calling `storage.on()` for each. */
  on?: { [E in keyof AttachEvents]?: AttachEventHook<E> }
}

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

/** Metadata kept beside a temporary file. */
interface TmpMeta {
  name: string
  displayName: string
  size: number
  type: string
  sha256: string
  refDomain: string
  refCategory: string
  createdBy: string | number | null
  createdDt: string
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
}

const TMP_PREFIX = '_tmp/'
/** The domain of rich-text editor uploads. */
export const EDITOR_DOMAIN = 'editor'
const tmpKey = (name: string) => TMP_PREFIX + name
const tmpMetaKey = (name: string) => `${TMP_PREFIX}${name}.meta.json`
const DISPLAY_NAME_MAX = 1024

/** Cleans a client's file name for display: no path, no control characters, bounded length. */
export function cleanDisplayName(name: unknown, fallback = 'file'): string {
  const base = (typeof name === 'string' ? name : '').split(/[\\/]/).pop() ?? ''
  // Lone surrogates become U+FFFD, and the cut never splits a pair: the name stays valid UTF-16 (and UTF-8).
  // eslint-disable-next-line no-control-regex
  const clean = wellFormed(base.replace(/[\u0000-\u001f\u007f]/g, '').trim(), DISPLAY_NAME_MAX)
  return clean || fallback
}

/**
 * A string cut to `max` UTF-16 units that stays valid UTF-16 (and so UTF-8 in every database): lone
 * surrogates become U+FFFD and the cut never splits a pair.
 */
function wellFormed(s: string, max: number): string {
  return s.replace(/\p{Surrogate}/gu, '\ufffd').slice(0, max).replace(/[\ud800-\udbff]$/, '')
}

/** `ext` / `fmetaValue` of a client: null stays null, anything else becomes well-formed text of at most 1024 units. */
function cleanText(value: unknown): string | null {
  return value === undefined || value === null ? null : wellFormed(String(value), 1024)
}

const sameUser = (a: unknown, b: unknown) => a !== null && a !== undefined && b !== null && b !== undefined && String(a) === String(b)

/**
 * The attachment service: uploads, confirmed saves, lookups, updates, deletes and what the binary group
 * serves. Create it with {@link createAttachStorage}; mount its handlers with `createAttachHandler()`.
 */
export class AttachStorage {
  readonly config: AttachConfigParsed
  readonly registry: Registry
  readonly logger: Logger
  readonly authenticate: Authenticate | undefined
  readonly #options: AttachStorageOptions
  readonly #now: () => Date
  #stores: StoreSet | undefined
  #repo: AttachRepository | undefined
  #ownsDb = false
  #db: Kysely<any> | undefined
  #init: Promise<void> | undefined
  /** Makes and caches resized variants. */
  readonly resizer: Resizer
  /** ZIP downloads streaming now (bounded by `zip.concurrency`). */
  #zipsRunning = 0
  /** Signs view URLs of guarded records (when `signing.secret` is set). */
  readonly #signer: UrlSigner | undefined
  readonly #hooks = new Map<keyof AttachEvents, Set<AttachEventHook<any>>>()
  readonly #pendingHooks = new Set<Promise<void>>()

  constructor(options: AttachStorageOptions = {}) {
    this.#options = options
    this.config = parseAttachConfig(options.config ?? {})
    this.logger = options.logger ?? console
    this.#now = options.now ?? (() => new Date())
    this.registry = new Registry(() => [...(this.#stores?.stores.keys() ?? [])])
    this.authenticate = options.authenticate ?? (options.jwt ? createJwtAuthenticator(options.jwt) : undefined)
    this.resizer = new Resizer({
      maxInputPixels: this.config.resize.maxInputPixels,
      maxVariants: this.config.resize.maxVariants,
      concurrency: this.config.resize.concurrency,
      queue: this.config.resize.queue,
    })
    const signing = this.config.signing
    this.#signer = signing.secret ? new UrlSigner(signing.secret, signing.ttl, this.#now) : undefined
    for (const [event, hook] of Object.entries(options.on ?? {})) {
      if (hook) this.on(event as keyof AttachEvents, hook as AttachEventHook<keyof AttachEvents>)
    }
  }

  /** Registers an event hook; returns a function that removes it. */
  on<E extends keyof AttachEvents>(event: E, hook: AttachEventHook<E>): () => void {
    let set = this.#hooks.get(event)
    if (!set) this.#hooks.set(event, (set = new Set()))
    set.add(hook)
    return () => set.delete(hook)
  }

  #emit<E extends keyof AttachEvents>(event: E, payload: AttachEvents[E]): void {
    for (const hook of this.#hooks.get(event) ?? []) {
      const p: Promise<void> = Promise.resolve()
        .then(() => hook(payload))
        .catch((err) => this.logger.error(`attach-storage: a "${event}" hook failed`, err))
        .finally(() => this.#pendingHooks.delete(p))
      this.#pendingHooks.add(p)
    }
  }

  /** Resolves once every hook called so far has finished (for shutdown and tests). */
  async drainEvents(): Promise<void> {
    while (this.#pendingHooks.size) await Promise.all([...this.#pendingHooks])
  }

  /** Initialises stores, database and registry, then runs the registrar. Idempotent. */
  init(): Promise<void> {
    this.#init ??= this.#doInit()
    return this.#init
  }

  async #doInit(): Promise<void> {
    const o = this.#options
    this.#stores = await createStores(this.config, o)
    let db = o.db
    if (!db) {
      const c = this.config.db
      if (c.type === 'sqlite') db = await openDatabase({ type: 'sqlite', file: c.file ?? join(this.#stores.baseDir, 'attach.db') })
      else {
        if (!c.url) throw configError(`attach.db.url is required for db.type ${c.type}`)
        db = await openDatabase({ type: c.type, url: c.url })
      }
      this.#ownsDb = true
    }
    await migrateAttachSchema(db)
    this.#db = db
    this.#repo = new AttachRepository(db)
    this.registry.markReady()
    for (const [name, d] of Object.entries(this.config.domains)) {
      this.registry.registerDomain(name, { store: d.store ?? this.config.defaultStore, dateField: d.dateField, mayChange: d.mayChange })
      for (const [cat, c] of Object.entries(d.categories)) {
        this.registry.registerCategory(name, cat, { filters: c.filters, secureAccess: c.secureAccess, sizes: c.sizes })
      }
    }
    await o.registrar?.(this.registry, this)
    // Editor images land in domain `editor` as direct uploads, images only unless the host says otherwise.
    if (!this.registry.domains().some((d) => d.name === EDITOR_DOMAIN)) {
      this.registry.registerDomain(EDITOR_DOMAIN, { store: this.config.defaultStore })
      this.registry.registerCategory(EDITOR_DOMAIN, 'default', { filters: ['image'] })
    }
  }

  get #s(): StoreSet {
    if (!this.#stores || !this.#repo) {
      throw new AttachStorageError('not-ready', 'The attach storage service has not initialised: await storage.init()', {
        status: 503,
      })
    }
    return this.#stores
  }

  /** The record repository (after init). */
  get repository(): AttachRepository {
    this.#s
    return this.#repo!
  }

  /** A declared store by name. */
  store(name: string): Store {
    const s = this.#s.stores.get(name)
    if (!s) throw configError(`Store "${name}" is not declared`)
    return s
  }

  /** The store holding temporary files. */
  get tmpStore(): Store {
    return this.#s.tmpStore
  }

  /** Closes the database (when opened by the service) and every store. */
  async close(): Promise<void> {
    if (!this.#init) return
    await this.#init.catch(() => undefined)
    await this.drainEvents()
    if (this.#ownsDb) await this.#repo?.close()
    const closing = new Set<Store>([...(this.#stores?.stores.values() ?? []), ...(this.#stores ? [this.#stores.tmpStore] : [])])
    await Promise.all([...closing].map((s) => s.close().catch(() => undefined)))
  }

  // ---------------------------------------------------------------- receiving files

  /**
   * Streams one uploaded file into the temporary area. Nothing is checked yet; call
   * {@link completeTemporaryUpload} or {@link completeDirectUpload}, or {@link discardReceived}.
   */
  async receiveFile(
    source: Readable,
    fileName: string,
    options: { maxSize?: number; signal?: AbortSignal } = {},
  ): Promise<ReceivedFile> {
    const displayName = cleanDisplayName(fileName)
    const extension = extensionOf(displayName)
    const name = generateSavedName(extension)
    const r = await ingest(this.#s.tmpStore, tmpKey(name), source, {
      maxSize: options.maxSize ?? this.config.upload.maxFileSize,
      signal: options.signal,
    })
    return { name, displayName, extension, ...r }
  }

  /** Removes received files (after a failed request). */
  async discardReceived(files: ReceivedFile[]): Promise<void> {
    await Promise.all(
      files.flatMap((f) => [this.#s.tmpStore.delete(tmpKey(f.name)), this.#s.tmpStore.delete(tmpMetaKey(f.name))]),
    ).catch((err) => this.logger.warn('attach-storage: could not remove temporary files', err))
  }

  #probe(file: ReceivedFile, type: string): FileProbe {
    return {
      displayName: file.displayName,
      extension: file.extension,
      size: file.size,
      type,
      sha256: file.sha256,
      head: file.head,
      open: () => this.#s.tmpStore.get(tmpKey(file.name)),
    }
  }

  /**
   * Parses a request's `filters` object: keys of registered request filters act (adding to the
   * category's chain); others are ignored with a warning.
   */
  parseRequestFilters(raw: unknown): Array<{ name: string; options: Record<string, unknown> }> {
    if (raw === undefined || raw === null || raw === '') return []
    let obj = raw
    if (typeof raw === 'string') {
      try {
        obj = JSON.parse(raw)
      } catch {
        throw badRequest('filters must be a JSON object')
      }
    }
    if (!obj || typeof obj !== 'object' || Array.isArray(obj)) throw badRequest('filters must be a JSON object')
    const out: Array<{ name: string; options: Record<string, unknown> }> = []
    const ignored: string[] = []
    for (const [name, options] of Object.entries(obj as Record<string, unknown>)) {
      if (!this.registry.requestFilter(name)) {
        ignored.push(name)
        continue
      }
      if (options === null || typeof options !== 'object' || Array.isArray(options)) {
        throw badRequest(`filters.${name} must be an object of options`)
      }
      out.push({ name, options: options as Record<string, unknown> })
    }
    if (ignored.length) {
      // One line per request, whatever the client sent: names are quoted (JSON escapes control characters
      // and newlines), cut to 64 characters, and at most 10 are named.
      const shown = ignored.slice(0, 10).map((n) => JSON.stringify(n.length > 64 ? n.slice(0, 64) + '…' : n))
      const more = ignored.length > shown.length ? ` and ${ignored.length - shown.length} more` : ''
      this.logger.warn(`attach-storage: request filters not registered, ignored: ${shown.join(', ')}${more}`)
    }
    return out
  }

  async #runFilters(
    category: RegisteredCategory,
    requestFilters: Array<{ name: string; options: Record<string, unknown> }>,
    probe: FileProbe,
  ): Promise<{ code: string; message: string } | undefined> {
    const chain = [
      ...category.filters,
      ...requestFilters.map((f) => ({ filter: this.registry.requestFilter(f.name)!, options: f.options })),
    ]
    for (const { filter, options } of chain) {
      let verdict
      try {
        verdict = await filter.check(probe, options)
      } catch (err) {
        this.logger.error(`attach-storage: filter "${filter.name}" failed`, err)
        verdict = { code: filter.name, message: `${probe.displayName} could not be checked` }
      }
      if (verdict) return { code: String(verdict.code), message: String(verdict.message) }
    }
    return undefined
  }

  /**
   * Step 1 of the two-step upload: runs the filter chain on received files and keeps the accepted ones in
   * the temporary area. Rejected files are removed and answered with `error`.
   */
  async completeTemporaryUpload(
    files: ReceivedFile[],
    input: { refDomain: unknown; refCategory?: unknown; filters?: unknown; user: AuthUser | null },
  ): Promise<TemporaryItem[]> {
    try {
      const { category, refDomain, refCategory, requestFilters } = this.#uploadTarget(input)
      const items: TemporaryItem[] = []
      for (const f of files) {
        const type = await sniffType(f.head, f.displayName)
        const error = await this.#runFilters(category, requestFilters, this.#probe(f, type))
        if (error) {
          await this.discardReceived([f])
          items.push({ displayName: f.displayName, size: f.size, error })
          continue
        }
        const meta: TmpMeta = {
          name: f.name,
          displayName: f.displayName,
          size: f.size,
          type,
          sha256: f.sha256,
          refDomain,
          refCategory,
          createdBy: input.user?.id ?? null,
          createdDt: this.#now().toISOString(),
        }
        await this.#s.tmpStore.put(tmpMetaKey(f.name), Buffer.from(JSON.stringify(meta)), { contentType: 'application/json' })
        this.#emit('uploaded', {
          kind: 'temporary',
          refDomain,
          refCategory,
          name: f.name,
          savedDir: null,
          displayName: f.displayName,
          size: f.size,
          type,
          sha256: f.sha256,
          user: input.user,
        })
        items.push({
          name: f.name,
          displayName: f.displayName,
          size: f.size,
          type,
          url: null,
          thumbnailUrl: null,
          deleteUrl: null,
          deleteType: 'DELETE',
        })
      }
      return items
    } catch (err) {
      await this.discardReceived(files)
      throw err
    }
  }

  #uploadTarget(input: { refDomain: unknown; refCategory?: unknown; filters?: unknown }) {
    if (typeof input.refDomain !== 'string' || input.refDomain === '') throw badRequest('refDomain is required')
    const refDomain = input.refDomain
    const refCategory =
      input.refCategory === undefined || input.refCategory === '' ? 'default' : String(input.refCategory)
    const category = this.registry.category(refDomain, refCategory)
    const requestFilters = this.parseRequestFilters(input.filters)
    return { domain: this.registry.domain(refDomain), category, refDomain, refCategory, requestFilters }
  }

  /**
   * Direct upload: filters, then the file goes straight to its final place
   * `/{refDomain}/{yyyy}/{MM}/_/{refCategory}/`; no record is made.
   */
  async completeDirectUpload(
    files: ReceivedFile[],
    input: { refDomain: unknown; refCategory?: unknown; filters?: unknown; user: AuthUser | null },
    kind: 'direct' | 'editor' = 'direct',
  ): Promise<DirectItem[]> {
    const done: Array<{ store: Store; key: string }> = []
    try {
      const { domain, category, refDomain, refCategory, requestFilters } = this.#uploadTarget(input)
      const store = this.store(domain.store)
      const savedDir = directSavedDir(refDomain, refCategory, this.#now(), this.config.timeZone)
      const items: DirectItem[] = []
      for (const f of files) {
        const type = await sniffType(f.head, f.displayName)
        const error = await this.#runFilters(category, requestFilters, this.#probe(f, type))
        if (error) {
          await this.discardReceived([f])
          items.push({ displayName: f.displayName, size: f.size, error })
          continue
        }
        const key = storeKey(savedDir, f.name)
        await this.#transfer(this.#s.tmpStore, tmpKey(f.name), store, key, type)
        done.push({ store, key })
        this.#emit('uploaded', {
          kind,
          refDomain,
          refCategory,
          name: f.name,
          savedDir,
          displayName: f.displayName,
          size: f.size,
          type,
          sha256: f.sha256,
          user: input.user,
        })
        items.push({
          name: f.name,
          savedDir,
          url:
            kind === 'editor'
              ? this.#editorUrl(domain.store, refCategory, savedDir, f.name)
              : this.#directUrl(domain.store, refDomain, refCategory, savedDir, f.name),
          displayName: f.displayName,
          size: f.size,
          type,
        })
      }
      return items
    } catch (err) {
      await this.discardReceived(files)
      await Promise.all(done.map((d) => d.store.delete(d.key).catch(() => undefined)))
      throw err
    }
  }

  /**
   * Moves a file between stores: a rename on one local file system, else stream copy + delete. Durable
   * once it resolves: a rename is followed by an fsync of both directories (a put fsyncs itself).
   */
  async #transfer(from: Store, fromKey: string, to: Store, toKey: string, contentType?: string): Promise<void> {
    if (from === to) return to.move(fromKey, toKey)
    if (from.localPath && to.localPath && from.type === 'local' && to.type === 'local') {
      const src = from.localPath(fromKey)
      const dst = to.localPath(toKey)
      try {
        await mkdirDurable(dirname(dst))
        await rename(src, dst)
        await syncDir(dirname(dst))
        await syncDir(dirname(src))
        return
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code
        if (code === 'ENOENT') throw notFound(`No stored file ${fromKey}`)
        if (code !== 'EXDEV') throw err
      }
    }
    const { size } = await from.stat(fromKey)
    await to.put(toKey, await from.get(fromKey), { contentType, size })
    await from.delete(fromKey)
  }

  // ---------------------------------------------------------------- confirmed save

  /**
   * Confirmed save of an AttachBag for `(refDomain, refKey)`, files placed by `date` (call time by
   * default). Entries are independent: every failure is collected, the successes stay saved, and a
   * partial failure throws `attach-save-failure` (500) with `failures`; resending only those completes
   * the save. Resolves with the reference's records of the bag's categories, in `sort` order.
   */
  async commitBag(
    refDomainIn: unknown,
    refKeyIn: unknown,
    bag: unknown,
    options: { user: AuthUser | null; date?: Date; request?: Request },
  ): Promise<AttachmentView[]> {
    this.#s
    if (typeof refDomainIn !== 'string') throw badRequest('refDomain is required')
    const domain = this.registry.domain(refDomainIn)
    const refDomain = domain.name
    const refKey = checkRefKey(refKeyIn)
    if (!bag || typeof bag !== 'object' || Array.isArray(bag)) throw badRequest('The AttachBag must be a JSON object')
    const b = bag as AttachBag
    if (b.refDomain !== undefined && b.refDomain !== refDomain) {
      throw badRequest(`The AttachBag's refDomain "${String(b.refDomain)}" differs from "${refDomain}"`)
    }
    const categories: Array<[string, unknown[]]> = []
    for (const [key, value] of Object.entries(b)) {
      if (key === 'refDomain' || key === '_deleted') continue
      this.registry.category(refDomain, key)
      if (!Array.isArray(value)) throw badRequest(`AttachBag.${key} must be an array of file entries`)
      categories.push([key, value])
    }
    const deleted = b._deleted ?? []
    if (!Array.isArray(deleted)) throw badRequest('AttachBag._deleted must be an array of {id}')
    const request = options.request ?? null

    // Who may change this entity's attachments at all is the host's call.
    if (!(await this.#mayChangeEntity(domain, refKey, options.user, request))) {
      throw forbidden(`You may not change the attachments of ${refDomain}/${refKey}`)
    }
    // One rule for every record the bag touches (deletions and re-sorts), checked before anything changes.
    const touched = new Set<number>()
    for (const d of deleted) {
      const id = d && typeof d === 'object' ? Number((d as { id?: unknown }).id) : NaN
      if (Number.isSafeInteger(id) && id > 0) touched.add(id)
    }
    for (const [, entries] of categories) {
      for (const e of entries) {
        const id = e && typeof e === 'object' ? (e as AttachBagEntry).id : undefined
        if (id !== undefined && id !== null && Number.isSafeInteger(Number(id)) && Number(id) > 0) touched.add(Number(id))
      }
    }
    if (touched.size) {
      const records = await this.#repo!.findByIds([...touched])
      for (const r of records) {
        if (r.refDomain !== refDomain || r.refKey !== refKey) continue // an entry failure below; changes nothing
        if (!(await this.#mayChange(request, r, options.user))) throw forbidden(`You may not change attachment ${r.id}`)
      }
    }

    const date = options.date ?? this.#now()
    const failures: SaveFailure[] = []
    const fail = (refCategory: string, index: number, entry: unknown, reason: string, code: string) =>
      failures.push({
        code,
        refCategory,
        index,
        displayName:
          entry && typeof entry === 'object' && typeof (entry as AttachBagEntry).displayName === 'string'
            ? ((entry as AttachBagEntry).displayName as string)
            : '',
        reason,
      })

    // Deletions first, so that a bag may replace a file in one save.
    const delIds: number[] = []
    deleted.forEach((d, index) => {
      const id = d && typeof d === 'object' ? Number((d as { id?: unknown }).id) : NaN
      if (!Number.isSafeInteger(id) || id <= 0) fail('_deleted', index, d, 'id must be a positive integer', 'bad-request')
      else delIds.push(id)
    })
    if (delIds.length) {
      const found = await this.#repo!.findByIds(delIds)
      const mine = new Set(found.filter((r) => r.refDomain === refDomain && r.refKey === refKey).map((r) => r.id))
      deleted.forEach((d, index) => {
        const id = Number((d as { id?: unknown })?.id)
        if (Number.isSafeInteger(id) && id > 0 && !mine.has(id)) {
          fail('_deleted', index, d, `attachment ${id} does not belong to ${refDomain}/${refKey}`, 'not-found')
        }
      })
      await this.#deleteRecords([...mine])
    }

    const created: AttachmentRecord[] = []
    for (const [refCategory, entries] of categories) {
      for (let index = 0; index < entries.length; index++) {
        const entry = entries[index]
        try {
          const rec = await this.#commitEntry(entry, {
            refDomain,
            refKey,
            refCategory,
            sort: index,
            date,
            user: options.user,
            request,
          })
          if (rec) created.push(rec)
        } catch (err) {
          const reason =
            err instanceof AttachStorageError && err.status < 500 ? err.message : 'the file could not be saved; retry this entry'
          if (!(err instanceof AttachStorageError) || err.status >= 500) {
            this.logger.error(`attach-storage: saving ${refDomain}/${refKey}/${refCategory}[${index}] failed`, err)
          }
          fail(refCategory, index, entry, reason, err instanceof AttachStorageError && err.status < 500 ? err.code : 'internal-error')
        }
      }
    }
    if (created.length) this.#emit('saved', { refDomain, refKey, records: created, user: options.user })
    if (failures.length) {
      throw new AttachStorageError(
        'attach-save-failure',
        `${failures.length} of the attachments could not be saved; resend only the entries listed in failures`,
        { status: 500, details: { success: false, failures } },
      )
    }
    const all = await this.#repo!.listByReference(refDomain, refKey)
    const wanted = new Set(categories.map(([c]) => c))
    return (await this.#readableViews(all, request)).filter((v) => wanted.has(v.refCategory))
  }

  /** The domain's `mayChange` hook (none: any caller); a throw counts as a refusal. */
  async #mayChangeEntity(domain: RegisteredDomain, refKey: string, user: AuthUser | null, request: Request | null): Promise<boolean> {
    if (!domain.mayChange) return true
    try {
      return (await domain.mayChange(user, refKey, request)) === true
    } catch (err) {
      this.logger.warn(`attach-storage: mayChange of domain "${domain.name}" threw; refused`, err)
      return false
    }
  }

  async #commitEntry(
    entry: unknown,
    ctx: {
      refDomain: string
      refKey: string
      refCategory: string
      sort: number
      date: Date
      user: AuthUser | null
      request: Request | null
    },
  ): Promise<AttachmentRecord | undefined> {
    if (!entry || typeof entry !== 'object' || Array.isArray(entry)) throw badRequest('entry must be an object')
    const e = entry as AttachBagEntry
    const ext = cleanText(e.ext)
    const fmetaValue = cleanText(e.fmetaValue)
    if (e.id !== undefined && e.id !== null) {
      const id = Number(e.id)
      if (!Number.isSafeInteger(id) || id <= 0) throw badRequest('id must be a positive integer')
      const ok = await this.#repo!.updateSort(id, ctx, ctx.sort)
      if (!ok) throw badRequest(`attachment ${id} does not belong to ${ctx.refDomain}/${ctx.refKey}/${ctx.refCategory}`)
      return
    }
    if (typeof e.savedName !== 'string' || !SAVED_NAME.test(e.savedName)) {
      throw badRequest('savedName must be the name a temporary upload answered')
    }
    const savedName = e.savedName
    const domain = this.registry.domain(ctx.refDomain)
    const category = this.registry.category(ctx.refDomain, ctx.refCategory)
    const createdDt = this.#now().toISOString()
    const createdBy = ctx.user?.id ?? null

    if (e.savedDir !== undefined && e.savedDir !== null) {
      // Reuse of a stored file: a new record, no copy. The caller must be able to see that file.
      const source = parseRegularSavedDir(e.savedDir)
      if (!source) throw badRequest('savedDir is not the directory of a saved attachment')
      const sourceDomain = this.registry.domain(source.refDomain)
      const blob = await this.#repo!.findBlob(sourceDomain.store, e.savedDir as string, savedName)
      if (!blob || blob.refCount <= 0) throw notFound(`No saved file ${e.savedDir as string}${savedName}`)
      const holders = (await this.#repo!.listByReference(source.refDomain, source.refKey)).filter((r) => r.blobId === blob.id)
      const holder = holders[0]
      if (!holder) throw notFound(`No saved file ${e.savedDir as string}${savedName}`)
      if (!(await this.#mayRead(ctx.request, holder, ctx.user))) throw forbidden(`The file ${savedName} may not be reused here`)
      if (sourceDomain.store !== domain.store) throw badRequest('savedDir reuse across stores is not possible')
      // The target category's filters run on the stored bytes, as for a temporary file of another category.
      const reuseStore = this.store(blob.store)
      const reuseKey = storeKey(blob.savedDir, blob.savedName)
      await this.#refilter(category, { displayName: holder.displayName, size: blob.fileSize, type: blob.fileType, sha256: blob.sha256 }, reuseStore, reuseKey)
      const rec = await this.#repo!.createRecord(
        blob.id,
        {
          refDomain: ctx.refDomain,
          refKey: ctx.refKey,
          refCategory: ctx.refCategory,
          displayName: cleanDisplayName(e.displayName, holder.displayName),
          ext,
          fmetaValue,
          sort: ctx.sort,
          createdBy,
          createdDt,
        },
        { requireLive: true },
      )
      if (!rec) throw notFound(`The saved file ${savedName} was deleted meanwhile`)
      return rec
    }

    // From the temporary area. Each step leaves a state from which the retry of the same request
    // completes the save: the pending blob remembers the temporary name before the file moves, the record
    // is one transaction, and the sidecar goes last (docs/architecture.md, "The confirmed save").
    const tmp = this.#s.tmpStore
    const store = this.store(domain.store)
    const tmpFile = tmpKey(savedName)
    const sameUploader = (a: unknown, b: unknown) => ((a ?? null) === null ? (b ?? null) === null : sameUser(a, b))
    /** The record an earlier attempt made for this entry: same reference and category, same uploader. */
    const recordedBefore = async (uploader: unknown): Promise<AttachmentRecord | undefined> => {
      const live = new Set((await this.#repo!.findBlobsByTmpName(savedName)).filter((b) => b.refCount > 0).map((b) => b.id))
      if (!live.size) return undefined
      const records = await this.#repo!.listByReference(ctx.refDomain, ctx.refKey, ctx.refCategory)
      return records.find((r) => live.has(r.blobId) && sameUploader(r.createdBy, uploader))
    }
    const busy = () =>
      new AttachStorageError('conflict', `${savedName} is being saved by another request; retry this entry`, { status: 409 })
    const pause = async (step: 'reserved' | 'moved' | 'recorded' | 'done') => {
      await this.#options.testPause?.(step, ctx.request)
    }

    const meta = await this.#readTmpMeta(savedName, { withFile: false })
    if (!meta) {
      // No sidecar: expired, never uploaded, or saved. A save whose answer was lost (a crash after the
      // sidecar went) answers the record it made.
      const saved = await recordedBefore(createdBy)
      if (saved) return saved
      throw notFound(`${savedName} is not in the temporary area (expired, or saved already)`)
    }
    if (meta.refDomain !== ctx.refDomain) throw badRequest(`${savedName} was uploaded for another domain`)
    // A temporary file belongs to its uploader: nobody else commits it, and its record keeps them as createdBy.
    if (!sameUploader(meta.createdBy, createdBy)) throw forbidden(`${savedName} was uploaded by another user`)
    const uploader = meta.createdBy

    const earlier = await this.#repo!.findBlobsByTmpName(savedName)
    if (earlier.some((b) => b.refCount > 0)) {
      // Recorded before the sidecar could go: that record is the answer, never a second one.
      const saved = await recordedBefore(uploader)
      if (!saved) throw badRequest(`${savedName} is saved already`, 'saved-already')
      await tmp.delete(tmpMetaKey(savedName)).catch(() => undefined)
      return saved
    }
    // Pending blobs of interrupted attempts: one of this reference is resumed (whatever its month);
    // others are given up, their file going back to the temporary area first.
    let tmpThere = await tmp.exists(tmpFile)
    let blob: BlobRecord | undefined
    let placed = false
    for (const p of earlier) {
      const pStore = this.#s.stores.get(p.store)
      const pKey = storeKey(p.savedDir, p.savedName)
      const there = pStore ? await pStore.exists(pKey) : false
      const place = parseRegularSavedDir(p.savedDir)
      if (!blob && p.refCount === 0 && p.store === domain.store && place?.refDomain === ctx.refDomain && place.refKey === ctx.refKey) {
        blob = p
        placed = there && !tmpThere
        continue
      }
      if (p.refCount === 0 && !(await this.#repo!.retireBlob(p.id))) throw busy()
      if (there && pStore) {
        if (tmpThere) await pStore.delete(pKey)
        else {
          await this.#transfer(pStore, pKey, tmp, tmpFile, meta.type)
          tmpThere = true
        }
      }
      await this.#repo!.purgeBlob(p.id)
    }
    if (!placed && !tmpThere) throw notFound(`${savedName} is not in the temporary area (expired, or saved already)`)
    const savedDir = blob?.savedDir ?? regularSavedDir(ctx.refDomain, ctx.refKey, ctx.date, this.config.timeZone)
    const key = storeKey(savedDir, savedName)
    if (meta.refCategory !== ctx.refCategory) {
      // The target category's own filters must pass too; a lax category is no way around a strict one.
      const [from, fromKey] = placed ? [store, key] : [tmp, tmpFile]
      await this.#refilter(category, meta, from, fromKey)
    }
    if (blob) {
      if (!(await this.#repo!.touchPendingBlob(blob.id))) throw busy()
    } else {
      const existing = await this.#repo!.findBlob(domain.store, savedDir, savedName)
      if (existing && existing.refCount !== 0) throw badRequest(`${savedName} is saved already`, 'saved-already')
      if (existing && !(await this.#repo!.touchPendingBlob(existing.id, savedName))) throw busy()
      // The intent is remembered before anything moves: the pending blob names the temporary file.
      blob =
        existing ??
        (await this.#repo!.reserveBlob({
          store: domain.store,
          savedDir,
          savedName,
          fileSize: meta.size,
          fileType: meta.type,
          sha256: meta.sha256,
          createdDt,
          tmpName: savedName,
        }))
    }
    await pause('reserved')
    if (!placed) await this.#transfer(tmp, tmpFile, store, key, meta.type)
    await pause('moved')
    // A failure here leaves the file at its place under its pending blob: the retry records it.
    const rec = await this.#repo!.createRecord(
      blob.id,
      {
        refDomain: ctx.refDomain,
        refKey: ctx.refKey,
        refCategory: ctx.refCategory,
        displayName: cleanDisplayName(e.displayName, meta.displayName),
        ext,
        fmetaValue,
        sort: ctx.sort,
        createdBy: uploader,
        createdDt,
      },
      { requireLive: false, requirePending: true },
    )
    if (!rec) {
      // Another attempt recorded it first (its record is the answer), or the blob went meanwhile.
      const saved = await recordedBefore(uploader)
      if (saved) {
        await tmp.delete(tmpMetaKey(savedName)).catch(() => undefined)
        return saved
      }
      if (!(await this.#repo!.findBlobById(blob.id))) {
        // Nothing guards the file at its place any more: back to where the client left it.
        await this.#transfer(store, key, tmp, tmpFile, meta.type).catch((err) =>
          this.logger.error(`attach-storage: could not return ${savedName} to the temporary area`, err),
        )
      }
      throw busy()
    }
    await pause('recorded')
    await tmp.delete(tmpMetaKey(savedName)).catch(() => undefined)
    await pause('done')
    return rec
  }

  /**
   * Runs a category's own filter chain on a stored file (one moving into the category from another, or
   * reused through `savedDir`); a refusal throws a 400 with the filter's code.
   */
  async #refilter(
    category: RegisteredCategory,
    file: { displayName: string; size: number; type: string; sha256: string },
    store: Store,
    key: string,
  ): Promise<void> {
    const error = await this.#runFilters(category, [], {
      displayName: file.displayName,
      extension: extensionOf(file.displayName),
      size: file.size,
      type: file.type,
      sha256: file.sha256,
      head: await this.#readHead(store, key),
      open: () => store.get(key),
    })
    if (error) throw badRequest(`${error.code}: ${error.message}`, error.code)
  }

  async #readHead(store: Store, key: string): Promise<Uint8Array> {
    const s = await store.get(key, { start: 0, end: SNIFF_BYTES - 1 }).catch(() => undefined)
    return s ? readAll(s) : new Uint8Array()
  }

  /** The sidecar of a temporary file; undefined when it is missing, or (unless `withFile` is false) the file is. */
  async #readTmpMeta(savedName: string, options: { withFile?: boolean } = {}): Promise<TmpMeta | undefined> {
    const tmp = this.#s.tmpStore
    let stream: Readable
    try {
      stream = await tmp.get(tmpMetaKey(savedName))
    } catch (err) {
      if (err instanceof AttachStorageError && err.code === 'not-found') return undefined
      throw err
    }
    const meta = JSON.parse((await readAll(stream)).toString('utf8')) as TmpMeta
    if (options.withFile !== false && !(await tmp.exists(tmpKey(savedName)))) return undefined
    return meta
  }

  /**
   * Commits the `attachContainer` of a host entity save, in-process. Files are placed by the entity's
   * creation date-time (the domain's `dateField`, default `createdDt`), else by `date`, else now; the
   * month is taken in `timeZone`. Errors (a partial failure included) reach the caller.
   *
   * @example
   * const post = await db.insertInto('board').values({...}).returningAll().executeTakeFirstOrThrow()
   * await storage.commitAttachContainer({ refKey: post.id, attachContainer: body.attachContainer, entity: post, user })
   */
  async commitAttachContainer(input: {
    attachContainer: AttachBag | null | undefined
    refKey: string | number
    refDomain?: string
    entity?: Record<string, unknown>
    date?: Date | string
    user: AuthUser | null
    /** The host's request, shown to secure-access functions when a `savedDir` entry reuses a guarded file. */
    request?: Request
  }): Promise<AttachmentView[]> {
    const bag = input.attachContainer
    if (bag === null || bag === undefined) return []
    const refDomain = input.refDomain ?? (bag as AttachBag).refDomain
    if (typeof refDomain !== 'string') throw badRequest('attachContainer.refDomain is required')
    const domain = this.registry.domain(refDomain)
    let raw: unknown = input.date ?? input.entity?.[domain.dateField]
    if (raw === '' || raw === null) raw = undefined
    let date: Date | undefined
    if (raw !== undefined) {
      date = raw instanceof Date ? raw : new Date(raw as string | number)
      if (Number.isNaN(date.getTime())) throw badRequest(`The entity's ${domain.dateField} is not a date-time`)
    }
    return this.commitBag(refDomain, input.refKey, bag, { user: input.user, date, request: input.request })
  }

  // ---------------------------------------------------------------- lookups

  #cdnBase(storeName: string): string | undefined {
    const s = this.#s.settings.get(storeName)?.cdnUrl
    return typeof s === 'string' && s ? (s.endsWith('/') ? s : s + '/') : this.config.cdnUrl
  }

  #directUrl(storeName: string, refDomain: string, refCategory: string, savedDir: string, name: string): string {
    // A guarded category's files never get a public address: their url is the guarded binary route.
    const guarded = this.registry.domain(refDomain).categories.get(refCategory)?.secureAccess !== undefined
    const cdn = guarded ? undefined : this.#cdnBase(storeName)
    if (cdn) return cdn + storeKey(savedDir, name)
    const path = encodeURIComponent(savedDir + name)
    return `${this.config.assetsPrefix}/attach-direct/view/${refDomain}/${refCategory}?path=${path}`
  }

  /**
   * The records the request may read, answered with `url` (and `cdnUrl`); `index` is each record's
   * position within its reference category among all its records (the slot a by-reference view names).
   * Records of a guarded category are left out unless its secure-access function allows the request.
   * `records` must be in reference, category and `sort` order.
   */
  async #readableViews(records: AttachmentRecord[], request: Request | null): Promise<AttachmentView[]> {
    const pos = new Map<string, number>()
    const out: AttachmentView[] = []
    for (const r of records) {
      const k = `${r.refKey}\u0000${r.refCategory}`
      const index = pos.get(k) ?? 0
      pos.set(k, index + 1)
      const category = this.registry.domain(r.refDomain).categories.get(r.refCategory)
      if (!category) continue // a category no longer registered serves nothing, so it lists nothing
      if (category.secureAccess && !(await this.checkAccess(request, category, describeRecord(r)))) continue
      out.push(this.#view(r, index, category.secureAccess !== undefined))
    }
    return out
  }

  /**
   * A record as answered. A guarded record never carries a CDN or direct address: its `url` is the
   * guarded binary route, signed when signing is configured (the caller was allowed to read it).
   */
  #view(r: AttachmentRecord, index: number, guarded: boolean): AttachmentView {
    const { sha256: _s, store, blobId: _b, ...rest } = r
    const cdn = guarded ? undefined : this.#cdnBase(store)
    if (cdn) {
      const cdnUrl = cdn + storeKey(r.savedDir, r.savedName)
      return { ...rest, url: cdnUrl, cdnUrl }
    }
    let url = `${this.config.assetsPrefix}/attach/view/${encodeURIComponent(r.refDomain)}/${encodeURIComponent(r.refKey)}/${encodeURIComponent(r.refCategory)}/${index}`
    if (guarded && this.#signer) url += '?' + this.#signer.query(r.id)
    return { ...rest, url }
  }

  /** True when the request carries a valid signature for a guarded record (signed view URLs). */
  #signedFor(request: Request | null, id: number, category: RegisteredCategory): boolean {
    if (!request || !this.#signer || !category.secureAccess) return false
    const q = request.url.indexOf('?')
    return q >= 0 && this.#signer.verify(id, new URLSearchParams(request.url.slice(q + 1)))
  }

  /** Applies `ext`, `extAlt` and `fmetaValue` to one category's records (in `sort` order). */
  #applyFilters<T extends Pick<AttachmentRecord, 'ext' | 'fmetaValue'>>(list: T[], f: LookupFilters): T[] {
    let out = list
    if (f.fmetaValue !== undefined && f.fmetaValue !== '') out = out.filter((r) => r.fmetaValue === f.fmetaValue)
    if (f.ext !== undefined && f.ext !== '') out = out.filter((r) => r.ext === f.ext)
    if (f.extAlt !== undefined && f.extAlt !== '') {
      const alts = f.extAlt.split(':')
      let picked: T[] | undefined
      for (const alt of alts) {
        const m = out.filter((r) => r.ext === alt)
        if (m.length) {
          picked = m
          break
        }
      }
      out = picked ?? out.slice(0, 1)
    }
    return out
  }

  /**
   * The AttachBag of a reference: `{refDomain, <category>: records[]}` in `sort` order, every registered
   * category of the domain present (or only `refCategory` when given).
   */
  async lookup(
    refDomain: string,
    refKeyIn: string,
    refCategory?: string,
    filters: LookupFilters = {},
    /** The caller's request, shown to secure-access functions; null: guarded records are left out. */
    request: Request | null = null,
  ): Promise<AttachBag> {
    const domain = this.registry.domain(refDomain)
    if (refCategory !== undefined) this.registry.category(refDomain, refCategory)
    const refKey = checkRefKey(refKeyIn)
    const records = await this.repository.listByReference(refDomain, refKey, refCategory)
    const bag: AttachBag = { refDomain }
    const cats = refCategory !== undefined ? [refCategory] : [...domain.categories.keys()]
    for (const c of cats) bag[c] = []
    const views = await this.#readableViews(records, request)
    for (const c of new Set(views.map((v) => v.refCategory))) {
      bag[c] = this.#applyFilters(
        views.filter((v) => v.refCategory === c),
        filters,
      )
    }
    return bag
  }

  /** The number of attachments of one reference category that the request may read. */
  async count(refDomain: string, refKey: string, refCategory: string, request: Request | null = null): Promise<number> {
    const category = this.registry.category(refDomain, refCategory)
    if (!category.secureAccess) return this.repository.countByReference(refDomain, checkRefKey(refKey), refCategory)
    const records = await this.repository.listByReference(refDomain, checkRefKey(refKey), refCategory)
    return (await this.#readableViews(records, request)).length
  }

  /**
   * The conditional list: records of several references of a domain, ordered by refKey, refCategory,
   * sort, following the list and pagination convention (`_usePaging`, `currentPage`, `dataPerPage`,
   * `skipCount`, and `q` on displayName, ext, fmetaValue, fileType, createdDt). Each `url` carries the
   * record's index within its own reference category, whatever page it is on.
   */
  async listByReferences(
    refDomain: string,
    refKeys: string[],
    refCategories?: string[],
    params: URLSearchParams = new URLSearchParams(),
    /** The caller's request, shown to secure-access functions; null: guarded records are left out. */
    httpRequest: Request | null = null,
  ): Promise<ListResult<AttachmentView>> {
    const domain = this.registry.domain(refDomain)
    for (const c of refCategories ?? []) this.registry.category(refDomain, c)
    const keys = refKeys.map(checkRefKey)
    this.#s
    const request = parseListRequest(params, ATTACHMENT_LIST)
    const selected = refCategories ?? [...domain.categories.keys()]
    const guarded = selected.some((c) => domain.categories.get(c)?.secureAccess !== undefined)
    const list = (req: typeof request, cap?: number) =>
      runList(this.#db!.selectFrom('attach_file').selectAll(), ATTACHMENT_LIST, req, {
        enforce: (qb) => {
          let q = qb.where('ref_domain', '=', refDomain).where('deleted', '=', 0).where('ref_key', 'in', keys)
          // Only registered categories are listed (an unregistered one serves nothing).
          q = selected.length ? q.where('ref_category', 'in', selected) : q.where(sql<boolean>`1 = 0`)
          return cap === undefined ? q : q.limit(cap + 1)
        },
        mapRow: (row) => mapRecord(row as never),
      })
    let result: ListResult<AttachmentRecord>
    if (!guarded) {
      result = await list(request)
    } else {
      // A secure-access function is code, not SQL: the readable rows are found in memory, from at most
      // GUARDED_LIST_MAX matching rows, then paged there, so counts and pages leave out what the caller
      // may not read.
      const all = await list({ ...request, paging: false }, GUARDED_LIST_MAX)
      if (all.rows.length > GUARDED_LIST_MAX) {
        throw badRequest(`More than ${GUARDED_LIST_MAX} attachments match; narrow refKeyList, refCategoryList or q`)
      }
      const readable: AttachmentRecord[] = []
      for (const r of all.rows) {
        const category = domain.categories.get(r.refCategory)!
        if (!category.secureAccess || (await this.checkAccess(httpRequest, category, describeRecord(r)))) readable.push(r)
      }
      result = pageInMemory(readable, request, ATTACHMENT_LIST.maxPerPage!)
    }
    // Each record's index within its reference category, from the full ordered lists of the page's references.
    const pageKeys = [...new Set(result.rows.map((r) => r.refKey))]
    const index = new Map<number, number>()
    if (pageKeys.length) {
      const all = await this.repository.listByReferences(refDomain, pageKeys, refCategories)
      const pos = new Map<string, number>()
      for (const r of all) {
        const k = `${r.refKey}\u0000${r.refCategory}`
        const i = pos.get(k) ?? 0
        pos.set(k, i + 1)
        index.set(r.id, i)
      }
    }
    return {
      ...result,
      rows: result.rows.map((r) =>
        this.#view(r, index.get(r.id) ?? 0, domain.categories.get(r.refCategory)?.secureAccess !== undefined),
      ),
    }
  }

  /** The real address of the `index`-th (in `sort` order) attachment of a reference category. */
  async directUrl(
    input: { refDomain: unknown; refCategory?: unknown; refKey: unknown; index?: unknown },
    /** The caller's request, shown to the secure-access function of a guarded category. */
    request: Request | null = null,
  ): Promise<string> {
    if (typeof input.refDomain !== 'string') throw badRequest('refDomain is required')
    const refCategory = input.refCategory === undefined ? 'default' : String(input.refCategory)
    const category = this.registry.category(input.refDomain, refCategory)
    const index = input.index === undefined ? 0 : Number(input.index)
    if (!Number.isSafeInteger(index) || index < 0) throw badRequest('index must be a non-negative integer')
    const list = await this.repository.listByReference(input.refDomain, checkRefKey(input.refKey), refCategory)
    const r = list[index]
    if (!r) throw notFound(`No attachment at index ${index} of ${input.refDomain}/${String(input.refKey)}/${refCategory}`)
    const byId = `${this.config.assetsPrefix}/attach/view/${r.id}`
    if (category.secureAccess) {
      // A guarded file's real address is the guarded route, signed for a caller who may read it.
      if (!(await this.checkAccess(request, category, describeRecord(r)))) throw forbidden()
      return this.#signer ? `${byId}?${this.#signer.query(r.id)}` : byId
    }
    const cdn = this.#cdnBase(r.store)
    return cdn ? cdn + storeKey(r.savedDir, r.savedName) : byId
  }

  /** `{cdnUrl, domains: {<domain>: {store, categories}}}`. */
  describe(): { cdnUrl: string | null; domains: Record<string, { store: string; categories: string[] }> } {
    const domains: Record<string, { store: string; categories: string[] }> = {}
    for (const d of this.registry.domains()) domains[d.name] = { store: d.store, categories: [...d.categories.keys()] }
    return { cdnUrl: this.config.cdnUrl ?? null, domains }
  }

  // ---------------------------------------------------------------- access

  /** Runs a category's secure-access function; a throw counts as a refusal. No function allows. */
  async checkAccess(request: Request | null, category: RegisteredCategory, file: FileDescription): Promise<boolean> {
    if (!category.secureAccess) return true
    if (!request) return false
    try {
      return (await category.secureAccess(request, file)) === true
    } catch (err) {
      this.logger.warn(`attach-storage: secure-access function of "${file.refDomain}.${file.refCategory}" threw; refused`, err)
      return false
    }
  }

  async #mayRead(request: Request | null, r: AttachmentRecord, user: AuthUser | null): Promise<boolean> {
    const category = this.registry.domain(r.refDomain).categories.get(r.refCategory)
    if (!category) return false
    if (category.secureAccess) return this.checkAccess(request, category, describeRecord(r))
    return user !== null || request !== null
  }

  /**
   * The one rule for changing a record, on every path (PUT, POST delete, a confirmed save's `_deleted`
   * and re-sort entries): the category's secure-access function when it has one, else its creator.
   */
  async #mayChange(request: Request | null, r: AttachmentRecord, user: AuthUser | null): Promise<boolean> {
    const category = this.registry.domain(r.refDomain).categories.get(r.refCategory)
    if (category?.secureAccess) return this.checkAccess(request, category, describeRecord(r))
    return user !== null && sameUser(r.createdBy, user.id)
  }

  async #ownedRecords(request: Request | null, items: unknown, user: AuthUser | null): Promise<AttachmentRecord[]> {
    if (!Array.isArray(items)) throw badRequest('The body must be an array of attachment records')
    const ids = items.map((x, i) => {
      const id = x && typeof x === 'object' ? Number((x as { id?: unknown }).id) : NaN
      if (!Number.isSafeInteger(id) || id <= 0) throw badRequest(`item ${i}: id must be a positive integer`)
      return id
    })
    const records = await this.repository.findByIds([...new Set(ids)])
    for (const r of records) {
      if (!(await this.#mayChange(request, r, user))) {
        throw forbidden(`You may not change attachment ${r.id}`)
      }
    }
    return records
  }

  /**
   * PUT `/attach/`: updates `displayName`, `ext`, `fmetaValue` and `sort` of the listed records, all or
   * nothing, only when the caller may change every one of them. Other fields are never written.
   */
  async update(request: Request, items: unknown, user: AuthUser | null): Promise<number> {
    const records = await this.#ownedRecords(request, items, user)
    const known = new Set(records.map((r) => r.id))
    const updates = (items as Array<Record<string, unknown>>)
      .filter((x) => known.has(Number(x.id)))
      .map((x) => {
        const u: { id: number; displayName?: string; ext?: string | null; fmetaValue?: string | null; sort?: number } = {
          id: Number(x.id),
        }
        if (x.displayName !== undefined) {
          if (typeof x.displayName !== 'string' || cleanDisplayName(x.displayName, '') === '') {
            throw badRequest(`attachment ${u.id}: displayName must be a non-empty string`)
          }
          u.displayName = cleanDisplayName(x.displayName)
        }
        if (x.ext !== undefined) u.ext = cleanText(x.ext)
        if (x.fmetaValue !== undefined) u.fmetaValue = cleanText(x.fmetaValue)
        if (x.sort !== undefined) {
          const sort = Number(x.sort)
          if (!Number.isSafeInteger(sort) || sort < 0) throw badRequest(`attachment ${u.id}: sort must be a non-negative integer`)
          u.sort = sort
        }
        return u
      })
    return this.repository.updateMetadata(updates)
  }

  /** POST `/attach`: permanently deletes the listed records (and files no other record uses). */
  async remove(request: Request, items: unknown, user: AuthUser | null): Promise<number> {
    const records = await this.#ownedRecords(request, items, user)
    return this.#deleteRecords(records.map((r) => r.id))
  }

  /** Deletes records; a physical file goes with its last record. Returns how many records went. */
  async #deleteRecords(ids: number[]): Promise<number> {
    if (!ids.length) return 0
    const { deleted, orphanBlobs } = await this.repository.markDeleted(ids)
    await Promise.all([...orphanBlobs.map((b) => this.#dropBlob(b)), ...deleted.map((r) => this.#dropVariants(r))])
    if (deleted.length) this.#emit('deleted', { records: deleted })
    return deleted.length
  }

  /** Deletes every resize variant of a record (they live beside the original, under `_v/{id}/`). */
  async #dropVariants(r: AttachmentRecord): Promise<void> {
    try {
      const store = this.store(r.store)
      const prefix = variantPrefix(storeKey(r.savedDir, ''), r.id)
      this.resizer.forget(store.name, prefix)
      for await (const e of store.list(prefix)) await store.delete(e.key)
    } catch (err) {
      this.logger.warn(`attach-storage: deleting the variants of attachment ${r.id} failed`, err)
    }
  }

  /**
   * Deletes the variants under a stored directory whose record is gone (`{savedDir}_v/{id}/...`): what a
   * failed delete left behind is found again when the directory's files are swept.
   */
  async #sweepVariants(store: Store, savedDir: string): Promise<void> {
    const prefix = `${storeKey(savedDir, '')}_v/`
    const keys: Array<{ key: string; id: number }> = []
    for await (const e of store.list(prefix)) {
      const id = Number(e.key.slice(prefix.length).split('/')[0])
      if (Number.isSafeInteger(id)) keys.push({ key: e.key, id })
    }
    if (!keys.length) return
    const live = new Set((await this.repository.findByIds([...new Set(keys.map((k) => k.id))])).map((r) => r.id))
    for (const k of keys) if (!live.has(k.id)) await store.delete(k.key)
  }

  async #dropBlob(b: BlobRecord): Promise<void> {
    try {
      const store = this.store(b.store)
      await store.delete(storeKey(b.savedDir, b.savedName))
      await this.#sweepVariants(store, b.savedDir)
      await this.repository.purgeBlob(b.id)
    } catch (err) {
      // The records are already invisible; the sweep retries the physical delete.
      this.logger.warn(`attach-storage: deleting ${b.savedDir}${b.savedName} failed; the sweep retries`, err)
    }
  }

  // ---------------------------------------------------------------- serving

  /** Resolves a saved attachment by id, checking the category's secure-access function. */
  async resolveById(request: Request, id: number, resize?: ResizeRequest): Promise<ServeTarget> {
    const r = await this.repository.findById(id)
    if (!r) throw notFound(`No attachment ${id}`)
    return this.#serveRecord(request, r, 'immutable', resize)
  }

  /** Resolves the `idx`-th attachment of a reference (after `ext`/`extAlt`/`fmetaValue`). */
  async resolveByReference(
    request: Request,
    ref: { refDomain: string; refKey: string; refCategory: string; idx: number },
    filters: LookupFilters = {},
    resize?: ResizeRequest,
  ): Promise<ServeTarget> {
    this.registry.category(ref.refDomain, ref.refCategory)
    const records = await this.repository.listByReference(ref.refDomain, checkRefKey(ref.refKey), ref.refCategory)
    const r = this.#applyFilters(records, filters)[ref.idx]
    if (!r) throw notFound(`No attachment at index ${ref.idx} of ${ref.refDomain}/${ref.refKey}/${ref.refCategory}`)
    return this.#serveRecord(request, r, 'revalidate', resize)
  }

  async #serveRecord(
    request: Request,
    r: AttachmentRecord,
    cache: ServeTarget['cache'],
    resize?: ResizeRequest,
  ): Promise<ServeTarget> {
    const category = this.registry.domain(r.refDomain).categories.get(r.refCategory)
    if (!category) throw notFound(`No attachment ${r.id}`)
    if (!this.#signedFor(request, r.id, category) && !(await this.checkAccess(request, category, describeRecord(r)))) {
      throw forbidden()
    }
    const store = this.store(r.store)
    const key = storeKey(r.savedDir, r.savedName)
    if (resize) checkAllowedSize(category.sizes, resize)
    if (resize && isResizable(r.fileType)) {
      const vkey = variantKey(storeKey(r.savedDir, ''), r.id, resize)
      // HEAD makes no variant: a stored one answers its own headers, else the original's (see serveFile).
      const variant = await this.resizer.variant(
        store,
        key,
        vkey,
        r.fileType,
        resize,
        (err) => this.logger.warn(`attach-storage: attachment ${r.id} could not be resized; serving the original`, err),
        { lookOnly: request.method === 'HEAD' },
      )
      if (variant) {
        const ext = resize.format ? `.${resize.format === 'jpeg' ? 'jpg' : resize.format}` : undefined
        return {
          store,
          key: variant.key,
          displayName: ext ? r.displayName.replace(/(\.[^.]*)?$/, ext) : r.displayName,
          fileType: variant.type,
          fileSize: variant.size,
          etag: `${r.sha256}-${resize.w ?? 0}x${resize.h ?? 0}${resize.format ?? ''}`,
          lastModified: new Date(r.createdDt),
          cache,
          private: category.secureAccess !== undefined,
          vary: resize.negotiated ? 'Accept' : undefined,
          bytes: variant.bytes,
        }
      }
    }
    return {
      store,
      key,
      displayName: r.displayName,
      fileType: r.fileType,
      fileSize: r.fileSize,
      etag: r.sha256,
      lastModified: new Date(r.createdDt),
      cache,
      private: category.secureAccess !== undefined,
      vary: resize?.negotiated ? 'Accept' : undefined,
    }
  }

  /** Resolves a temporary file for preview (synthetic file description; no resizing). */
  async resolveTemporary(request: Request, refDomain: string, refCategory: string, savedName: string): Promise<ServeTarget> {
    const category = this.registry.category(refDomain, refCategory)
    if (!SAVED_NAME.test(savedName)) throw notFound('No such temporary file')
    const meta = await this.#readTmpMeta(savedName)
    if (!meta || meta.refDomain !== refDomain || meta.refCategory !== refCategory) throw notFound('No such temporary file')
    if (!(await this.checkAccess(request, category, syntheticDescription(refDomain, refCategory, savedName)))) throw forbidden()
    const stat = await this.#s.tmpStore.stat(tmpKey(savedName))
    return {
      store: this.#s.tmpStore,
      key: tmpKey(savedName),
      displayName: meta.displayName,
      fileType: meta.type,
      fileSize: stat.size,
      etag: meta.sha256,
      lastModified: stat.lastModified,
      cache: 'immutable',
      private: true,
    }
  }

  /** Resolves a directly uploaded file by its `path` (synthetic file description; no resizing). */
  async resolveDirect(request: Request, refDomain: string, refCategory: string, path: unknown): Promise<ServeTarget> {
    const domain = this.registry.domain(refDomain)
    const category = this.registry.category(refDomain, refCategory)
    const p = parseDirectPath(path, refDomain, refCategory)
    if (!p) throw notFound('No such direct file')
    if (!(await this.checkAccess(request, category, syntheticDescription(refDomain, refCategory, p.savedName)))) throw forbidden()
    const store = this.store(domain.store)
    const key = storeKey(p.savedDir, p.savedName)
    const stat = await store.stat(key)
    const head = await this.#readHead(store, key)
    return {
      store,
      key,
      displayName: p.savedName,
      fileType: await sniffType(head, p.savedName),
      fileSize: stat.size,
      lastModified: stat.lastModified,
      cache: 'immutable',
      private: category.secureAccess !== undefined,
    }
  }

  #editorUrl(storeName: string, refCategory: string, savedDir: string, name: string): string {
    const guarded = this.registry.domain(EDITOR_DOMAIN).categories.get(refCategory)?.secureAccess !== undefined
    const cdn = guarded ? undefined : this.#cdnBase(storeName)
    if (cdn) return cdn + storeKey(savedDir, name)
    const [, , yyyy, MM] = savedDir.split('/')
    return `${this.config.assetsPrefix}/editor/image/${refCategory}/${yyyy}/${MM}/${name}`
  }

  /**
   * Rich-text editor upload: a direct upload into domain `editor` (category `default` unless given),
   * through that category's filters (images only by default). Answers the direct items, whose `url` is
   * the editor image route (or the CDN address).
   */
  completeEditorUpload(files: ReceivedFile[], input: { refCategory?: unknown; user: AuthUser | null }): Promise<DirectItem[]> {
    return this.completeDirectUpload(files, { refDomain: EDITOR_DOMAIN, refCategory: input.refCategory, user: input.user }, 'editor')
  }

  /** Resolves `/editor/image/{category}/{yyyy}/{MM}/{savedName}` (secure-access checked like direct files). */
  async resolveEditorImage(request: Request, parts: string[]): Promise<ServeTarget> {
    if (parts.length !== 4) throw notFound('No such editor image')
    const [refCategory, yyyy, MM, savedName] = parts as [string, string, string, string]
    if (!/^\d{4}$/.test(yyyy) || !/^\d{2}$/.test(MM)) throw notFound('No such editor image')
    return this.resolveDirect(request, EDITOR_DOMAIN, refCategory, `/${EDITOR_DOMAIN}/${yyyy}/${MM}/_/${refCategory}/${savedName}`)
  }

  /**
   * A ZIP of several attachments, streamed: `{title?, ids}`. Files missing or refused by their category's
   * secure-access function are skipped; when every one fails the answer is 404. Names follow the spec:
   * `.zip` appended to `title`, else `{domain}_{category}_{yyyyMMddHHmmss}.zip` of the first file;
   * duplicate names become `name_1.ext`, `name_2.ext`, ...
   */
  async zip(request: Request, body: unknown): Promise<{ fileName: string; stream: Readable }> {
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw badRequest('The body must be a JSON object {title, ids}')
    const { title, ids } = body as { title?: unknown; ids?: unknown }
    if (title !== undefined && title !== null && (typeof title !== 'string' || title.length > 200)) {
      throw badRequest('title must be a string of at most 200 characters')
    }
    if (!Array.isArray(ids) || ids.length === 0) throw badRequest('ids must be a non-empty array of attachment ids')
    if (ids.length > this.config.zip.maxFiles) throw badRequest(`A ZIP may name at most ${this.config.zip.maxFiles} ids`)
    for (const id of ids) {
      if (typeof id !== 'number' || !Number.isSafeInteger(id) || id <= 0) throw badRequest('ids must be positive integers')
    }
    if (this.#zipsRunning >= this.config.zip.concurrency) {
      throw new AttachStorageError('busy', 'Too many ZIP downloads are running; try again shortly', {
        status: 503,
        headers: { 'retry-after': String(ZIP_RETRY_AFTER) },
      })
    }
    const found = new Map((await this.repository.findByIds([...new Set(ids as number[])])).map((r) => [r.id, r]))
    const allowed: AttachmentRecord[] = []
    for (const id of ids as number[]) {
      const r = found.get(id)
      if (!r) continue
      const category = this.registry.domain(r.refDomain).categories.get(r.refCategory)
      if (category && (await this.checkAccess(request, category, describeRecord(r)))) allowed.push(r)
    }
    // Only files that are really there count: a record whose file is gone is skipped too.
    const present: AttachmentRecord[] = []
    for (const r of allowed) {
      if (await this.store(r.store).exists(storeKey(r.savedDir, r.savedName)).catch(() => false)) present.push(r)
    }
    if (present.length === 0) throw notFound('None of the requested attachments could be found or may be downloaded')
    const first = present[0]!
    const stamp = this.#now().toISOString().replace(/\D/g, '').slice(0, 14)
    let fileName = typeof title === 'string' && title.trim() ? cleanDisplayName(title.trim()) : `${first.refDomain}_${first.refCategory}_${stamp}.zip`
    if (!fileName.toLowerCase().endsWith('.zip')) fileName += '.zip'
    const unique = uniqueNames()
    const sources: ZipSource[] = present.map((r) => ({
      name: unique(r.displayName),
      size: r.fileSize,
      mtime: new Date(r.createdDt),
      compress: !isCompressed(r.fileType),
      open: () => this.store(r.store).get(storeKey(r.savedDir, r.savedName)),
    }))
    const stream = createZipStream(sources, {
      onSkip: (src, err) => this.logger.warn(`attach-storage: ${src.name} left out of a ZIP`, err),
    })
    // The slot is held until the archive is sent, fails, or its client goes away.
    this.#zipsRunning++
    stream.once('close', () => this.#zipsRunning--)
    return { fileName, stream }
  }

  // ---------------------------------------------------------------- housekeeping

  /**
   * Removes expired temporary files (older than `tmp-ttl`), partial files of interrupted writes older than
   * that, and retries the physical deletion of files whose last record went (or that were never
   * attached: pending blobs of saves nobody retried). Safe to run on several instances at once.
   */
  async sweep(): Promise<{ temporaryFiles: number; blobs: number; partialFiles: number }> {
    const s = this.#s
    const cutoff = new Date(this.#now().getTime() - this.config.tmpTtl)
    // What interrupted writes left (a local store's `.partial` files of a crash), in every store that can tell.
    let partialFiles = 0
    for (const store of new Set([s.tmpStore, ...s.stores.values()])) {
      if (!store.sweepPartials) continue
      partialFiles += await store.sweepPartials(cutoff).catch((err: unknown) => {
        this.logger.warn(`attach-storage: removing partial files of store "${store.name}" failed`, err)
        return 0
      })
    }
    let temporaryFiles = 0
    for await (const e of s.tmpStore.list(TMP_PREFIX)) {
      if (e.lastModified < cutoff) {
        await s.tmpStore.delete(e.key)
        if (!e.key.endsWith('.meta.json')) temporaryFiles++
      }
    }
    let blobs = 0
    for (;;) {
      const dead = await this.repository.listDeadBlobs(cutoff.toISOString(), 100)
      if (!dead.length) break
      for (const b of dead) {
        await this.#dropBlob(b)
        blobs++
      }
      if (dead.length < 100) break
    }
    return { temporaryFiles, blobs, partialFiles }
  }
}

/** Seconds a client is asked to wait when every ZIP slot is taken. */
const ZIP_RETRY_AFTER = 5

/** Most matching rows a conditional list over guarded categories reads to find the readable ones. */
const GUARDED_LIST_MAX = 10_000

/** Pages rows already filtered in memory the way {@link runList} pages a query (same headers). */
function pageInMemory<T>(rows: T[], request: ListRequest, maxPerPage: number): ListResult<T> {
  const headers = new Headers()
  if (!request.paging) return { rows, headers }
  const perPage = Math.min(Math.floor(request.perPage), maxPerPage)
  const offset = (request.page - 1) * perPage
  if (!Number.isSafeInteger(offset)) throw badRequest(`currentPage ${request.page} is too large`)
  if (!request.skipCount) headers.set(LIST_HEADERS.totalCount, String(rows.length))
  headers.set(LIST_HEADERS.page, String(request.page))
  headers.set(LIST_HEADERS.dataCount, String(perPage))
  const result: ListResult<T> = { rows: rows.slice(offset, offset + perPage), page: request.page, perPage, headers }
  if (!request.skipCount) result.total = rows.length
  return result
}

/** The search whitelist and order of the conditional attachment list. */
const ATTACHMENT_LIST: ListProvider = {
  fields: {
    displayName: { type: 'string', ops: ['eq', 'like'], column: 'display_name' },
    ext: { type: 'string', ops: ['eq', 'ne', 'in'], column: 'ext' },
    fmetaValue: { type: 'string', ops: ['eq', 'in'], column: 'fmeta_value' },
    fileType: { type: 'string', ops: ['eq', 'like'], column: 'file_type' },
    createdDt: { type: 'datetime', ops: ['gt', 'ge', 'lt', 'le'], column: 'created_dt' },
  },
  sortable: {},
  primaryKey: 'id',
  defaultOrder: [
    { column: 'ref_key', direction: 'asc' },
    { column: 'ref_category', direction: 'asc' },
    { column: 'sort', direction: 'asc' },
  ],
  maxPerPage: 1000,
}

/** The file description of a saved record, as the secure-access function sees it. */
export function describeRecord(r: AttachmentRecord): FileDescription {
  return {
    id: r.id,
    refDomain: r.refDomain,
    refKey: r.refKey,
    refCategory: r.refCategory,
    savedName: r.savedName,
    savedDir: r.savedDir,
    displayName: r.displayName,
    fileType: r.fileType,
    fileSize: r.fileSize,
    ext: r.ext,
    createdBy: r.createdBy,
    createdDt: r.createdDt,
  }
}

/** The spec's synthetic description of a temporary or direct file: only refDomain, refCategory, savedName. */
export function syntheticDescription(refDomain: string, refCategory: string, savedName: string): FileDescription {
  return {
    id: null,
    refDomain,
    refKey: null,
    refCategory,
    savedName,
    savedDir: null,
    displayName: null,
    fileType: null,
    fileSize: null,
    ext: null,
    createdBy: null,
    createdDt: null,
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
