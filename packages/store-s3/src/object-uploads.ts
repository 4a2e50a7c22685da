/**
 * Writing an object: one PutObject for a body of at most {@link SINGLE_PUT_MAX} bytes, a multipart upload
 * ({@link multipartPut}) for a longer one, and the error an aborted put rejects with.
 * @module
 */
import { PassThrough, type Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { PutObjectCommand } from '@aws-sdk/client-s3'
import { AttachStorageError } from 'attach-storage/store-kit'
import { isAbortError } from './errors.js'
import { objectHeaders } from './object-headers.js'
import { multipartPut } from './multipart-put.js'
import { partSizeFor } from './settings.js'
import type { S3Calls } from './store-calls.js'

export const MiB = 1024 * 1024
/** Objects up to this size are written with one PutObject; larger (or longer) bodies go multipart. */
export const SINGLE_PUT_MAX = 5 * MiB

export async function putObject(
  calls: S3Calls,
  key: string,
  objectKey: string,
  bytes: Buffer,
  contentType: string | undefined,
  signal: AbortSignal | undefined,
): Promise<void> {
  try {
    await calls.client().send(
      new PutObjectCommand({
        Bucket: calls.bucket,
        Key: objectKey,
        Body: bytes,
        ContentLength: bytes.byteLength,
        ...objectHeaders(contentType),
      }),
      signal ? { abortSignal: signal } : {},
    )
  } catch (err) {
    if (signal?.aborted) throw abortErrorOf(signal, err)
    throw calls.wrap('PutObject', key, err)
  }
}

/**
 * Streams a body into S3. Unless the size is known to exceed {@link SINGLE_PUT_MAX}, the first 5 MiB
 * (and one chunk) are read first: a body that ends there is one PutObject (retried by the SDK, with
 * ContentLength); a longer one continues as a multipart upload of `partSize` parts.
 */
export async function putStream(
  calls: S3Calls,
  key: string,
  objectKey: string,
  body: Readable,
  sizeHint: number | undefined,
  contentType: string | undefined,
  signal: AbortSignal | undefined,
): Promise<{ size: number }> {
  const pass = new PassThrough({ highWaterMark: 256 * 1024 })
  let sourceFailed = false
  let sourceError: unknown
  const piping = pipeline(body, pass, signal ? { signal } : {}).then(
    () => {},
    (err: unknown) => {
      sourceFailed = true
      sourceError = err
    },
  )
  const chunks = pass[Symbol.asyncIterator]() as AsyncIterator<Buffer>
  let total = 0
  let operation = 'PutObject'
  try {
    const head: Buffer[] = []
    let ended = false
    if (sizeHint === undefined || sizeHint <= SINGLE_PUT_MAX) {
      while (total <= SINGLE_PUT_MAX) {
        const next = await chunks.next()
        if (next.done) {
          ended = true
          break
        }
        head.push(next.value)
        total += next.value.length
      }
    }
    if (ended) {
      await piping
      if (sourceFailed) throw sourceError
      await putObject(calls, key, objectKey, Buffer.concat(head, total), contentType, signal)
      return { size: total }
    }

    operation = 'multipart upload'
    const { partSize } = calls.settings
    const size = sizeHint === undefined ? partSize : partSizeFor(sizeHint, partSize)
    total = await multipartPut(calls, key, objectKey, head, chunks, size, contentType, signal)
    await piping
    return { size: total }
  } catch (err) {
    // Stop reading the source (when it is not already finished or failed), then say who failed.
    const alreadyDestroyed = pass.destroyed
    if (!alreadyDestroyed) pass.destroy()
    await piping
    if (signal?.aborted) throw abortErrorOf(signal, sourceFailed ? sourceError : err)
    if (err instanceof AttachStorageError || isAbortError(err)) throw err
    if (sourceFailed && (alreadyDestroyed || err === sourceError)) throw sourceError
    throw calls.wrap(operation, key, err)
  }
}

export function* slices(bytes: Buffer, size: number): Generator<Buffer> {
  for (let offset = 0; offset < bytes.byteLength; offset += size) yield bytes.subarray(offset, offset + size)
}

/** The error an aborted put rejects with: the AbortError itself when it is one. */
export function abortErrorOf(signal: AbortSignal, err: unknown): unknown {
  if (isAbortError(err)) return err
  return signal.reason instanceof Error ? signal.reason : new DOMException('The operation was aborted', 'AbortError')
}
