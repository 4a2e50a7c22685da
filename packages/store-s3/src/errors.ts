import { redact } from 'attach-storage/store-kit'

/** What an SDK (or network) error looks like from here. */
interface SdkErrorLike {
  name?: unknown
  message?: unknown
  code?: unknown
  Code?: unknown
  $metadata?: { httpStatusCode?: number; requestId?: string; extendedRequestId?: string; attempts?: number }
  $fault?: unknown
  ActualObjectSize?: unknown
  $response?: { headers?: Record<string, string | undefined> }
}

const asSdk = (err: unknown): SdkErrorLike => (err !== null && typeof err === 'object' ? (err as SdkErrorLike) : {})

/**
 * The S3 error code of an error: its name, or, for answers without a body (HEAD requests, which the SDK
 * names "Unknown", "NotFound" or "Forbidden"), the `x-amz-error-code` header some servers send.
 */
export const errorName = (err: unknown): string => {
  const e = asSdk(err)
  const name = typeof e.name === 'string' ? e.name : typeof e.Code === 'string' ? e.Code : 'Error'
  if (name === 'Unknown' || name === 'Forbidden' || name === 'BadRequest') {
    const header = e.$response?.headers?.['x-amz-error-code']
    if (typeof header === 'string' && /^[A-Za-z]{1,64}$/.test(header)) return header
  }
  return name
}

export const httpStatusOf = (err: unknown): number | undefined => asSdk(err).$metadata?.httpStatusCode

/** A missing object: NoSuchKey (GET), NotFound (HEAD has no body), or a bare 404 that is not about the bucket or an upload. */
export function isMissingObject(err: unknown): boolean {
  const name = errorName(err)
  if (name === 'NoSuchKey' || name === 'NotFound') return true
  return httpStatusOf(err) === 404 && name !== 'NoSuchBucket' && name !== 'NoSuchUpload'
}

/** A ranged GET past the end (416 InvalidRange). */
export function isInvalidRange(err: unknown): boolean {
  return errorName(err) === 'InvalidRange' || httpStatusOf(err) === 416
}

/** The object size S3 reports with an InvalidRange error (`ActualObjectSize`, or `Content-Range: bytes *\/N`). */
export function sizeFromRangeError(err: unknown): number | undefined {
  const e = asSdk(err)
  const fromBody = Number(e.ActualObjectSize)
  if (e.ActualObjectSize !== undefined && Number.isSafeInteger(fromBody) && fromBody >= 0) return fromBody
  const header = e.$response?.headers?.['content-range']
  const m = typeof header === 'string' ? /\/(\d+)\s*$/.exec(header) : null
  return m ? Number(m[1]) : undefined
}

export const isAbortError = (err: unknown): boolean => errorName(err) === 'AbortError'

/** Error fields of S3 answers that echo signing material or the access key; never kept. */
const DROPPED = new Set([
  '$response',
  'StringToSign',
  'StringToSignBytes',
  'CanonicalRequest',
  'CanonicalRequestBytes',
  'SignatureProvided',
  'AWSAccessKeyId',
  'stack',
  'message',
  'name',
  'cause',
])

/**
 * A copy of an SDK or network error that is safe to log: its name, redacted message, `code`, `$fault`,
 * `$metadata` (HTTP status, request ids) and other plain fields of the S3 answer, without the raw HTTP
 * response, the signing material S3 echoes on signature errors, the access key id, or any secret.
 */
export function sanitizeCause(err: unknown, secrets: readonly string[]): Error {
  const e = asSdk(err)
  const message = typeof e.message === 'string' ? e.message : String(err)
  const copy = new Error(redact(message, secrets))
  copy.name = errorName(err)
  copy.stack = `${copy.name}: ${copy.message}`
  if (err !== null && typeof err === 'object') {
    for (const [key, value] of Object.entries(err)) {
      if (DROPPED.has(key)) continue
      if (key === '$metadata' && value && typeof value === 'object') {
        ;(copy as unknown as Record<string, unknown>)[key] = { ...(value as object) }
        continue
      }
      if (value === null || ['string', 'number', 'boolean'].includes(typeof value)) {
        ;(copy as unknown as Record<string, unknown>)[key] = typeof value === 'string' ? redact(value, secrets) : value
      }
    }
  }
  return copy
}

const NETWORK: Record<string, string> = {
  ECONNREFUSED: 'the connection was refused',
  ECONNRESET: 'the connection was reset',
  EPIPE: 'the connection was closed',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name does not resolve (for now)',
  ETIMEDOUT: 'the request timed out',
  EHOSTUNREACH: 'the host is unreachable',
  ENETUNREACH: 'the network is unreachable',
  ECONNABORTED: 'the connection was aborted',
}

/** One line saying why an S3 call failed, for a message (no secrets; redacted again by the caller). */
export function reasonOf(err: unknown, bucket: string): string {
  const e = asSdk(err)
  const name = errorName(err)
  const status = httpStatusOf(err)
  const code = typeof e.code === 'string' ? e.code : undefined
  const message = typeof e.message === 'string' ? e.message : ''
  switch (name) {
    case 'InvalidAccessKeyId':
    case 'SignatureDoesNotMatch':
    case 'InvalidToken':
    case 'ExpiredToken':
    case 'TokenRefreshRequired':
    case 'InvalidClientTokenId':
      return `S3 refused the credentials (${name}): check the access-key and secret-key settings (or the credentials the SDK's default chain found)`
    case 'AccessDenied':
    case 'AllAccessDisabled':
      return `access denied (${name}): check the credentials and the IAM permissions on bucket "${bucket}"`
    case 'NoSuchBucket':
      return `the bucket "${bucket}" does not exist (NoSuchBucket)`
    case 'CredentialsProviderError':
      return 'no AWS credentials were found: set access-key and secret-key, or configure the SDK default chain (environment, shared config, SSO, container or instance role)'
    case 'TimeoutError':
    case 'RequestTimeout':
      return `the request timed out (${name})`
  }
  if (code !== undefined && NETWORK[code]) return `cannot reach S3: ${NETWORK[code]} (${code})`
  const vague = name === 'Error' || name === 'Unknown' || name === 'Forbidden'
  if (status === 403) {
    return `access denied (HTTP 403${vague ? '' : `, ${name}`}): check the credentials (access-key, secret-key) and the IAM permissions on bucket "${bucket}"`
  }
  const where = status !== undefined ? ` (HTTP ${status})` : code !== undefined ? ` (${code})` : ''
  return `${name}${where}${message && message !== name ? `: ${message}` : ''}`
}
