import { createHash } from 'node:crypto'
import { Transform, type Readable, type TransformCallback } from 'node:stream'
import { tooLarge } from '../errors.js'
import { SNIFF_BYTES } from '../media/sniff.js'
import type { Store } from '../stores/store.js'

/** What ingesting a stream learnt of its bytes. */
export interface IngestResult {
  size: number
  sha256: string
  head: Uint8Array
}

/**
 * A pass-through that counts, hashes and keeps the first bytes of what flows through it, and fails
 * with 413 once more than `maxSize` bytes have passed.
 */
export class ProbeStream extends Transform {
  readonly #hash = createHash('sha256')
  readonly #head: Buffer[] = []
  #headSize = 0
  #size = 0
  readonly #maxSize: number

  constructor(maxSize = Number.POSITIVE_INFINITY) {
    super({ highWaterMark: 256 * 1024 })
    this.#maxSize = maxSize
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, callback: TransformCallback): void {
    this.#size += chunk.length
    if (this.#size > this.#maxSize) {
      callback(tooLarge(`File is larger than the limit of ${this.#maxSize} bytes`))
      return
    }
    this.#hash.update(chunk)
    if (this.#headSize < SNIFF_BYTES) {
      const part = chunk.subarray(0, SNIFF_BYTES - this.#headSize)
      this.#head.push(Buffer.from(part))
      this.#headSize += part.length
    }
    callback(null, chunk)
  }

  result(): IngestResult {
    return { size: this.#size, sha256: this.#hash.digest('hex'), head: Buffer.concat(this.#head) }
  }
}

/**
 * Streams `source` into `store` at `key` (atomically: a failure leaves nothing), learning its size,
 * sha256 and first bytes on the way. Memory stays flat whatever the size.
 */
export async function ingest(
  store: Store,
  key: string,
  source: Readable,
  options: { maxSize?: number; signal?: AbortSignal; contentType?: string } = {},
): Promise<IngestResult> {
  const probe = new ProbeStream(options.maxSize)
  // The store's pipeline reports the probe's errors; this keeps a late one (after the pipeline let go) quiet.
  probe.on('error', () => {})
  source.on('error', (err) => probe.destroy(err))
  // A limit hit by the multipart parser (busboy truncates the part) surfaces as a 413 too.
  source.on('limit', () => probe.destroy(tooLarge(`File is larger than the limit of ${options.maxSize} bytes`)))
  source.pipe(probe)
  try {
    await store.put(key, probe, { signal: options.signal, contentType: options.contentType })
  } catch (err) {
    source.unpipe(probe)
    source.resume()
    throw err
  }
  return probe.result()
}
