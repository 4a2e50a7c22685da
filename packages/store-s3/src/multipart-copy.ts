/**
 * The copy of an object above `multipart-copy-threshold`: UploadPartCopy in parts, several at a time,
 * completed as one multipart upload (aborted on any failure).
 * @module
 */
import {
  CompleteMultipartUploadCommand,
  CreateMultipartUploadCommand,
  UploadPartCopyCommand,
  type CompletedPart,
  type HeadObjectCommandOutput,
} from '@aws-sdk/client-s3'
import { quoteKey } from 'attach-storage/store-kit'
import { partSizeFor } from './settings.js'
import { abortMultipart, type S3Calls } from './store-calls.js'

/**
 * UploadPartCopy in `copyPartSize` parts, `queueSize` at a time. On a failure no further part is
 * started, the parts in flight end, and then the upload is aborted and the first error thrown.
 */
export async function multipartCopy(
  calls: S3Calls,
  from: string,
  to: string,
  target: string,
  copySource: string,
  size: number,
  head: HeadObjectCommandOutput,
): Promise<void> {
  const created = await calls.call('CreateMultipartUpload', to, () =>
    calls.client().send(
      new CreateMultipartUploadCommand({
        Bucket: calls.bucket,
        Key: target,
        ...(head.ContentType ? { ContentType: head.ContentType } : {}),
        ...(head.CacheControl ? { CacheControl: head.CacheControl } : {}),
        ...(head.ContentDisposition ? { ContentDisposition: head.ContentDisposition } : {}),
        ...(head.ContentEncoding ? { ContentEncoding: head.ContentEncoding } : {}),
        ...(head.Metadata ? { Metadata: head.Metadata } : {}),
      }),
    ),
  )
  const uploadId = created.UploadId
  if (!uploadId) throw calls.failure(`CreateMultipartUpload of ${quoteKey(to)} failed: no UploadId in the answer`)
  try {
    const partSize = partSizeFor(size, calls.settings.copyPartSize)
    const count = Math.ceil(size / partSize)
    const parts: CompletedPart[] = new Array(count)
    let nextPart = 0
    /** The first failure of a part: no part starts after it. */
    let failure: { err: unknown } | undefined
    const worker = async (): Promise<void> => {
      while (nextPart < count && !failure) {
        const index = nextPart++
        const first = index * partSize
        const last = Math.min(size, first + partSize) - 1
        const out = await calls.call('UploadPartCopy', from, () =>
          calls.client().send(
            new UploadPartCopyCommand({
              Bucket: calls.bucket,
              Key: target,
              UploadId: uploadId,
              PartNumber: index + 1,
              CopySource: copySource,
              CopySourceRange: `bytes=${first}-${last}`,
              ...(head.ETag ? { CopySourceIfMatch: head.ETag } : {}),
            }),
          ),
        )
        const etag = out.CopyPartResult?.ETag
        if (!etag) throw calls.failure(`UploadPartCopy of ${quoteKey(from)} failed: no ETag for part ${index + 1}`)
        parts[index] = { PartNumber: index + 1, ETag: etag }
      }
    }
    const settled = () =>
      worker().catch((err: unknown) => {
        failure ??= { err }
      })
    // Every worker ends (its part stored or failed) before the upload is completed or aborted.
    await Promise.all(Array.from({ length: Math.min(calls.settings.queueSize, count) }, settled))
    if (failure) throw failure.err
    await calls.call('CompleteMultipartUpload', to, () =>
      calls.client().send(
        new CompleteMultipartUploadCommand({
          Bucket: calls.bucket,
          Key: target,
          UploadId: uploadId,
          MultipartUpload: { Parts: parts },
        }),
      ),
    )
  } catch (err) {
    await abortMultipart(calls, target, uploadId)
    throw err
  }
}
