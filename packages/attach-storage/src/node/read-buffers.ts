/**
 * Buffers the Node fast path reads small files into, kept for the next view once an answer has gone
 * out. A view of a 50 KB file otherwise allocates a 50 KB buffer outside V8's heap; V8 counts such
 * memory, and at thousands of views per second it starts a full collection of the whole heap every
 * tenth of a second (pauses of 2-8 ms in bursts, the p99 tail) and enlarges the young generation (RSS).
 */
import { type ReadBuffers, SMALL_BODY } from '../http/serve.js'

/**
 * Reads of at most this many bytes are left to `Buffer.allocUnsafe` (Node's shared pool): few bytes per
 * view. A fixed figure, not `Buffer.poolSize`: that is 8 KiB on Node 20 and 64 KiB on Node 24, and a read
 * from the shared pool still takes a new slab of memory outside V8's heap every few views.
 */
const SHARED_POOL_READ = 4096
/** The largest size class: the largest body the handlers read whole (256 KiB, a power of two). */
const LARGEST = SMALL_BODY
/**
 * What each size class keeps at most between answers: 32 buffers (the answers in flight at once under 32
 * busy connections), or more of the small classes, up to 2 MiB. 20 MiB in all when every class is full.
 * Kept by bytes alone (2 MiB, 8 buffers of 256 KiB), views of 211 KB under 32 connections made a new
 * buffer for three views of four: full collections in every few seconds' run, 5,600 views a second at
 * 220 µs each, against 6,700 at 170 µs with 32 kept.
 */
const KEPT_BUFFERS = 32
const KEPT_BYTES = 2 * 1024 * 1024

/**
 * A free list of buffers per power-of-two size class, from 8 KiB to 256 KiB. `take` answers a buffer of
 * at least the length asked (a new one when the class's list is empty), `give` puts it back once nothing
 * reads it any more; each class keeps at most 32 buffers, or 2 MiB of the small ones. Smaller and larger
 * reads are not pooled.
 */
export class ReadBufferPool implements ReadBuffers {
  readonly #free: Buffer[][] = []
  /** Buffers made since the start (a kept one given again is not counted): for the tests. */
  made = 0

  take(length: number): Buffer | undefined {
    if (length <= SHARED_POOL_READ || length > LARGEST) return undefined
    const cls = classOf(length)
    const kept = this.#free[cls]?.pop()
    if (kept) return kept
    this.made++
    return Buffer.allocUnsafeSlow(sizeOf(cls))
  }

  give(buffer: Buffer): void {
    const size = buffer.byteLength
    if (size <= SHARED_POOL_READ || size > LARGEST || (size & (size - 1)) !== 0) return
    const cls = classOf(size)
    let list = this.#free[cls]
    if (!list) {
      list = []
      this.#free[cls] = list
    }
    if (list.length < KEPT_BUFFERS || (list.length + 1) * size <= KEPT_BYTES) list.push(buffer)
  }
}

/** The size class of `length`: 0 for up to 8 KiB, 1 for 16 KiB, ... */
const classOf = (length: number) => Math.max(0, 32 - Math.clz32(length - 1) - 13)
const sizeOf = (cls: number) => 8192 << cls
