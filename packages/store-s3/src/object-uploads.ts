/**
 * Writing an object: one PutObject for a body of at most {@link SINGLE_PUT_MAX} bytes, a multipart upload
 * (`@aws-sdk/lib-storage`) for a longer one, and the error an aborted put rejects with.
 * @module
 */
import { PassThrough, Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { PutObjectCommand } from '@aws-sdk/client-s3'
import { Upload } from '@aws-sdk/lib-storage'
import { AttachStorageError } from 'attach-storage/store-kit'
import { isAbortError } from './errors.js'
import { objectHeaders } from './object-headers.js'
import { MAX_PART_SIZE } from './settings.js'
import type { S3Calls } from './store-calls.js'

export const MiB = 1024 * 1024
/** Objects up to this size are written with one PutObject; larger (or longer) bodies go multipart. */
export const SINGLE_PUT_MAX = 5 * MiB
/** S3's limit of parts per multipart upload. */
export const MAX_PARTS = 10_000

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
    async function* rest(): AsyncGenerator<Buffer> {
      yield* head.splice(0)
      for (;;) {
        const next = await chunks.next()
        if (next.done) return
        total += next.value.length
        yield next.value
      }
    }
    const { partSize, queueSize } = calls.settings
    const parts = Readable.from(rest(), { objectMode: false, highWaterMark: 64 * 1024 })
    // Its errors reach the upload through iteration; an error after the upload gave up goes nowhere.
    parts.on('error', () => {})
    const upload = new Upload({
      client: calls.client(),
      params: {
        Bucket: calls.bucket,
        Key: objectKey,
        Body: parts,
        ...objectHeaders(contentType),
      },
      queueSize,
      partSize: sizeHint === undefined ? partSize : Math.min(MAX_PART_SIZE, Math.max(partSize, Math.ceil(sizeHint / MAX_PARTS))),
      leavePartsOnError: false,
    })
    await upload.done()
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
