/**
 * What the upload and copy modules use of an {@link S3Store}: its client and bucket, its settings, and
 * its one way of turning SDK errors into `not-found` or `store-failure`.
 * @module
 */
import { AbortMultipartUploadCommand, type S3Client } from '@aws-sdk/client-s3'
import type { AttachStorageError } from 'attach-storage/store-kit'
import type { ResolvedS3Settings } from './settings.js'

export interface S3Calls {
  /** The SDK client (created on first use). */
  client(): S3Client
  readonly bucket: string
  readonly settings: ResolvedS3Settings
  /** Runs one SDK call: a missing object becomes `not-found`, anything else `store-failure`. */
  call<T>(operation: string, key: string, run: () => Promise<T>): Promise<T>
  /** A `store-failure` naming the store, its cause stripped of every credential. */
  failure(message: string, cause?: unknown): AttachStorageError
  /** Wraps an SDK or network error once; AttachStorageErrors pass unchanged. */
  wrap(operation: string, key: string | undefined, err: unknown): AttachStorageError
}

/**
 * Aborts a multipart upload once no part of it is in flight any more (the caller waits for those
 * first: S3 may keep a part that lands after the abort). A failed abort is left to the bucket's
 * lifecycle rule; the error that led here is the one the caller throws.
 */
export async function abortMultipart(calls: S3Calls, objectKey: string, uploadId: string): Promise<void> {
  await calls
    .client()
    .send(new AbortMultipartUploadCommand({ Bucket: calls.bucket, Key: objectKey, UploadId: uploadId }))
    .catch(() => {})
}
