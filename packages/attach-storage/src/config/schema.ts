import * as v from 'valibot'
import { configError } from '../errors.js'
import type { FileDescription } from '../service/types.js'
import { suggestion } from './nearest.js'
import { parseSize } from './units.js'
import { PreviewsSchema } from './previews-schema.js'
import { duration } from './setting-types.js'

/**
 * The store types the spec names, with the package that implements each (`local` is the core's own).
 * Each store package checks its own settings (required ones included) through `attach-storage/store-kit`
 * when the core creates the store at start; the core only names the package to install when it is missing.
 */
export const STORE_PACKAGES: Readonly<Record<string, string | undefined>> = {
  local: undefined,
  s3: '@attach-storage/store-s3',
  azure: '@attach-storage/store-azure',
  sftp: '@attach-storage/store-sftp',
  ftp: '@attach-storage/store-ftp',
}

/** The per-category secure-access function: `true` allows; `false` or a throw refuses (403). */
export type SecureAccessFunction = (request: Request, file: FileDescription) => boolean | Promise<boolean>

/**
 * Who may change an entity's attachments at all (a per-domain hook consulted by the confirmed save and
 * `commitAttachContainer()`): `true` allows; `false` or a throw refuses (403 `forbidden`).
 */
export type EntityChangeGuard = (
  user: import('../service/types.js').AuthUser | null,
  refKey: string,
  request: Request | null,
  /**
   * `trx`: the host's transaction when the commit runs in one (`commitAttachContainer({trx})`): read
   * the entity through it (it alone sees the new row; on SQLite it holds the only connection).
   */
  context?: { trx: import('kysely').Transaction<any> | undefined },
) => boolean | Promise<boolean>

/** One size a category allows for resized views (`w` and/or `h`, pixels). */
export interface AllowedSize {
  w?: number
  h?: number
}

/** One entry of a category's filter chain: a registered filter's name, or `{name, ...options}`. */
export type FilterSpec = string | ({ name: string } & Record<string, unknown>)

const sizeValue = v.union([v.number(), v.string()])

const FilterSpecSchema = v.union([v.pipe(v.string(), v.nonEmpty()), v.looseObject({ name: v.pipe(v.string(), v.nonEmpty()) })])

/** A store, domain, category or variant name: 1-64 letters, digits, `_` or `-`. */
const NAME = v.pipe(v.string(), v.regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/, 'must be 1-64 letters, digits, _ or -'))

/** Most named variants one category may declare: each saved image of it costs one job per name. */
export const MAX_NAMED_VARIANTS = 8

/** The job queues named variants can run on (`variants.queue`). */
export const VARIANT_QUEUES = ['auto', 'memory', 'pg-boss'] as const

/**
 * A category's named variants: at most {@link MAX_NAMED_VARIANTS}, each a box (`w` and/or `h`,
 * 1..4096) and an optional output format. The registry checks `registerCategory()`'s with it too.
 */
export const NamedVariantsSchema = v.pipe(
  v.record(
    NAME,
    v.pipe(
      v.object({
        w: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(4096))),
        h: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(4096))),
        format: v.optional(v.picklist(['webp', 'avif', 'jpeg', 'png'], 'must be one of webp, avif, jpeg, png')),
        /** `cover`: the exact box (both `w` and `h`), cropped around the record's focus. @default 'inside' */
        fit: v.optional(v.picklist(['cover', 'inside'], 'must be cover or inside')),
      }),
      v.check((x) => x.w !== undefined || x.h !== undefined, 'a variant needs w or h'),
      v.check((x) => x.fit !== 'cover' || (x.w !== undefined && x.h !== undefined), 'a cover variant needs both w and h'),
    ),
  ),
  v.check((x) => Object.keys(x).length <= MAX_NAMED_VARIANTS, `at most ${MAX_NAMED_VARIANTS} named variants per category`),
)

/** A category's `scan` setting: where clamd listens and what a failed scan does. */
export const ScanSchema = v.object({
  /** `tcp://host:port` or `unix:/path/to/clamd.ctl`. */
  clamd: v.pipe(
    v.string(),
    v.regex(/^(tcp:\/\/(\[[0-9a-fA-F:.]+\]|[^:/\s[\]]+):\d{1,5}\/?|unix:\/.+)$/, 'must be tcp://host:port or unix:/path'),
  ),
  /** `refuse`: no verdict answers 503 `scan-unavailable`; `accept`: the file is kept and a warning logged. @default 'refuse' */
  onError: v.optional(v.picklist(['refuse', 'accept'], 'must be refuse or accept'), 'refuse'),
})

/** A category's scan setting as parsed. */
export type ScanSetting = v.InferOutput<typeof ScanSchema>

const CategorySchema = v.object({
  /** The category's filter chain, run on every temporary and direct upload into it. */
  filters: v.optional(v.array(FilterSpecSchema), []),
  /** The secure-access function guarding every view, download and ZIP of the category. */
  secureAccess: v.optional(v.custom<SecureAccessFunction>((f) => typeof f === 'function', 'must be a function')),
  /**
   * The only resize boxes a view of this category may ask for (`?w=&h=`); any other size answers 400.
   * Unset: any size within 1..4096.
   * @example [{ w: 200, h: 200 }, { w: 800 }]
   */
  sizes: v.optional(
    v.array(
      v.pipe(
        v.object({
          w: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(4096))),
          h: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(4096))),
        }),
        v.check((x) => x.w !== undefined || x.h !== undefined, 'a size needs w or h'),
      ),
    ),
  ),
  /**
   * Named variants, made in the background after each save of an image into the category and served
   * with `?variant={name}` (docs/variants.md). Each is a box (`w` and/or `h`, 1..4096) and an optional
   * output format; they are always stored, whatever `resize.maxVariants` says.
   * @example { thumb: { w: 200, h: 200 }, large: { w: 1600, format: 'webp' } }
   */
  variants: v.optional(NamedVariantsSchema),
  /**
   * A guarded category's files may leave through presigned store addresses (`serve: redirect`), which
   * anyone holding one can read until it expires. Unset: a guarded category's files always stream
   * through the process, whatever its store's `serve` says. Categories without a secure-access
   * function need nothing.
   * @default false
   */
  allowRedirect: v.optional(v.boolean(), false),
  /**
   * Stored JPEG, PNG and WebP originals lose their EXIF, XMP and IPTC blocks (GPS included; the ICC
   * profile stays) and are turned upright by their EXIF orientation (docs/security.md).
   * @default true
   */
  stripMetadata: v.optional(v.boolean(), true),
  /**
   * Every file uploaded into the category is streamed to ClamAV's clamd (INSTREAM) before it is kept
   * (docs/scanning.md): a finding fails the item with `infected`; clamd unreachable answers 503
   * `scan-unavailable`, or with `onError: 'accept'` keeps the file and logs a warning.
   * @example { clamd: 'tcp://127.0.0.1:3310' }
   */
  scan: v.optional(ScanSchema),
})

const DomainSchema = v.object({
  /** Store of the domain's files; default: `defaultStore`. */
  store: v.optional(v.string()),
  /** Entity field whose date-time places files in `{yyyy}/{MM}` on a host entity save. */
  dateField: v.optional(v.string(), 'createdDt'),
  /** The domain's categories; `default` is always present. */
  categories: v.optional(v.record(NAME, CategorySchema), {}),
  /** Who may change an entity's attachments (see {@link EntityChangeGuard}); unset: any signed-in caller. */
  mayChange: v.optional(v.custom<EntityChangeGuard>((f) => typeof f === 'function', 'must be a function')),
})

/** How the binary group hands out a store's bytes (docs/serving.md). */
export const SERVE_MODES = ['stream', 'x-accel-redirect', 'x-sendfile', 'redirect'] as const

/** A store's type and the core's own settings of it; the rest belongs to the store's package. */
const StoreSchema = v.looseObject({
  type: v.optional(v.string()),
  /**
   * Who sends the bytes of views and downloads, once this process has checked access: `stream` (this
   * process), `x-accel-redirect` (nginx, from `serve-location`), `x-sendfile` (Apache or lighttpd, from
   * the file's path; local stores), `redirect` (a 302 to a presigned store address; stores with
   * `presignGet`, S3 and Azure).
   * @default 'stream'
   */
  serve: v.optional(v.picklist(SERVE_MODES, `must be one of ${SERVE_MODES.join(', ')}`)),
  /** `x-accel-redirect`: the internal nginx location that maps to this store's base directory, e.g. `/_attach/local/`. */
  serveLocation: v.optional(v.pipe(v.string(), v.regex(/^\/([A-Za-z0-9_.-]+\/)*$/, 'must be a path that starts and ends with /'))),
  /** `redirect`: how long a presigned address stays valid (a duration: `5m`, `300s`, or milliseconds). @default '5m' */
  redirectTtl: v.optional(v.union([v.number(), v.string()])),
})

const prefix = (def: string) =>
  v.optional(
    v.pipe(
      v.string(),
      v.regex(/^\/[A-Za-z0-9/_.-]*$/, 'must be a path starting with /'),
      v.transform((p) => p.replace(/\/+$/, '')),
    ),
    def,
  )

/** The whole `attach` settings tree, in camelCase. */
export const AttachConfigSchema = v.object({
  /** Master switch. @default true */
  enabled: v.optional(v.boolean(), true),
  db: v.optional(
    v.object({
      /** Kysely dialect: `sqlite` (embedded default), `postgres` or `mysql`. The spec's `jpa`/`mybatis` mean `sqlite`. */
      type: v.optional(
        v.pipe(
          v.picklist(['sqlite', 'postgres', 'mysql', 'jpa', 'mybatis']),
          v.transform((t) => (t === 'jpa' || t === 'mybatis' ? 'sqlite' : t)),
        ),
        'sqlite',
      ),
      /** Connection URL for postgres / mysql. */
      url: v.optional(v.string()),
      /** SQLite file; default `{baseDir}/attach.db`. */
      file: v.optional(v.string()),
    }),
    {},
  ),
  directory: v.optional(
    v.object({
      /** Base directory of final files; default: the OS temporary directory. */
      baseDir: v.optional(v.string()),
      /** Directory of temporary files; default `{baseDir}/.tmp`. */
      tmpDir: v.optional(v.string()),
    }),
    {},
  ),
  /** Public base address of files; must end with `/`. */
  cdnUrl: v.optional(v.pipe(v.string(), v.url('must be an absolute URL'), v.endsWith('/', 'must end with /'))),
  /** Prefix of the JSON group. @default '/api/storage' */
  apiPrefix: prefix('/api/storage'),
  /** Prefix of the binary group. @default '/assets/storage' */
  assetsPrefix: prefix('/assets/storage'),
  /** Name of the store used by default. @default 'local' */
  defaultStore: v.optional(v.string(), 'local'),
  /** Declared stores by name. A `local` store is implicit when none is declared under that name. */
  stores: v.optional(v.record(v.string(), StoreSchema), {}),
  /** The spec's `attach.s3.*`: the settings of an implicit store named `s3`. */
  s3: v.optional(v.looseObject({})),
  /** Store holding temporary files; default: a local store on `directory.tmpDir`. */
  tmpStore: v.optional(v.string()),
  /** Store that direct-to-cloud uploads (`attach/presign`) write to, under `_tmp/`; default: the temporary store. */
  presignStore: v.optional(v.string()),
  /** IANA zone whose month places files in `{yyyy}/{MM}`. @default 'UTC' */
  timeZone: v.optional(
    v.pipe(
      v.string(),
      v.check((tz) => {
        try {
          new Intl.DateTimeFormat('en-US', { timeZone: tz })
          return true
        } catch {
          return false
        }
      }, 'must be an IANA time zone'),
    ),
    'UTC',
  ),
  /** Lifetime of temporary files (`"24h"`, `"30m"`, or seconds). @default '24h' */
  tmpTtl: duration('24h', '24h'),
  upload: v.optional(
    v.object({
      /** Largest accepted file (bytes, or `"100MB"`); larger answers 413. @default '100MB' */
      maxFileSize: v.optional(
        v.pipe(
          sizeValue,
          v.transform((x) => parseSize(x)),
          v.number('must be a size'),
          v.minValue(1),
        ),
        '100MB',
      ),
      /** Largest accepted request body; default: maxFileSize × maxFiles plus 1 MiB of fields. */
      maxRequestSize: v.optional(
        v.pipe(
          sizeValue,
          v.transform((x) => parseSize(x)),
          v.number('must be a size'),
          v.minValue(1),
        ),
      ),
      /** Most files in one upload request. @default 20 */
      maxFiles: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 20),
      /** Most text parts in one multipart request; more answers 400. @default 32 */
      maxFields: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 32),
      /** Largest multipart text part (bytes, or `"64KB"`); larger answers 413. @default '64KB' */
      maxFieldSize: v.optional(
        v.pipe(
          sizeValue,
          v.transform((x) => parseSize(x)),
          v.number('must be a size'),
          v.minValue(1),
        ),
        '64KB',
      ),
      /**
       * Most bytes one user may hold pending (bytes, or `"2GB"`): temporary files not yet committed, unfinished
       * tus uploads (their `Upload-Length`) and presigned uploads not yet committed. Past it an upload, tus
       * creation or presign answers 413 `quota-exceeded`; a commit, termination, expiry or deletion frees it.
       * `0` turns the quota off. @default '2GB'
       */
      userQuota: v.optional(
        v.pipe(
          sizeValue,
          v.transform((x) => parseSize(x)),
          v.number('must be a size'),
          v.minValue(0),
        ),
        '2GB',
      ),
    }),
    {},
  ),
  /** The confirmed save and `commitAttachContainer()`. */
  save: v.optional(
    v.object({
      /**
       * Most entries one save may hold in all (new files, reuses, re-sorts and `_deleted` together); more
       * answers 400 `too-many-entries` before anything is read or changed. @default 1000
       */
      maxEntries: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(100_000)), 1000),
    }),
    {},
  ),
  /** Resumable uploads (tus 1.0) at `{api-prefix}/attach/tus` (docs/resumable.md). */
  resumable: v.optional(
    v.object({
      /** Serves the tus routes. @default false */
      enabled: v.optional(v.boolean(), false),
      /**
       * Largest part object a PATCH's bytes are kept in on a store without local files (bytes, or `"8MB"`);
       * a dropped connection loses at most the part being written. @default '8MB'
       */
      partSize: v.optional(
        v.pipe(
          sizeValue,
          v.transform((x) => parseSize(x)),
          v.number('must be a size'),
          v.minValue(64 * 1024),
        ),
        '8MB',
      ),
      /** Most part objects of one upload; a PATCH beyond it answers 400 (send larger chunks). @default 10000 */
      maxParts: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 10_000),
    }),
    {},
  ),
  resize: v.optional(
    v.object({
      /** Largest image (width × height) the resizer decodes; larger ones are served as they are. @default 100000000 */
      maxInputPixels: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 100_000_000),
      /**
       * Most stored variants per attachment; a further size is made on the fly and not stored.
       * @default 16
       */
      maxVariants: v.optional(v.pipe(v.number(), v.integer(), v.minValue(0)), 16),
      /** Most resizes running at once in this process. @default 2 */
      concurrency: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 2),
      /** Most resizes waiting for a slot; beyond it a view answers 503 with `Retry-After`. @default 16 */
      queue: v.optional(v.pipe(v.number(), v.integer(), v.minValue(0)), 16),
      /**
       * How long a size made on the fly but not stored (past `maxVariants`) is kept in memory, so a repeated
       * request does not run the resizer again (`"10m"`, or seconds). @default '10m'
       */
      memoryTtl: duration('10m', '10m'),
      /** Most bytes the in-memory variants of `memoryTtl` may hold in all (bytes, or `"64MB"`). @default '64MB' */
      memoryBytes: v.optional(
        v.pipe(
          sizeValue,
          v.transform((x) => parseSize(x)),
          v.number('must be a size'),
          v.minValue(0),
        ),
        '64MB',
      ),
    }),
    {},
  ),
  /**
   * Previews of PDFs (their first page) and videos (a frame), and the analysis of video, audio and PDFs
   * into `media`, made in the background on the named-variant queue (docs/previews.md).
   */
  previews: v.optional(PreviewsSchema, {}),
  /** How named variants are made in the background (docs/variants.md). */
  variantJobs: v.optional(
    v.object({
      /**
       * Where the jobs wait: `memory` (this process; lost with it, made on first view instead), `pg-boss`
       * (in the PostgreSQL database: every instance shares the work and a crash loses no job), `auto`
       * (pg-boss when `db.type` is postgres, else memory).
       * @default 'auto'
       */
      queue: v.optional(v.picklist(VARIANT_QUEUES, `must be one of ${VARIANT_QUEUES.join(', ')}`), 'auto'),
      /** This instance makes variants; `false`: it only queues them for the instances that do. @default true */
      worker: v.optional(v.boolean(), true),
      /** Jobs one instance runs at once (each is one resize). @default 1 */
      concurrency: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1), v.maxValue(64)), 1),
      /** `memory`: most jobs waiting; further ones are dropped (and made on first view). @default 10000 */
      maxQueued: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 10_000),
      /** Times a failed job is tried again (with a growing delay). @default 3 */
      retryLimit: v.optional(v.pipe(v.number(), v.integer(), v.minValue(0), v.maxValue(100)), 3),
      /** `pg-boss`: a job running longer than this is taken to have died with its instance, and retried. @default '10m' */
      jobTimeout: duration('10m', '10m'),
      /** `pg-boss`: more options of its constructor (`schema`, `maintenanceIntervalSeconds`, ...), passed as they are. */
      pgBoss: v.optional(v.record(v.string(), v.unknown()), {}),
    }),
    {},
  ),
  zip: v.optional(
    v.object({
      /** Most ids one ZIP request may name. @default 500 */
      maxFiles: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 500),
      /**
       * Most ZIP downloads streaming at once in this process; one more answers 503 `busy` with
       * `Retry-After`. Each reads up to `maxFiles` files and deflates them. @default 4
       */
      concurrency: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 4),
      /** Most input bytes (the files' sizes added up) one ZIP may hold; more answers 413. @default '4GB' */
      maxBytes: v.optional(
        v.pipe(
          sizeValue,
          v.transform((x) => parseSize(x)),
          v.number('must be a size'),
          v.minValue(1),
        ),
        '4GB',
      ),
    }),
    {},
  ),
  /** Signed view URLs of guarded categories (see docs/security.md). */
  signing: v.optional(
    v.object({
      /** HMAC secret (at least 16 bytes); unset: no signed URLs, guarded `url`s need the caller's own credentials. */
      secret: v.optional(v.pipe(v.string(), v.minLength(16, 'must be at least 16 characters'))),
      /** Lifetime of a signed URL (`"10m"`, or seconds). @default '1h' */
      ttl: duration('10m', '1h'),
    }),
    {},
  ),
  /** Domains by code. Domains are never created from a request. */
  domains: v.optional(v.record(NAME, DomainSchema), {}),
})

/**
 * The `attach` settings tree as a host writes it in code (camelCase; `createAttachStorage()` also takes
 * the kebab-case keys of a file). docs/configuration.md lists every setting and its default.
 *
 * @example
 * const config: AttachConfigInput = {
 *   directory: { baseDir: './data/files', tmpDir: './data/tmp' },
 *   domains: { post: { dateField: 'created_dt', categories: { image: { filters: ['image'] } } } },
 * }
 */
export type AttachConfigInput = v.InferInput<typeof AttachConfigSchema>
/** The settings tree once validated, with every default applied: what `storage.config` holds. */
export type AttachConfigParsed = v.InferOutput<typeof AttachConfigSchema>
/**
 * One category of a domain as a host writes it (`domains.<domain>.categories.<category>`): its filter
 * chain, its secure-access function, the sizes its resized views may have.
 *
 * @example
 * const image: CategoryConfig = { filters: ['image', { name: 'size', maxSize: '5MB' }], sizes: [{ w: 200, h: 200 }] }
 */
export type CategoryConfig = v.InferInput<typeof CategorySchema>
/**
 * One domain as a host writes it (`domains.<domain>`): its store, the entity field that dates its files,
 * its categories (`default` is always there) and who may change an entity's attachments.
 */
export type DomainConfig = v.InferInput<typeof DomainSchema>

/** Map keys that are names (kept as written) rather than setting keys (turned to camelCase). */
const NAME_MAPS = new Set(['stores', 'domains', 'categories', 'variants'])

const camel = (k: string) => k.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase())

/**
 * Turns the spec's kebab-case keys (`base-dir`, `default-store`) into camelCase, leaving the names
 * under `stores`, `domains`, `categories` and a category's `variants` as they are. camelCase input passes unchanged.
 */
export function camelizeSettings(value: unknown, parentKey?: string): unknown {
  if (Array.isArray(value)) return value.map((x) => camelizeSettings(x))
  if (value === null || typeof value !== 'object' || typeof value === 'function') return value
  if (Object.getPrototypeOf(value) !== Object.prototype && Object.getPrototypeOf(value) !== null) return value
  const out: Record<string, unknown> = {}
  const isNameMap = parentKey !== undefined && NAME_MAPS.has(parentKey)
  for (const [k, val] of Object.entries(value)) {
    const key = isNameMap ? k : camel(k)
    out[key] = isNameMap ? camelizeSettings(val) : camelizeSettings(val, key)
  }
  return out
}

/**
 * Validates a settings tree (kebab-case or camelCase, with or without the top-level `attach` key) and
 * applies the defaults. Throws `config-invalid` with every problem named by its path.
 */
export function parseAttachConfig(input: unknown): AttachConfigParsed {
  let tree = input
  if (tree && typeof tree === 'object' && 'attach' in tree && Object.keys(tree).length === 1) {
    tree = (tree as { attach: unknown }).attach
  }
  const camelized = camelizeSettings(tree ?? {})
  refuseUnknownKeys(AttachConfigSchema, camelized, 'attach')
  const result = v.safeParse(AttachConfigSchema, camelized)
  if (!result.success) {
    const problems = result.issues.map((issue) => {
      const path = v.getDotPath(issue)
      return `attach${path ? `.${path}` : ''}: ${issue.message}`
    })
    throw configError(`Invalid attach configuration:\n  ${problems.join('\n  ')}`)
  }
  return result.output
}

const kebab = (k: string) => k.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)

/** The schema kinds walked by {@link refuseUnknownKeys}; valibot's own objects carry these fields. */
interface WalkedSchema {
  type: string
  wrapped?: WalkedSchema
  entries?: Record<string, WalkedSchema>
  value?: WalkedSchema
  item?: WalkedSchema
}

/**
 * Refuses the first key of `value` that `schema` does not know, with its path in kebab-case and the
 * nearest known name: `unknown setting attach.tmp-tll; did you mean tmp-ttl?` (`config-invalid`, one line).
 * Open parts stay open: the names of a record (`stores`, `domains`, `categories`, `variants`), loose
 * objects (a store's settings, `s3`, checked by the store's own schema), `pgBoss` and filter options.
 */
export function refuseUnknownKeys(schema: unknown, value: unknown, path: string): void {
  let s = schema as WalkedSchema
  while (s.wrapped && (s.type === 'optional' || s.type === 'nullable' || s.type === 'nullish')) s = s.wrapped
  if (value === null || typeof value !== 'object') return
  if (s.type === 'object' && s.entries && !Array.isArray(value)) {
    const entries = s.entries
    for (const [key, val] of Object.entries(value)) {
      const name = kebab(key)
      if (!Object.hasOwn(entries, key)) {
        throw configError(`unknown setting ${path}.${name}; ${suggestion(name, Object.keys(entries).map(kebab))}`)
      }
      refuseUnknownKeys(entries[key], val, `${path}.${name}`)
    }
  } else if (s.type === 'record' && s.value && !Array.isArray(value)) {
    for (const [key, val] of Object.entries(value)) refuseUnknownKeys(s.value, val, `${path}.${key}`)
  } else if (s.type === 'array' && s.item && Array.isArray(value)) {
    for (const [i, val] of value.entries()) refuseUnknownKeys(s.item, val, `${path}.${i}`)
  }
}

/** Checks the cross-references that one schema cannot: store declarations and the stores named. */
export function checkStoreDeclarations(
  stores: Record<string, Record<string, unknown>>,
  config: Pick<AttachConfigParsed, 'defaultStore' | 'domains' | 'tmpStore' | 'presignStore'>,
  customTypes: ReadonlySet<string>,
): void {
  const declared = Object.keys(stores)
  const list = declared.length ? declared.join(', ') : '(none)'
  for (const [name, settings] of Object.entries(stores)) {
    const type = settings.type
    if (typeof type !== 'string' || type === '') {
      throw configError(`attach.stores.${name}: "type" is required (one of ${Object.keys(STORE_PACKAGES).join(', ')})`)
    }
    if (!Object.hasOwn(STORE_PACKAGES, type) && !customTypes.has(type)) {
      throw configError(
        `attach.stores.${name}: no adapter exists for store type "${type}" (known: ${Object.keys(STORE_PACKAGES).join(', ')})`,
      )
    }
  }
  const named: Array<[string, string]> = [['attach.default-store', config.defaultStore]]
  if (config.tmpStore) named.push(['attach.tmp-store', config.tmpStore])
  if (config.presignStore) named.push(['attach.presign-store', config.presignStore])
  for (const [domain, d] of Object.entries(config.domains)) {
    if (d.store) named.push([`attach.domains.${domain}.store`, d.store])
  }
  for (const [where, store] of named) {
    if (!(store in stores)) {
      throw configError(`${where} names store "${store}", which is not declared; declared stores: ${list}`)
    }
  }
}
