import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import { checkStoreDeclarations, STORE_PACKAGES, type AttachConfigParsed } from '../config/schema.js'
import { configError } from '../errors.js'
import { LocalStore } from '../stores/local-store.js'
import type { Store, StoreFactory } from '../stores/store.js'

/** The stores of a service, by name, with the settings each was declared with. */
export interface StoreSet {
  stores: Map<string, Store>
  settings: Map<string, Record<string, unknown>>
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
  const load = options.importModule ?? importStorePackage
  try {
    for (const [name, settings] of Object.entries(declared)) {
      const ready = options.stores?.[name]
      if (ready) {
        stores.set(name, ready)
        continue
      }
      stores.set(name, await createStore(name, settings, baseDir, options.storeFactories, load))
    }
  } catch (err) {
    // A store package refused its settings: the stores made so far (not the host's) are released.
    await Promise.allSettled([...stores].filter(([name]) => !options.stores?.[name]).map(([, store]) => store.close()))
    throw err
  }
  const tmpStore = config.tmpStore ? stores.get(config.tmpStore)! : new LocalStore('tmp', { baseDir: tmpDir })
  const settings = new Map(Object.entries(declared))
  return { stores, settings, tmpStore, baseDir, tmpDir }
}

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
    const dir = typeof settings.baseDir === 'string' ? resolve(settings.baseDir) : baseDir
    return new LocalStore(name, { baseDir: dir })
  }
  const packageName = Object.hasOwn(STORE_PACKAGES, type) ? STORE_PACKAGES[type] : undefined
  if (!packageName) throw configError(`attach.stores.${name}: no adapter exists for store type "${type}"`)
  const createStore = await loadStoreFactory(packageName, `attach.stores.${name}`, type, load)
  // The package checks its own settings (required ones first) and throws config-invalid naming them.
  return createStore(name, settings)
}
