import { AttachStorageError, normalizePrefix, parseDuration, parseSize } from 'attach-storage'

const MiB = 1024 * 1024
const GiB = 1024 * MiB

/** S3's smallest part (all but the last) of a multipart upload or copy. */
export const MIN_PART_SIZE = 5 * MiB
/** S3's largest part, and the largest object a single CopyObject copies. */
export const MAX_PART_SIZE = 5 * GiB

/** How the SDK treats request and response checksums (`@aws-sdk/client-s3`'s own values). */
export type ChecksumMode = 'WHEN_SUPPORTED' | 'WHEN_REQUIRED'

/**
 * The settings of an S3 store, as declared under `attach.stores.<name>` (kebab-case in a file,
 * camelCase here). Only `bucket` and `region` are required.
 *
 * Durations are a number of seconds or a string with its unit (`"500ms"`, `"10s"`, `"2m"`), and sizes
 * a number of bytes or a string with its unit (`"8MB"`, `"1GiB"`; binary units), as everywhere in the
 * `attach` settings.
 *
 * @example
 * // attach.yaml
 * // attach:
 * //   stores:
 * //     files: { type: s3, bucket: my-bucket, region: eu-central-1, prefix: attach/ }
 */
export interface S3StoreSettings {
  /** The bucket that holds the objects. Required. */
  bucket: string
  /** The bucket's region, e.g. `eu-central-1`; any value (`us-east-1`) for most S3-compatible servers. Required unless a ready `client` is given. */
  region?: string
  /** Access key id. Give it with `secretKey`, or give neither to use the SDK's default credential provider chain (environment, shared config files, SSO, container and instance roles). */
  accessKey?: string
  /** Secret access key; never appears in an error message. */
  secretKey?: string
  /** Session token of temporary credentials (with `accessKey` and `secretKey`). */
  sessionToken?: string
  /** Endpoint of an S3-compatible server (`http://127.0.0.1:9000`); default: AWS's endpoint of the region. */
  endpoint?: string
  /** Path-style addresses (`<endpoint>/<bucket>/<key>`) instead of virtual-hosted ones; most S3-compatible servers need it. @default false */
  forcePathStyle?: boolean | string
  /** Key prefix inside the bucket (a folder, e.g. `attach/`); every key of the store lives below it. @default '' */
  prefix?: string
  /** Public base address of the objects; read by the core (records' `cdnUrl`), ignored by the store. */
  cdnUrl?: string
  /**
   * When the SDK adds request checksums. `WHEN_SUPPORTED` (the SDK's default against AWS) sends streamed
   * bodies `aws-chunked` with a trailing CRC32, which some S3-compatible servers store verbatim.
   * @default 'WHEN_REQUIRED' when `endpoint` is set, else the SDK's default (`WHEN_SUPPORTED`)
   */
  requestChecksumCalculation?: ChecksumMode | Lowercase<ChecksumMode> | string
  /** When the SDK validates response checksums. @default as `requestChecksumCalculation` */
  responseChecksumValidation?: ChecksumMode | Lowercase<ChecksumMode> | string
  /** Longest wait for a TCP (and TLS) connection. @default '10s' */
  connectTimeout?: number | string
  /** Longest silence on an open connection (request or response) before the request fails. @default '60s' */
  socketTimeout?: number | string
  /** Attempts per request, the first included (the SDK retries throttling, 5xx and connection errors). @default 3 */
  maxAttempts?: number | string
  /** Part size of multipart uploads (5 MiB – 5 GiB); raised as needed to stay within 10,000 parts. @default '8MB' */
  partSize?: number | string
  /** Parts uploaded (or copied) in parallel by one `put` (or `copy`). Memory use of a put is about `queueSize × partSize`. @default 4 */
  queueSize?: number | string
  /** Objects larger than this are copied part by part (UploadPartCopy) instead of with one CopyObject (5 MiB – 5 GiB). @default '5GB' */
  multipartCopyThreshold?: number | string
  /** Part size of multipart copies (5 MiB – 5 GiB). @default '512MB' */
  copyPartSize?: number | string
  /** `createStore()` checks the bucket and credentials with one HeadBucket request, so a wrong setting fails the start. @default false */
  verifyOnStart?: boolean | string
}

/** The settings after validation, with defaults applied. */
export interface ResolvedS3Settings {
  bucket: string
  region: string | undefined
  credentials: { accessKeyId: string; secretAccessKey: string; sessionToken?: string } | undefined
  endpoint: string | undefined
  forcePathStyle: boolean
  prefix: string
  requestChecksumCalculation: ChecksumMode | undefined
  responseChecksumValidation: ChecksumMode | undefined
  connectTimeout: number
  socketTimeout: number
  maxAttempts: number
  partSize: number
  queueSize: number
  multipartCopyThreshold: number
  copyPartSize: number
  verifyOnStart: boolean
}

/** Every setting an S3 store reads; `type` is the core's. */
export const KNOWN_SETTINGS = [
  'type',
  'bucket',
  'region',
  'accessKey',
  'secretKey',
  'sessionToken',
  'endpoint',
  'forcePathStyle',
  'prefix',
  'cdnUrl',
  'requestChecksumCalculation',
  'responseChecksumValidation',
  'connectTimeout',
  'socketTimeout',
  'maxAttempts',
  'partSize',
  'queueSize',
  'multipartCopyThreshold',
  'copyPartSize',
  'verifyOnStart',
] as const

const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)

/**
 * Validates the settings of store `name` and applies the defaults. Throws `config-invalid` naming the
 * setting (in the kebab-case of configuration files). Messages never repeat a credential's value.
 */
export function resolveS3Settings(
  name: string,
  settings: Record<string, unknown>,
  options: { extraKeys?: readonly string[]; regionOptional?: boolean } = {},
): ResolvedS3Settings {
  const where = `S3 store "${name}"`
  const invalid = (message: string): AttachStorageError =>
    new AttachStorageError('config-invalid', `${where}: ${message}`, { status: 500 })
  if (settings === null || typeof settings !== 'object') throw invalid('its settings must be an object')

  const known = new Set<string>([...KNOWN_SETTINGS, ...(options.extraKeys ?? [])])
  const unknown = Object.keys(settings).filter((k) => !known.has(k) && settings[k] !== undefined)
  if (unknown.length) {
    throw invalid(
      `unknown setting${unknown.length > 1 ? 's' : ''} ${unknown.map((k) => `"${kebab(k)}"`).join(', ')}; ` +
        `known: ${KNOWN_SETTINGS.filter((k) => k !== 'type')
          .map(kebab)
          .join(', ')}`,
    )
  }

  const text = (key: string, required: boolean, secret = false): string | undefined => {
    const value = settings[key]
    if (value === undefined || value === null || value === '') {
      if (required) throw invalid(`the "${kebab(key)}" setting is required`)
      return undefined
    }
    if (typeof value !== 'string') {
      throw invalid(`"${kebab(key)}" must be a string${secret ? '' : `, not ${JSON.stringify(value)}`}`)
    }
    if (value.trim() !== value) throw invalid(`"${kebab(key)}" has leading or trailing white space`)
    return value
  }
  const flag = (key: string, fallback: boolean): boolean => {
    const value = settings[key]
    if (value === undefined || value === null || value === '') return fallback
    if (typeof value === 'boolean') return value
    if (value === 'true') return true
    if (value === 'false') return false
    throw invalid(`"${kebab(key)}" must be true or false, not ${JSON.stringify(value)}`)
  }
  const integer = (key: string, fallback: number, min: number, max: number): number => {
    const value = settings[key]
    if (value === undefined || value === null || value === '') return fallback
    const n = typeof value === 'string' && /^\s*\d+\s*$/.test(value) ? Number(value) : value
    if (typeof n !== 'number' || !Number.isSafeInteger(n) || n < min || n > max) {
      throw invalid(`"${kebab(key)}" must be an integer from ${min} to ${max}, not ${JSON.stringify(value)}`)
    }
    return n
  }
  const duration = (key: string, fallback: number): number => {
    const value = settings[key]
    if (value === undefined || value === null || value === '') return fallback
    const ms = parseDuration(value)
    if (ms === undefined || ms <= 0) {
      throw invalid(`"${kebab(key)}" must be a duration such as "10s" or "500ms" (a number means seconds), not ${JSON.stringify(value)}`)
    }
    return Math.max(1, Math.round(ms))
  }
  const size = (key: string, fallback: number, min: number, max: number): number => {
    const value = settings[key]
    if (value === undefined || value === null || value === '') return fallback
    const bytes = parseSize(value)
    if (bytes === undefined || bytes < min || bytes > max) {
      throw invalid(
        `"${kebab(key)}" must be a size from ${min / MiB} MiB to ${max / GiB} GiB (bytes, or a string such as "8MB"), not ${JSON.stringify(value)}`,
      )
    }
    return bytes
  }
  const checksum = (key: string, fallback: ChecksumMode | undefined): ChecksumMode | undefined => {
    const value = settings[key]
    if (value === undefined || value === null || value === '') return fallback
    const upper = typeof value === 'string' ? value.trim().toUpperCase().replace(/-/g, '_') : undefined
    if (upper === 'WHEN_REQUIRED' || upper === 'WHEN_SUPPORTED') return upper
    throw invalid(`"${kebab(key)}" must be WHEN_REQUIRED or WHEN_SUPPORTED, not ${JSON.stringify(value)}`)
  }

  const bucket = text('bucket', true) as string
  if (bucket.includes('/')) throw invalid(`"bucket" must be a bucket name, without "/" (got ${JSON.stringify(bucket)})`)
  const region = text('region', !options.regionOptional)

  const accessKey = text('accessKey', false, true)
  const secretKey = text('secretKey', false, true)
  const sessionToken = text('sessionToken', false, true)
  if ((accessKey === undefined) !== (secretKey === undefined)) {
    throw invalid(
      `"access-key" and "secret-key" go together: give both, or neither to use the SDK's default credential chain ` +
        `(${accessKey === undefined ? '"access-key"' : '"secret-key"'} is missing)`,
    )
  }
  if (sessionToken !== undefined && accessKey === undefined) {
    throw invalid('"session-token" needs "access-key" and "secret-key"')
  }

  const endpoint = text('endpoint', false)
  if (endpoint !== undefined) {
    let url: URL
    try {
      url = new URL(endpoint)
    } catch {
      throw invalid(`"endpoint" must be an absolute http(s) URL, not ${JSON.stringify(endpoint)}`)
    }
    if (url.protocol !== 'http:' && url.protocol !== 'https:') {
      throw invalid(`"endpoint" must be an absolute http(s) URL, not ${JSON.stringify(endpoint)}`)
    }
    if (url.username || url.password) throw invalid('"endpoint" must not carry credentials; use "access-key" and "secret-key"')
  }

  let prefix = ''
  const rawPrefix = text('prefix', false)
  if (rawPrefix !== undefined && rawPrefix !== '/') {
    try {
      prefix = normalizePrefix(rawPrefix.endsWith('/') ? rawPrefix : `${rawPrefix}/`)
    } catch (err) {
      throw invalid(`"prefix" is not a valid key prefix: ${(err as Error).message}`)
    }
  }
  text('cdnUrl', false)

  const requestChecksumCalculation = checksum('requestChecksumCalculation', endpoint ? 'WHEN_REQUIRED' : undefined)
  const responseChecksumValidation = checksum('responseChecksumValidation', endpoint ? 'WHEN_REQUIRED' : undefined)

  const partSize = size('partSize', 8 * MiB, MIN_PART_SIZE, MAX_PART_SIZE)
  const copyPartSize = size('copyPartSize', 512 * MiB, MIN_PART_SIZE, MAX_PART_SIZE)
  const multipartCopyThreshold = size('multipartCopyThreshold', MAX_PART_SIZE, MIN_PART_SIZE, MAX_PART_SIZE)

  return {
    bucket,
    region,
    credentials:
      accessKey !== undefined && secretKey !== undefined
        ? { accessKeyId: accessKey, secretAccessKey: secretKey, ...(sessionToken !== undefined ? { sessionToken } : {}) }
        : undefined,
    endpoint,
    forcePathStyle: flag('forcePathStyle', false),
    prefix,
    requestChecksumCalculation,
    responseChecksumValidation,
    connectTimeout: duration('connectTimeout', 10_000),
    socketTimeout: duration('socketTimeout', 60_000),
    maxAttempts: integer('maxAttempts', 3, 1, 20),
    partSize,
    queueSize: integer('queueSize', 4, 1, 64),
    multipartCopyThreshold,
    copyPartSize,
    verifyOnStart: flag('verifyOnStart', false),
  }
}
