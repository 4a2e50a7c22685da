import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { checkStoreDeclarations, STORE_PACKAGES, type AttachConfigParsed } from '../config/schema.js'
import { suggestion } from '../config/nearest.js'
import { parseDuration } from '../config/units.js'
import { configError } from '../errors.js'
import { LocalStore } from '../stores/local-store.js'
import type { Store, StoreFactory } from '../stores/store.js'

/** How a store's bytes leave (its `serve` settings, checked against what the store can do). */
export type StoreServing =
  | { mode: 'stream' }
  | { mode: 'x-accel-redirect'; location: string }
  | { mode: 'x-sendfile' }
  | { mode: 'redirect'; ttlSeconds: number }

/** The settings of a store that the core reads; the store's package never sees them. */
const CORE_SETTINGS = ['serve', 'serveLocation', 'redirectTtl']

/** Longest a presigned address may stay valid (S3's limit for signature version 4). */
const MAX_REDIRECT_TTL_SECONDS = 7 * 24 * 3600

/** The stores of a service, by name, with the settings each was declared with. */
export interface StoreSet {
  stores: Map<string, Store>
  settings: Map<string, Record<string, unknown>>
  /** How each store's bytes leave (`stream` unless its `serve` setting says otherwise). */
  serving: Map<string, StoreServing>
  tmpStore: Store
  baseDir: string
  tmpDir: string
}

/** Default module loader for store packages; injectable for tests. */
export const importStorePackage = (specifier: string): Promise<unknown> => import(specifier)

function isModuleNotFound(err: unknown, specifier: string): boolean {
  const e = err as { code?: string; message?: string }
  return (
    (e?.code === 'ERR_MODULE_NOT_FOUND' || e?.code === 'MODULE_NOT_FOUND') && typeof e.message === 'string' && e.message.includes(specifier)
  )
}

/**
 * Loads a store package and returns its `createStore`. A package that is not installed fails with a
 * message naming the package to install.
 */
export async function loadStoreFactory(
  packageName: string,
  where: string,
  type: string,
  load: (specifier: string) => Promise<unknown> = importStorePackage,
): Promise<StoreFactory> {
  let mod: { createStore?: StoreFactory }
  try {
    mod = (await load(packageName)) as { createStore?: StoreFactory }
  } catch (err) {
    if (isModuleNotFound(err, packageName)) {
      throw configError(`${where} has type "${type}", whose adapter is not installed: run "npm install ${packageName}"`)
    }
    throw configError(`${where}: loading ${packageName} failed: ${(err as Error).message}`, err)
  }
  if (typeof mod.createStore !== 'function') {
    throw configError(`${packageName} does not export createStore(); is it a store package of attach-storage?`)
  }
  return mod.createStore
}

/**
 * Declares and creates every store of a configuration: the declared ones, the implicit `s3` store of
 * `attach.s3.*`, an implicit `local` store when `default-store` is `local` and none is declared, and
 * the host's ready instances. Fails at start (never at first use) on every declaration problem.
 */
export async function createStores(
  config: AttachConfigParsed,
  options: {
    stores?: Record<string, Store>
    storeFactories?: Record<string, StoreFactory>
    importModule?: (specifier: string) => Promise<unknown>
  },
): Promise<StoreSet> {
  const baseDir = resolve(config.directory.baseDir ?? tmpdir())
  const tmpDir = resolve(config.directory.tmpDir ?? join(baseDir, '.attach-tmp'))
  const declared: Record<string, Record<string, unknown>> = {}
  for (const [name, s] of Object.entries(config.stores)) declared[name] = { ...s }
  if (config.s3 && !declared.s3) declared.s3 = { type: 's3', ...config.s3 }
  for (const [name, store] of Object.entries(options.stores ?? {})) declared[name] = { type: store.type }
  if (!declared[config.defaultStore] && config.defaultStore === 'local') declared.local = { type: 'local' }

  const custom = new Set(Object.keys(options.storeFactories ?? {}))
  for (const s of Object.values(options.stores ?? {})) custom.add(s.type)
  checkStoreDeclarations(declared, config, custom)

  const stores = new Map<string, Store>()
  const serving = new Map<string, StoreServing>()
  const load = options.importModule ?? importStorePackage
  try {
    for (const [name, settings] of Object.entries(declared)) {
      const ready = options.stores?.[name]
      if (ready) {
        stores.set(name, ready)
        continue
      }
      const own = Object.fromEntries(Object.entries(settings).filter(([k]) => !CORE_SETTINGS.includes(k)))
      stores.set(name, await createStore(name, own, baseDir, options.storeFactories, load))
    }
    for (const [name, store] of stores) serving.set(name, storeServing(name, declared[name]!, store))
  } catch (err) {
    // A store package refused its settings: the stores made so far (not the host's) are released.
    await Promise.allSettled([...stores].filter(([name]) => !options.stores?.[name]).map(([, store]) => store.close()))
    throw err
  }
  const tmpStore = config.tmpStore ? stores.get(config.tmpStore)! : new LocalStore('tmp', { baseDir: tmpDir })
  const settings = new Map(Object.entries(declared))
  return { stores, settings, serving, tmpStore, baseDir, tmpDir }
}

/** A store's `serve` settings, refused at start when the store cannot serve that way. */
function storeServing(name: string, settings: Record<string, unknown>, store: Store): StoreServing {
  const where = `attach.stores.${name}`
  const mode = (settings.serve as StoreServing['mode'] | undefined) ?? 'stream'
  if (mode === 'x-accel-redirect') {
    if (typeof settings.serveLocation !== 'string') throw configError(`${where}.serve-location is required with serve: x-accel-redirect`)
    return { mode, location: settings.serveLocation }
  }
  if (mode === 'x-sendfile') {
    if (!store.localPath)
      throw configError(`${where}: serve: x-sendfile needs a store on the local file system; store type ${store.type} is not`)
    return { mode }
  }
  if (mode === 'redirect') {
    if (!store.presignGet)
      throw configError(`${where}: serve: redirect needs a store that signs addresses (s3, azure); store type ${store.type} does not`)
    const ms = settings.redirectTtl === undefined ? 300_000 : parseDuration(settings.redirectTtl)
    const ttlSeconds = ms === undefined ? Number.NaN : Math.floor(ms / 1000)
    if (!(ttlSeconds >= 1 && ttlSeconds <= MAX_REDIRECT_TTL_SECONDS)) {
      throw configError(`${where}.redirect-ttl must be a duration from 1s to 7d`)
    }
    return { mode, ttlSeconds }
  }
  return { mode: 'stream' }
}

/** The settings of a `local` store: its type, its base directory, and how its files are served. */
const LOCAL_SETTINGS = ['type', 'baseDir', 'serve', 'serveLocation', 'redirectTtl']
const kebab = (k: string) => k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)

/** Creates one declared store: a host factory, the core's local store, or the store package of its type. */
async function createStore(
  name: string,
  settings: Record<string, unknown>,
  baseDir: string,
  factories: Record<string, StoreFactory> | undefined,
  load: (specifier: string) => Promise<unknown>,
): Promise<Store> {
  const type = settings.type as string
  const factory = factories?.[type]
  if (factory) return factory(name, settings)
  if (type === 'local') {
    // The store packages check their own settings; the core's local store knows these alone.
    for (const key of Object.keys(settings)) {
      if (LOCAL_SETTINGS.includes(key)) continue
      const known = LOCAL_SETTINGS.map(kebab)
      throw configError(`unknown setting attach.stores.${name}.${kebab(key)}; ${suggestion(kebab(key), known)}`)
    }
    const dir = typeof settings.baseDir === 'string' ? resolve(settings.baseDir) : baseDir
    return new LocalStore(name, { baseDir: dir })
  }
  const packageName = Object.hasOwn(STORE_PACKAGES, type) ? STORE_PACKAGES[type] : undefined
  if (!packageName) throw configError(`attach.stores.${name}: no adapter exists for store type "${type}"`)
  const createStore = await loadStoreFactory(packageName, `attach.stores.${name}`, type, load)
  // The package checks its own settings (required ones first) and throws config-invalid naming them.
  return createStore(name, settings)
}
