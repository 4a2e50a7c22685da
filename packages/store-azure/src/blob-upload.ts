/**
 * Streaming a body into a block blob: a body that ends within one block is one `Put Blob`, a longer one
 * uncommitted blocks and one `Put Block List`.
 * @module
 */
import { Readable } from 'node:stream'
import type { BlobHTTPHeaders, BlockBlobClient } from '@azure/storage-blob'
import type { ResolvedAzureSettings } from './settings.js'

export interface UploadState {
  /** The error the caller's body stream failed with (passed on as it is, not as a store failure). */
  sourceError?: unknown
}

/**
 * Streams `body` into the blob: read ahead up to one block; a body that ends by then is one `Put Blob`
 * (so concurrent small writers to one key never race on block lists), a longer one goes through
 * `uploadStream` (blocks, then one commit). Resolves with the bytes counted.
 */
export async function uploadBody(
  limits: Pick<ResolvedAzureSettings, 'blockSize' | 'uploadConcurrency'>,
  blob: BlockBlobClient,
  body: Readable,
  headers: BlobHTTPHeaders,
  signal: AbortSignal | undefined,
  sizeHint: number | undefined,
  state: UploadState,
): Promise<number> {
  const { blockSize, uploadConcurrency } = limits
  const onAbort = (): void => {
    body.destroy(signal?.reason)
  }
  signal?.addEventListener('abort', onAbort, { once: true })
  const chunks = body[Symbol.asyncIterator]() as AsyncIterator<unknown>
  let size = 0
  const next = async (): Promise<Buffer | undefined> => {
    let chunk: Buffer
    try {
      const result = await chunks.next()
      if (result.done) return undefined
      chunk = toBuffer(result.value)
    } catch (err) {
      state.sourceError = err
      throw err
    }
    size += chunk.byteLength
    return chunk
  }
  let upload: Readable | undefined
  try {
    const head: Buffer[] = []
    let headSize = 0
    if (sizeHint === undefined || sizeHint <= blockSize) {
      for (;;) {
        const chunk = await next()
        if (chunk === undefined) {
          const data = head.length === 1 ? head[0]! : Buffer.concat(head, headSize)
          await blob.upload(data, data.byteLength, { blobHTTPHeaders: headers, abortSignal: signal })
          return size
        }
        head.push(chunk)
        headSize += chunk.byteLength
        if (headSize > blockSize) break
      }
    }
    async function* rest(): AsyncGenerator<Buffer> {
      while (head.length > 0) yield head.shift()!
      for (;;) {
        const chunk = await next()
        if (chunk === undefined) return
        yield chunk
      }
    }
    upload = Readable.from(rest(), { objectMode: false, highWaterMark: 256 * 1024 })
    // Once the block list is committed the object is there: the put succeeded, even if aborted since.
    await blob.uploadStream(upload, blockSize, uploadConcurrency, { blobHTTPHeaders: headers, abortSignal: signal })
    return size
  } catch (err) {
    upload?.destroy()
    body.destroy()
    throw err
  } finally {
    signal?.removeEventListener('abort', onAbort)
  }
}

export function toBuffer(chunk: unknown): Buffer {
  if (Buffer.isBuffer(chunk)) return chunk
  if (chunk instanceof Uint8Array) return Buffer.from(chunk.buffer, chunk.byteOffset, chunk.byteLength)
  if (typeof chunk === 'string') return Buffer.from(chunk)
  throw new TypeError('put: the body stream must yield bytes (Buffer, Uint8Array or string)')
}
