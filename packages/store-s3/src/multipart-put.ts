/**
 * The multipart upload of a stream: parts of `partSize` filled in buffers of the put's own, `queueSize`
 * sent at a time, and each buffer filled again once its part is stored. The SDK is done with a part's
 * body when its UploadPart answered (its retries happen inside that call), so a put holds at most
 * `queueSize + 1` part buffers whatever the object's size, and makes no garbage of them: the collector is
 * not set off by hundreds of MiB of part copies, as it was by lib-storage's, which concatenates each
 * part into a new buffer and gives no word of when it is done with it.
 * @module
 */
import {
  ChecksumAlgorithm,
  CompleteMultipartUploadCommand,
  type CompletedPart,
  CreateMultipartUploadCommand,
  UploadPartCommand,
} from '@aws-sdk/client-s3'
import { quoteKey } from 'attach-storage/store-kit'
import { objectHeaders } from './object-headers.js'
import { MAX_PARTS } from './settings.js'
import { abortMultipart, type S3Calls } from './store-calls.js'

/**
 * Uploads `head`, then what `rest` yields, as one multipart upload of `partSize` parts; answers the
 * byte count. Any failure (the source's included) aborts the upload (AbortMultipartUpload) and is
 * thrown as it came. A body that needs more than `maxParts` parts (S3's 10,000) fails at the first
 * part past it, a `store-failure`, before that part is sent.
 */
export async function multipartPut(
  calls: S3Calls,
  key: string,
  objectKey: string,
  head: Buffer[],
  rest: AsyncIterator<Buffer>,
  partSize: number,
  contentType: string | undefined,
  signal: AbortSignal | undefined,
  maxParts = MAX_PARTS,
): Promise<number> {
  const client = calls.client()
  const options = signal ? { abortSignal: signal } : {}
  // As lib-storage does: a client that sends checksums when supported gets CRC32 parts.
  const checksum =
    (await client.config.requestChecksumCalculation()) === 'WHEN_SUPPORTED' ? { ChecksumAlgorithm: ChecksumAlgorithm.CRC32 } : {}
  const created = await client.send(
    new CreateMultipartUploadCommand({ Bucket: calls.bucket, Key: objectKey, ...objectHeaders(contentType), ...checksum }),
    options,
  )
  const uploadId = created.UploadId
  if (!uploadId) throw calls.failure(`CreateMultipartUpload of ${quoteKey(key)} failed: no UploadId in the answer`)
  const parts: CompletedPart[] = []
  /** Buffers whose part is stored, to be filled again. */
  const free: Buffer[] = []
  const sending = new Set<Promise<void>>()
  let failure: { err: unknown } | undefined
  let partNumber = 0
  const send = (bytes: Buffer, whole: boolean): void => {
    if (++partNumber > maxParts) throw calls.failure(`multipart upload of ${quoteKey(key)} failed: more than ${maxParts} parts`)
    const number = partNumber
    const sent: Promise<void> = client
      .send(
        new UploadPartCommand({
          Bucket: calls.bucket,
          Key: objectKey,
          UploadId: uploadId,
          PartNumber: number,
          Body: bytes,
          ContentLength: bytes.length,
          ...checksum,
        }),
        options,
      )
      .then((out) => {
        if (!out.ETag) throw calls.failure(`UploadPart of ${quoteKey(key)} failed: no ETag for part ${number}`)
        parts.push({
          PartNumber: number,
          ETag: out.ETag,
          ...(out.ChecksumCRC32 ? { ChecksumCRC32: out.ChecksumCRC32 } : {}),
          ...(out.ChecksumCRC32C ? { ChecksumCRC32C: out.ChecksumCRC32C } : {}),
          ...(out.ChecksumSHA1 ? { ChecksumSHA1: out.ChecksumSHA1 } : {}),
          ...(out.ChecksumSHA256 ? { ChecksumSHA256: out.ChecksumSHA256 } : {}),
        })
        if (whole) free.push(bytes)
      })
      .catch((err: unknown) => {
        failure ??= { err }
      })
      .finally(() => sending.delete(sent))
    sending.add(sent)
  }
  try {
    let buffer: Buffer = Buffer.allocUnsafeSlow(partSize)
    let filled = 0
    let total = 0
    const take = async (chunk: Buffer): Promise<void> => {
      total += chunk.length
      for (let offset = 0; offset < chunk.length; ) {
        const n = chunk.copy(buffer, filled, offset)
        filled += n
        offset += n
        if (filled < partSize) continue
        send(buffer, true)
        // At most queueSize parts in flight: the next one waits for a buffer to be given back.
        while (sending.size >= calls.settings.queueSize && !failure) await Promise.race(sending)
        if (failure) throw failure.err
        buffer = free.pop() ?? Buffer.allocUnsafeSlow(partSize)
        filled = 0
      }
    }
    for (const chunk of head.splice(0)) await take(chunk)
    for (;;) {
      const next = await rest.next()
      if (next.done) break
      await take(next.value)
    }
    // The last part, shorter than the others (none when the body ended with a whole part).
    if (filled > 0 || partNumber === 0) send(buffer.subarray(0, filled), false)
    while (sending.size) await Promise.race(sending)
    if (failure) throw failure.err
    parts.sort((a, b) => a.PartNumber! - b.PartNumber!)
    await client.send(
      new CompleteMultipartUploadCommand({ Bucket: calls.bucket, Key: objectKey, UploadId: uploadId, MultipartUpload: { Parts: parts } }),
      options,
    )
    return total
  } catch (err) {
    // Parts in flight end first (failed or stored), so none lands in the upload after it is aborted.
    while (sending.size) await Promise.race(sending)
    await abortMultipart(calls, objectKey, uploadId)
    throw err
  }
}
