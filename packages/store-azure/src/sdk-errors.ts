/**
 * Readings of the Blob service's errors (`RestError`s and network errors): the status, the service's
 * error code, whether it refuses to copy, and the total size a 416 names.
 * @module
 */

/** What {@link AzureBlobStore} knows of an SDK error (a `RestError`, or a network error). */
export interface SdkError {
  name?: string
  message?: string
  code?: string
  statusCode?: number
  details?: { errorCode?: string }
  response?: { headers?: { get(name: string): string | undefined } }
}

export const statusOf = (err: unknown): number | undefined => {
  const s = (err as SdkError | null)?.statusCode
  return typeof s === 'number' ? s : undefined
}

/** The service's error code (`BlobNotFound`, ...); HEAD answers carry it in `details` only. */
export const errorCodeOf = (err: unknown): string | undefined => {
  const e = err as SdkError | null
  const code = e?.details?.errorCode || (statusOf(err) !== undefined ? e?.code : undefined)
  return code || undefined
}

/** Errors that mean the service will not copy for us (the source cannot be authorized, or no support). */
export function copyRefused(err: unknown): boolean {
  const status = statusOf(err)
  const code = errorCodeOf(err)
  return (
    status === 401 ||
    status === 403 ||
    status === 501 ||
    code === 'CannotVerifyCopySource' ||
    code === 'NotImplemented' ||
    code === 'FeatureNotSupported'
  )
}

export function firstLine(message: string | undefined): string {
  return (message ?? '').split('\n')[0]!.trim().slice(0, 300)
}

/** The total size of a `Content-Range: bytes a-b/total` (or `bytes * /total`) header. */
export function totalOf(contentRange: string | undefined | null): number | undefined {
  const m = /\/(\d+)\s*$/.exec(contentRange ?? '')
  return m ? Number(m[1]) : undefined
}
