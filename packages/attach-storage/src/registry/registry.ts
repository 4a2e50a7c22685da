import * as v from 'valibot'
import { AttachStorageError, badRequest, configError } from '../errors.js'
import {
  type AllowedSize,
  type EntityChangeGuard,
  type FilterSpec,
  NamedVariantsSchema,
  ScanSchema,
  type ScanSetting,
  type SecureAccessFunction,
} from '../config/schema.js'
import { suggestion } from '../config/nearest.js'
import { describeIssue } from '../validation.js'
import { BUILT_IN_FILTERS, DEFAULT_REQUEST_FILTERS, type AttachFilter } from '../filters/filters.js'

/** A category as registered: its filter chain (resolved) and its secure-access function. */
export interface RegisteredCategory {
  name: string
  filters: Array<{ filter: AttachFilter; options: Record<string, unknown> }>
  secureAccess: SecureAccessFunction | undefined
  /** The only resize boxes views may ask for; undefined: any within the bounds. */
  sizes: AllowedSize[] | undefined
  /** A guarded category's files may leave through presigned store addresses. */
  allowRedirect: boolean
  /** Named variants, made in the background after each save (empty: none). */
  variants: ReadonlyMap<string, NamedVariant>
  /** Stored JPEG, PNG and WebP originals lose their EXIF, XMP and IPTC (false: kept as uploaded). */
  stripMetadata: boolean
  /** Where uploads of the category are scanned for viruses (clamd), and what a failed scan does; undefined: not scanned. */
  scan?: ScanSetting
}

/** A named variant of a category: its box and output format (undefined: the original's). */
export interface NamedVariant {
  w?: number
  h?: number
  format?: 'webp' | 'avif' | 'jpeg' | 'png'
  /** `cover`: the exact `w`×`h` box, cropped around the record's focus; `inside` (the default): within it. */
  fit?: 'cover' | 'inside'
}

/** A domain as registered. */
export interface RegisteredDomain {
  name: string
  store: string
  dateField: string
  categories: Map<string, RegisteredCategory>
  /** Who may change an entity's attachments; undefined: any signed-in caller. */
  mayChange: EntityChangeGuard | undefined
}

/** What a category is registered with. */
export interface CategoryOptions {
  filters?: FilterSpec[]
  secureAccess?: SecureAccessFunction
  /** The only resize boxes views of the category may ask for. */
  sizes?: AllowedSize[]
  /** A guarded category's files may leave through presigned store addresses (`serve: redirect`). */
  allowRedirect?: boolean
  /** Named variants made in the background after each save (see docs/variants.md). */
  variants?: Record<string, NamedVariant>
  /** Remove EXIF, XMP and IPTC from stored JPEG, PNG and WebP originals (default true). */
  stripMetadata?: boolean
  /** Scan uploads with clamd before they are kept (docs/scanning.md). */
  scan?: { clamd: string; onError?: 'refuse' | 'accept' }
}

/** What a domain is registered with. */
export interface DomainOptions {
  store: string
  dateField?: string
  /** Who may change an entity's attachments (consulted by every confirmed save). */
  mayChange?: EntityChangeGuard
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/

/** The options `registerCategory()` and `registerDomain()` know; any other key is refused. */
const CATEGORY_KEYS = ['filters', 'secureAccess', 'sizes', 'allowRedirect', 'variants', 'stripMetadata', 'scan']
const DOMAIN_KEYS = ['store', 'dateField', 'mayChange']

/** Refuses the first option key not in `known` (`config-invalid`), with the nearest known name. */
function refuseUnknownOptions(where: string, options: object, known: readonly string[]): void {
  for (const key of Object.keys(options)) {
    if (!known.includes(key)) throw configError(`${where}: unknown setting ${key}; ${suggestion(key, known)}`)
  }
}

/**
 * Domains, categories, filters and secure-access functions. Usable only once the service has
 * initialised its stores (the spec's registrar rule): register from the `registrar` option of
 * `createAttachStorage()`, or after `await storage.init()`.
 */
export class Registry {
  #ready = false
  readonly #domains = new Map<string, RegisteredDomain>()
  readonly #filters = new Map<string, AttachFilter>()
  readonly #requestFilters = new Set<string>()
  readonly #storeNames: () => string[]

  constructor(storeNames: () => string[]) {
    this.#storeNames = storeNames
    for (const f of BUILT_IN_FILTERS) this.#filters.set(f.name, f)
    for (const f of DEFAULT_REQUEST_FILTERS) this.#requestFilters.add(f.name)
  }

  /** @internal Opens the registry; called by the service once its stores are initialised. */
  markReady(): void {
    this.#ready = true
  }

  #assertReady(what: string): void {
    if (!this.#ready) {
      throw configError(
        `Cannot ${what} before the attach storage service has initialised: register from the "registrar" option of createAttachStorage(), or after "await storage.init()"`,
      )
    }
  }

  /**
   * Registers a filter by name. It may then appear in any category's chain and, as a key of a request's
   * `filters` object, in any upload request.
   */
  registerFilter(filter: AttachFilter): this {
    this.#assertReady(`register filter "${filter.name}"`)
    if (!NAME.test(filter.name)) throw configError(`Filter name "${filter.name}" is not a valid name`)
    this.#filters.set(filter.name, filter)
    this.#requestFilters.add(filter.name)
    return this
  }

  /** Registers (or extends) a domain. Its `default` category is always present. */
  registerDomain(name: string, options: DomainOptions): RegisteredDomain {
    this.#assertReady(`register domain "${name}"`)
    if (!NAME.test(name)) throw configError(`Domain name "${name}" is not a valid name`)
    refuseUnknownOptions(`Domain "${name}"`, options, DOMAIN_KEYS)
    const stores = this.#storeNames()
    if (!stores.includes(options.store)) {
      throw configError(`Domain "${name}" names store "${options.store}", which is not declared; declared stores: ${stores.join(', ')}`)
    }
    if (options.mayChange !== undefined && typeof options.mayChange !== 'function') {
      throw configError(`Domain "${name}": mayChange must be a function`)
    }
    let domain = this.#domains.get(name)
    if (!domain) {
      domain = {
        name,
        store: options.store,
        dateField: options.dateField ?? 'createdDt',
        categories: new Map(),
        mayChange: options.mayChange,
      }
      this.#domains.set(name, domain)
    } else {
      domain.store = options.store
      if (options.dateField) domain.dateField = options.dateField
      if (options.mayChange) domain.mayChange = options.mayChange
    }
    if (!domain.categories.has('default')) {
      domain.categories.set('default', {
        name: 'default',
        filters: [],
        secureAccess: undefined,
        sizes: undefined,
        allowRedirect: false,
        stripMetadata: true,
        variants: new Map(),
      })
    }
    return domain
  }

  /** Registers (or replaces) a category of a registered domain. */
  registerCategory(domainName: string, name: string, options: CategoryOptions = {}): RegisteredCategory {
    this.#assertReady(`register category "${domainName}.${name}"`)
    const domain = this.#domains.get(domainName)
    if (!domain) throw configError(`Cannot register category "${name}": domain "${domainName}" is not registered`)
    if (!NAME.test(name)) throw configError(`Category name "${name}" is not a valid name`)
    refuseUnknownOptions(`Category "${domainName}.${name}"`, options, CATEGORY_KEYS)
    if (options.secureAccess !== undefined && typeof options.secureAccess !== 'function') {
      throw configError(`Category "${domainName}.${name}": secureAccess must be a function`)
    }
    const filters = (options.filters ?? []).map((spec) => {
      const { name: filterName, ...opts } = typeof spec === 'string' ? { name: spec } : spec
      const filter = this.#filters.get(filterName)
      if (!filter) {
        throw configError(
          `Category "${domainName}.${name}" names filter "${filterName}", which is not registered; registered filters: ${[...this.#filters.keys()].join(', ')}`,
        )
      }
      return { filter, options: opts as Record<string, unknown> }
    })
    const category: RegisteredCategory = {
      name,
      filters,
      secureAccess: options.secureAccess,
      sizes: options.sizes,
      allowRedirect: options.allowRedirect === true,
      variants: namedVariants(`${domainName}.${name}`, options.variants),
      stripMetadata: options.stripMetadata !== false,
      scan: scanSetting(`${domainName}.${name}`, options.scan),
    }
    domain.categories.set(name, category)
    return category
  }

  /** The domain, or a 400 `unknown-domain`. Domains are never created from a request. */
  domain(name: string): RegisteredDomain {
    const d = typeof name === 'string' ? this.#domains.get(name) : undefined
    if (!d) throw badRequest(`Unknown domain "${String(name)}"`, 'unknown-domain')
    return d
  }

  /** The category, or a 400 `unknown-category` (or `unknown-domain`). */
  category(domainName: string, name: string): RegisteredCategory {
    const c = this.domain(domainName).categories.get(name)
    if (!c) throw badRequest(`Unknown category "${String(name)}" in domain "${domainName}"`, 'unknown-category')
    return c
  }

  /** A filter that a request's `filters` object may name, or undefined (ignored with a warning). */
  requestFilter(name: string): AttachFilter | undefined {
    return this.#requestFilters.has(name) ? this.#filters.get(name) : undefined
  }

  /** Every registered domain. */
  domains(): RegisteredDomain[] {
    return [...this.#domains.values()]
  }

  /** @internal Throws unless ready; for the service's own checks. */
  assertReady(): void {
    if (!this.#ready) throw new AttachStorageError('not-ready', 'The attach storage service has not initialised', { status: 503 })
  }
}

/** Checks a category's named variants with the settings' own schema (names, boxes, formats, how many). */
function namedVariants(where: string, input: Record<string, NamedVariant> | undefined): Map<string, NamedVariant> {
  const result = v.safeParse(NamedVariantsSchema, input ?? {})
  if (!result.success) throw configError(`Category "${where}": ${describeIssue(result.issues[0], 'variants')}`)
  return new Map(Object.entries(result.output))
}

/** Checks a category's scan setting with the settings' own schema. */
function scanSetting(where: string, input: CategoryOptions['scan']): ScanSetting | undefined {
  if (input === undefined) return undefined
  const result = v.safeParse(ScanSchema, input)
  if (!result.success) throw configError(`Category "${where}": ${describeIssue(result.issues[0], 'scan')}`)
  return result.output
}
