/**
 * Streams over an open SFTP handle: {@link HandleWriter} keeps several WRITE requests in flight,
 * {@link SftpReadStream} reads a byte range ahead, {@link streamCopy} joins the two.
 * @module
 */
import { Readable, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { Connection } from './pool.js'
import { closeQuietly, noop } from './sftp-requests.js'

/** Bytes per SFTP WRITE / READ request. */
const CHUNK = 64 * 1024
/** WRITE requests kept in flight per upload, READ requests read ahead per download. */
const WRITES_IN_FLIGHT = 16
const READS_AHEAD = 8

/** Reads the source handle and writes the target handle, both on this connection. */
export async function streamCopy(conn: Connection, source: Buffer, target: Buffer): Promise<void> {
  const writer = new HandleWriter(conn, target)
  const reader = new SftpReadStream(conn, source, 0, Number.POSITIVE_INFINITY, {
    onError: (err) => (err instanceof Error ? err : new Error(String(err))),
    onClose: noop,
    keepHandle: true,
  })
  await pipeline(reader, writer.sink())
}

/**
 * Writes to an open handle with several WRITE requests in flight (SFTP answers them in order, and a
 * round trip per 64 KiB would make uploads crawl on a distant server).
 */
export class HandleWriter {
  bytesWritten = 0
  #position = 0
  #inFlight = 0
  #error: Error | undefined
  #wake: (() => void) | undefined
  readonly #conn: Connection
  readonly #handle: Buffer

  constructor(conn: Connection, handle: Buffer) {
    this.#conn = conn
    this.#handle = handle
  }

  /** Queues `bytes`; resolves once they are sent (not yet acknowledged). */
  async write(bytes: Uint8Array): Promise<void> {
    const buffer = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    for (let offset = 0; offset < buffer.length; offset += CHUNK) {
      while (this.#inFlight >= WRITES_IN_FLIGHT && this.#error === undefined) await this.#waitForSlot()
      if (this.#error) throw this.#error
      const slice = buffer.subarray(offset, Math.min(offset + CHUNK, buffer.length))
      const position = this.#position
      this.#position += slice.length
      this.#inFlight++
      this.#conn
        .request((cb) => this.#conn.sftp.write(this.#handle, slice, 0, slice.length, position, cb))
        .then(
          () => {
            this.bytesWritten += slice.length
            this.#settled()
          },
          (err: Error) => {
            this.#error ??= err
            this.#settled()
          },
        )
    }
  }

  /** Waits until every write is acknowledged; throws the first failure. */
  async flush(): Promise<void> {
    while (this.#inFlight > 0) await this.#waitForSlot()
    if (this.#error) throw this.#error
  }

  /** Writes all of `bytes`, checking `signal` between requests. */
  async writeAll(bytes: Uint8Array, signal: AbortSignal | undefined): Promise<number> {
    for (let offset = 0; offset < bytes.byteLength; offset += CHUNK * WRITES_IN_FLIGHT) {
      signal?.throwIfAborted()
      await this.write(bytes.subarray(offset, Math.min(offset + CHUNK * WRITES_IN_FLIGHT, bytes.byteLength)))
    }
    await this.flush()
    return this.bytesWritten
  }

  /** A Writable over this writer, for `pipeline`. */
  sink(): Writable {
    return new Writable({
      highWaterMark: CHUNK * 4,
      write: (chunk: Buffer, _encoding, callback) => {
        this.write(chunk).then(() => callback(), callback)
      },
      final: (callback) => {
        this.flush().then(() => callback(), callback)
      },
    })
  }

  #waitForSlot(): Promise<void> {
    return new Promise((resolve) => {
      this.#wake = resolve
    })
  }

  #settled(): void {
    this.#inFlight--
    const wake = this.#wake
    this.#wake = undefined
    wake?.()
  }
}

/**
 * Streams the inclusive byte range `[start, end]` of an open handle, with a few READ requests in flight.
 * Owns the handle (closed when the stream ends or is destroyed) and calls `onClose` exactly once then,
 * which gives the pooled connection back.
 */
export class SftpReadStream extends Readable {
  readonly #conn: Connection
  readonly #handle: Buffer
  readonly #end: number
  readonly #hooks: { onError: (err: unknown) => Error; onClose: () => void; keepHandle?: boolean }
  #next: number
  #queue: Array<{ position: number; length: number; data: Promise<Buffer> }> = []
  #pumping = false
  #wanted = false
  #done = false
  #eof = false

  constructor(
    conn: Connection,
    handle: Buffer,
    start: number,
    end: number,
    hooks: { onError: (err: unknown) => Error; onClose: () => void; keepHandle?: boolean },
  ) {
    super({ highWaterMark: CHUNK * 4 })
    this.#conn = conn
    this.#handle = handle
    this.#next = start
    this.#end = end
    this.#hooks = hooks
  }

  override _read(): void {
    this.#wanted = true
    if (!this.#pumping) this.#startPump()
  }

  #startPump(): void {
    this.#pumping = true
    this.#wanted = false
    this.#pump().then(
      () => {
        this.#pumping = false
        // A read asked for while the pump was finishing: start again rather than stall.
        if (this.#wanted && !this.destroyed && !this.#done) this.#startPump()
      },
      (err: unknown) => {
        this.#pumping = false
        this.destroy(this.#hooks.onError(err))
      },
    )
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    for (const q of this.#queue) q.data.catch(noop)
    this.#queue = []
    if (!this.#hooks.keepHandle) closeQuietly(this.#conn, this.#handle)
    this.#hooks.onClose()
    callback(err)
  }

  #finish(): void {
    this.#done = true
    this.push(null)
  }

  async #pump(): Promise<void> {
    if (this.#done) return
    for (;;) {
      while (!this.#eof && this.#queue.length < READS_AHEAD && this.#next <= this.#end) {
        const length = Math.min(CHUNK, this.#end - this.#next + 1)
        const position = this.#next
        const data = this.#readAt(position, length)
        data.catch(noop)
        this.#queue.push({ position, length, data })
        this.#next += length
      }
      const head = this.#queue.shift()
      if (head === undefined) {
        this.#finish()
        return
      }
      let chunk = await head.data
      if (this.destroyed) return
      // A short read: the file ended early (it was shortened) or the server sent less; read the rest.
      while (chunk.length < head.length && !this.#eof) {
        const more = await this.#readAt(head.position + chunk.length, head.length - chunk.length)
        if (this.destroyed) return
        if (more.length === 0) this.#eof = true
        chunk = Buffer.concat([chunk, more])
      }
      if (chunk.length === 0) {
        this.#eof = true
        this.#queue = []
        this.#finish()
        return
      }
      if (!this.push(chunk)) return
    }
  }

  async #readAt(position: number, length: number): Promise<Buffer> {
    const buffer = Buffer.allocUnsafe(length)
    const bytesRead = await this.#conn.request<number>((cb) => this.#conn.sftp.read(this.#handle, buffer, 0, length, position, cb))
    return bytesRead === length ? buffer : buffer.subarray(0, bytesRead)
  }
}
