import * as v from 'valibot'
import { AttachStorageError } from '../errors.js'
import { parseDuration, parseSize } from '../config/units.js'
import { redact } from './errors.js'
import { storePrefix } from './keys.js'

/** Any valibot schema of one setting: it receives the raw value (`undefined` when the setting is absent). */
export type SettingSchema = v.GenericSchema<unknown, unknown>

/** The validated settings of a {@link defineStoreSettings} declaration. */
export type StoreSettingsOutput<E extends Record<string, SettingSchema>> = { [K in keyof E]: v.InferOutput<E[K]> }

/** What a store declares about its settings. */
export interface StoreSettingsSpec<E extends Record<string, SettingSchema>> {
  /** The store type, as written after `type:` in a configuration (`sftp`). */
  type: string
  /** One schema per setting, camelCase keys. Build them with {@link setting} or any valibot schema. */
  entries: E
  /** Settings that must be given (camelCase). Missing ones fail with one message naming them all. */
  required?: readonly (keyof E & string)[]
  /** Settings whose values never appear in a message (passwords, keys, connection strings). */
  secrets?: readonly (keyof E & string)[]
  /** Near misses of setting names, `{ username: 'user' }`, offered as "did you mean". */
  hints?: Readonly<Record<string, string>>
}

/** A store's settings declaration, made by {@link defineStoreSettings}. */
export interface StoreSettings<E extends Record<string, SettingSchema>> {
  /** The store type these settings belong to (`s3`, `sftp`, ...). */
  readonly type: string
  /** The settings that must be given. */
  readonly required: readonly string[]
  /** The settings whose values are masked in every message. */
  readonly secrets: readonly string[]
  /** The schema of each setting, by camelCase name. */
  readonly entries: E
  /**
   * Validates the settings of store `name` (kebab-case or camelCase keys) and applies the defaults.
   * Throws `config-invalid` (500) naming every problem by its setting, `attach.stores.<name>.<setting>`,
   * with every secret value masked. `required` overrides the declared list (a setting that another
   * option makes optional).
   */
  parse(name: string, settings: unknown, options?: { required?: readonly string[] }): StoreSettingsOutput<E>
  /** The secret values of a settings object (for masking later messages). */
  secretValues(settings: unknown): string[]
}

/** Settings the core reads itself; every store accepts them. */
const CORE_KEYS = new Set(['type', 'cdnUrl'])

const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)
const camel = (key: string): string => key.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase())

const isAbsent = (value: unknown): boolean => value === undefined || value === null || (typeof value === 'string' && value.trim() === '')

/**
 * The `config-invalid` error of one setting, in the kit's wording: `attach.stores.<name>.<setting> <problem>`.
 * For checks a schema cannot make alone (two settings that go together).
 *
 * @example
 * throw settingsError('files', 'secretKey', 'goes with "access-key"')
 */
export function settingsError(name: string, key: string | undefined, problem: string, secrets: readonly string[] = []): AttachStorageError {
  const where = key === undefined ? `attach.stores.${name}:` : `attach.stores.${name}.${kebab(key)}`
  return new AttachStorageError('config-invalid', redact(`${where} ${problem}`, secrets), { status: 500 })
}

/**
 * Declares the settings of a store type: a valibot schema per setting, the required ones and the
 * secret ones. Kebab-case and camelCase keys are both accepted, as in the core's configuration.
 *
 * @example
 * const settings = defineStoreSettings({
 *   type: 'webdav',
 *   required: ['url'],
 *   secrets: ['password'],
 *   entries: {
 *     url: setting.text(),
 *     password: setting.text(),
 *     prefix: setting.prefix(),
 *     timeout: setting.duration(30_000),
 *   },
 * })
 * const s = settings.parse('files', { url: 'https://dav.example.com', 'time-out': '10s' })
 */
export function defineStoreSettings<E extends Record<string, SettingSchema>>(spec: StoreSettingsSpec<E>): StoreSettings<E> {
  const keys = Object.keys(spec.entries)
  const secrets = [...(spec.secrets ?? [])]
  const camelize = (input: Record<string, unknown>): Record<string, unknown> => {
    const out: Record<string, unknown> = {}
    for (const [k, value] of Object.entries(input)) out[k in spec.entries || CORE_KEYS.has(k) ? k : camel(k)] = value
    return out
  }
  const secretValues = (input: unknown): string[] => {
    if (input === null || typeof input !== 'object') return []
    const settings = camelize(input as Record<string, unknown>)
    return secrets
      .map((k) => settings[k])
      .filter((value) => value !== undefined && value !== null && typeof value !== 'object')
      .map(String)
  }
  return {
    type: spec.type,
    required: spec.required ?? [],
    secrets,
    entries: spec.entries,
    secretValues,
    parse(name, input, options = {}) {
      const where = `attach.stores.${name}`
      if (input === null || typeof input !== 'object' || Array.isArray(input)) {
        throw new AttachStorageError('config-invalid', `${where} (type ${spec.type}): its settings must be an object`, { status: 500 })
      }
      const settings = camelize(input as Record<string, unknown>)
      const hidden = secretValues(settings)
      const fail = (message: string): never => {
        throw new AttachStorageError('config-invalid', redact(message, hidden), { status: 500 })
      }
      const missing = (options.required ?? spec.required ?? []).filter((k) => isAbsent(settings[k]))
      if (missing.length) {
        fail(`${where} (type ${spec.type}) is missing required settings: ${missing.map(kebab).join(', ')}`)
      }
      const problems: string[] = []
      for (const key of Object.keys(settings)) {
        if (key in spec.entries || CORE_KEYS.has(key) || settings[key] === undefined) continue
        const hint = spec.hints?.[key]
        problems.push(`${where}: unknown setting "${kebab(key)}"${hint ? ` (did you mean "${kebab(hint)}"?)` : ''}`)
      }
      if (problems.length) problems.push(`${where}: known settings: ${keys.map(kebab).join(', ')}`)
      const output: Record<string, unknown> = {}
      for (const key of keys) {
        const result = v.safeParse(spec.entries[key]!, settings[key])
        if (result.success) output[key] = result.output
        else problems.push(`${where}.${kebab(key)} ${result.issues[0].message}`)
      }
      if (problems.length) fail(problems.join('; '))
      return output as StoreSettingsOutput<E>
    },
  }
}

// ----------------------------------------------------------------------------------------------------

const INVALID = Symbol('invalid')

/** A setting read by `parse` from the raw value; absent (`undefined`, `null`, `''`) gives `fallback`. */
function custom<T, F extends T | undefined>(
  parse: (value: unknown) => T | typeof INVALID,
  message: string | ((value: unknown) => string),
  fallback: F,
): v.GenericSchema<unknown, T | F> {
  return v.pipe(
    v.unknown(),
    v.rawTransform(({ dataset, addIssue, NEVER }) => {
      const value = dataset.value
      if (value === undefined || value === null || value === '') return fallback
      const out = parse(value)
      if (out === INVALID) {
        addIssue({ message: typeof message === 'string' ? message : message(value) })
        return NEVER
      }
      return out
    }),
  ) as v.GenericSchema<unknown, T | F>
}

const MiB = 1024 * 1024
const describeSize = (bytes: number): string =>
  bytes >= 1024 * MiB && bytes % (1024 * MiB) === 0
    ? `${bytes / (1024 * MiB)} GiB`
    : bytes >= MiB && bytes % MiB === 0
      ? `${bytes / MiB} MiB`
      : bytes >= 1024 && bytes % 1024 === 0
        ? `${bytes / 1024} KiB`
        : `${bytes} bytes`

/**
 * Schemas of the usual kinds of store settings, accepting values as a configuration file gives them
 * (`"5"`, `"true"`, `"10s"`, `"8MB"`). Each answers `undefined` or its `fallback` for an absent setting.
 */
export const setting = {
  /** A string (`undefined` when absent). */
  text: <F extends string | undefined = undefined>(fallback?: F) =>
    custom<string, F>((x) => (typeof x === 'string' ? x : INVALID), 'must be a string', fallback as F),
  /** `true` / `false`, or the strings `"true"` / `"false"`. */
  flag: (fallback: boolean) =>
    custom<boolean, boolean>(
      (x) => (x === true || x === 'true' ? true : x === false || x === 'false' ? false : INVALID),
      'must be true or false',
      fallback,
    ),
  /** An integer from `min` to `max` (a number, or a string of digits). */
  integer: <F extends number | undefined>(min: number, max: number, fallback: F) =>
    custom<number, F>(
      (x) => {
        const n = typeof x === 'string' && /^\s*\d+\s*$/.test(x) ? Number(x) : x
        return typeof n === 'number' && Number.isSafeInteger(n) && n >= min && n <= max ? n : INVALID
      },
      `must be an integer from ${min} to ${max}`,
      fallback,
    ),
  /**
   * A duration in milliseconds: a number of seconds or a string with its unit (`"500ms"`, `"30s"`,
   * `"2m"`), from `min` to `max` milliseconds.
   */
  duration: <F extends number | undefined>(fallback: F, range: { min?: number; max?: number } = {}) => {
    const { min = 0, max = Number.MAX_SAFE_INTEGER } = range
    const bounds =
      min > 0 && max < Number.MAX_SAFE_INTEGER
        ? `, from ${min / 1000} s to ${max / 1000} s`
        : min > 0
          ? `, at least ${min / 1000} s`
          : max < Number.MAX_SAFE_INTEGER
            ? `, at most ${max / 1000} s`
            : ''
    return custom<number, F>(
      (x) => {
        const ms = parseDuration(x)
        return ms !== undefined && ms >= min && ms <= max ? ms : INVALID
      },
      `must be a number of seconds or a duration such as "30s" or "500ms"${bounds}`,
      fallback,
    )
  },
  /** A size in bytes from `min` to `max`: a number of bytes or a string with its unit (`"8MB"`; binary units). */
  size: <F extends number | undefined>(fallback: F, min: number, max: number) =>
    custom<number, F>(
      (x) => {
        const bytes = parseSize(x)
        return bytes !== undefined && bytes >= min && bytes <= max ? bytes : INVALID
      },
      `must be a size from ${describeSize(min)} to ${describeSize(max)}: a number of bytes, or a string such as "8MB"`,
      fallback,
    ),
  /** One of `values`. */
  oneOf: <T extends string, F extends T | undefined>(values: readonly T[], fallback: F) =>
    custom<T, F>(
      (x) => (typeof x === 'string' && (values as readonly string[]).includes(x) ? (x as T) : INVALID),
      `must be one of ${values.join(', ')}`,
      fallback,
    ),
  /** A store prefix (see {@link storePrefix}): `''` when absent, otherwise a folder ending with `/`. */
  prefix: () =>
    custom<string, string>(
      (x) => {
        if (typeof x !== 'string') return INVALID
        try {
          return storePrefix(x)
        } catch {
          return INVALID
        }
      },
      'is not a valid key prefix: segments of letters, digits, "-", "_" and ".", without "..", "." or "//"',
      '',
    ),
  /** A value checked by `test`, with `message` when it fails. */
  check: <T>(test: (value: unknown) => value is T, message: string) =>
    custom<T, undefined>((x) => (test(x) ? x : INVALID), message, undefined),
}
