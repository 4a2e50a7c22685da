import { defineStoreSettings, setting, settingsError } from 'attach-storage/store-kit'

const MiB = 1024 * 1024
const GiB = 1024 * MiB

/** S3's smallest part (all but the last) of a multipart upload or copy. */
export const MIN_PART_SIZE = 5 * MiB
/** S3's largest part, and the largest object a single CopyObject copies. */
export const MAX_PART_SIZE = 5 * GiB
/** S3's limit of parts per multipart upload. */
export const MAX_PARTS = 10_000

/** The part size for an object of `size` bytes: `preferred`, or larger when that would need more than {@link MAX_PARTS} parts. */
export function partSizeFor(size: number, preferred: number): number {
  return Math.min(MAX_PART_SIZE, Math.max(preferred, Math.ceil(size / MAX_PARTS)))
}

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
export type ResolvedS3Settings = ReturnType<typeof resolveS3Settings>

const checksumOf = (x: unknown): ChecksumMode | undefined => {
  const upper = typeof x === 'string' ? x.trim().toUpperCase().replace(/-/g, '_') : undefined
  return upper === 'WHEN_REQUIRED' || upper === 'WHEN_SUPPORTED' ? upper : undefined
}
const checksum = () => setting.check((x): x is string => checksumOf(x) !== undefined, 'must be WHEN_REQUIRED or WHEN_SUPPORTED')

/** The settings of a store of type `s3`. */
export const s3Settings = defineStoreSettings({
  type: 's3',
  required: ['bucket', 'region'],
  secrets: ['accessKey', 'secretKey', 'sessionToken'],
  entries: {
    bucket: setting.check(
      (x): x is string => typeof x === 'string' && x.trim() === x && !x.includes('/'),
      'must be a bucket name, without "/" or surrounding spaces',
    ),
    region: setting.text(),
    accessKey: setting.text(),
    secretKey: setting.text(),
    sessionToken: setting.text(),
    endpoint: setting.text(),
    forcePathStyle: setting.flag(false),
    prefix: setting.prefix(),
    requestChecksumCalculation: checksum(),
    responseChecksumValidation: checksum(),
    connectTimeout: setting.duration(10_000, { min: 1 }),
    socketTimeout: setting.duration(60_000, { min: 1 }),
    maxAttempts: setting.integer(1, 20, 3),
    partSize: setting.size(8 * MiB, MIN_PART_SIZE, MAX_PART_SIZE),
    queueSize: setting.integer(1, 64, 4),
    multipartCopyThreshold: setting.size(MAX_PART_SIZE, MIN_PART_SIZE, MAX_PART_SIZE),
    copyPartSize: setting.size(512 * MiB, MIN_PART_SIZE, MAX_PART_SIZE),
    verifyOnStart: setting.flag(false),
  },
})

/**
 * Validates the settings of store `name` and applies the defaults. Throws `config-invalid` naming the
 * setting (in the kebab-case of configuration files). Messages never repeat a credential's value.
 */
export function resolveS3Settings(name: string, settings: Record<string, unknown>, options: { regionOptional?: boolean } = {}) {
  const s = s3Settings.parse(name, settings, options.regionOptional ? { required: ['bucket'] } : {})
  const { accessKey, secretKey, sessionToken, endpoint } = s
  if ((accessKey === undefined) !== (secretKey === undefined)) {
    throw settingsError(
      name,
      undefined,
      `"access-key" and "secret-key" go together: give both, or neither to use the SDK's default credential chain ` +
        `(${accessKey === undefined ? '"access-key"' : '"secret-key"'} is missing)`,
      s3Settings.secretValues(settings),
    )
  }
  if (sessionToken !== undefined && accessKey === undefined) {
    throw settingsError(name, undefined, '"session-token" needs "access-key" and "secret-key"')
  }
  if (endpoint !== undefined) {
    let url: URL | undefined
    try {
      url = new URL(endpoint)
    } catch {
      url = undefined
    }
    if (url === undefined || (url.protocol !== 'http:' && url.protocol !== 'https:')) {
      throw settingsError(name, 'endpoint', `must be an absolute http(s) URL, not ${JSON.stringify(endpoint)}`)
    }
    if (url.username || url.password) {
      throw settingsError(name, 'endpoint', 'must not carry credentials; use "access-key" and "secret-key"')
    }
  }
  const byEndpoint = endpoint ? ('WHEN_REQUIRED' as const) : undefined
  return {
    bucket: s.bucket!,
    region: s.region as string | undefined,
    credentials:
      accessKey !== undefined && secretKey !== undefined
        ? ({ accessKeyId: accessKey, secretAccessKey: secretKey, ...(sessionToken !== undefined ? { sessionToken } : {}) } as {
            accessKeyId: string
            secretAccessKey: string
            sessionToken?: string
          })
        : undefined,
    endpoint,
    forcePathStyle: s.forcePathStyle,
    prefix: s.prefix,
    requestChecksumCalculation: (checksumOf(s.requestChecksumCalculation) ?? byEndpoint) as ChecksumMode | undefined,
    responseChecksumValidation: (checksumOf(s.responseChecksumValidation) ?? byEndpoint) as ChecksumMode | undefined,
    connectTimeout: Math.max(1, Math.round(s.connectTimeout)),
    socketTimeout: Math.max(1, Math.round(s.socketTimeout)),
    maxAttempts: s.maxAttempts,
    partSize: s.partSize,
    queueSize: s.queueSize,
    multipartCopyThreshold: s.multipartCopyThreshold,
    copyPartSize: s.copyPartSize,
    verifyOnStart: s.verifyOnStart,
  }
}
