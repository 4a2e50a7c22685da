import { Readable } from 'node:stream'
import * as zlib from 'node:zlib'

/** One file of a ZIP archive; `open()` is called only when the entry is written (skipped if it throws). */
export interface ZipSource {
  name: string
  /** Uncompressed size in bytes, known in advance (it decides zip64 per entry). */
  size: number
  mtime: Date
  /** Deflate this entry; already-compressed types are stored as they are. */
  compress: boolean
  open(): Promise<Readable>
}

const U32 = 0xffffffff
const U16 = 0xffff
/** Entries this close to 4 GiB get zip64 sizes: a deflated stream may grow a little past its input. */
const ZIP64_ENTRY = 0xffff0000

/** CRC-32 as ZIP wants it: zlib's native one where Node has it (20.15+), else a table. */
const crc32: (data: Uint8Array, value: number) => number =
  typeof (zlib as { crc32?: unknown }).crc32 === 'function'
    ? (zlib as unknown as { crc32: (d: Uint8Array, v: number) => number }).crc32
    : (() => {
        const table = new Int32Array(256)
        for (let n = 0; n < 256; n++) {
          let c = n
          for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
          table[n] = c
        }
        return (data: Uint8Array, value: number) => {
          let c = ~value
          for (let i = 0; i < data.length; i++) c = table[(c ^ data[i]!) & 0xff]! ^ (c >>> 8)
          return ~c >>> 0
        }
      })()

function dosDateTime(d: Date): { time: number; date: number } {
  const year = Math.min(Math.max(d.getUTCFullYear(), 1980), 2107)
  return {
    time: (d.getUTCHours() << 11) | (d.getUTCMinutes() << 5) | (d.getUTCSeconds() >> 1),
    date: ((year - 1980) << 9) | ((d.getUTCMonth() + 1) << 5) | d.getUTCDate(),
  }
}

interface Written {
  name: Buffer
  method: number
  crc: number
  csize: number
  usize: number
  offset: number
  zip64: boolean
  time: number
  date: number
}

/** Resolves once `stream` can take more, or is closed. */
function drained(stream: zlib.DeflateRaw): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      stream.off('drain', done)
      stream.off('close', done)
      resolve()
    }
    stream.on('drain', done)
    stream.on('close', done)
  })
}

/** How far a ZIP writer has gone: bytes read from its sources, bytes of archive its reader took. */
export interface ZipProgress {
  read: number
  written: number
}

const progressOf = new WeakMap<Readable, ZipProgress>()

/** The progress of a stream made by {@link createZipStream} (undefined for any other stream). */
export function zipProgress(stream: Readable): ZipProgress | undefined {
  const p = progressOf.get(stream)
  return p && { read: p.read, written: p.written }
}

/** Options of {@link createZipStream}. */
export interface ZipStreamOptions {
  onSkip?: (source: ZipSource, err: unknown) => void
  /** zlib level of deflated entries. @default 6 */
  level?: number
  /**
   * Most bytes read per byte of archive its reader has taken, past {@link ratioSlack}: beyond it the
   * writer deflates at level 0 (stored blocks, as large as their input) until the archive catches up.
   * @default 16
   */
  maxRatio?: number
  /** Bytes the writer may read ahead of `maxRatio` × the archive taken. @default 8 MiB */
  ratioSlack?: number
}

/**
 * Streams a ZIP archive of `sources`, never holding more than one chunk of one file: local headers with
 * data descriptors, names in UTF-8 with the language-encoding flag (bit 11), deflate through zlib for
 * compressible entries, and zip64 records wherever a size, an offset or the entry count passes the
 * classic limits (archives past 4 GiB). A source whose `open()` throws is skipped (`onSkip`).
 *
 * Back-pressure holds whatever the data: a reader that takes nothing stops the writer once its buffers
 * are full, but a file that deflates a thousand to one would fill no buffer before gigabytes were read
 * and deflated. So the writer reads at most `maxRatio` bytes per byte of archive taken (plus
 * `ratioSlack`); past that it deflates at level 0, whose output is as large as its input, and goes back
 * to its level once the archive has caught up. The archive stays valid (method 8 throughout); a reader
 * that takes nothing holds the writer after about `maxRatio` × its buffers.
 */
export function createZipStream(sources: AsyncIterable<ZipSource> | Iterable<ZipSource>, options: ZipStreamOptions = {}): Readable {
  const level = options.level ?? 6
  const maxRatio = options.maxRatio ?? 16
  const slack = options.ratioSlack ?? 8 * 1024 * 1024
  const progress: ZipProgress = { read: 0, written: 0 }
  /** Whether the reads have run ahead of the archive taken (then deflate stores). */
  const ahead = () => progress.read > maxRatio * progress.written + slack
  /** Set once the stream is destroyed: the entry being written stops at once, and no other starts. */
  let closed = false
  /** Stops the entry being written (its source destroyed, its deflater ended). */
  let stopEntry: (() => void) | undefined
  async function* generate(): AsyncGenerator<Buffer> {
    const written: Written[] = []
    let offset = 0
    for await (const src of sources) {
      let input: Readable
      if (closed) return
      try {
        input = await src.open()
      } catch (err) {
        options.onSkip?.(src, err)
        continue
      }
      if (closed) {
        input.destroy()
        return
      }
      // From here the source is destroyed on every way out (the reader gone, a failure, its end).
      const opened = input
      stopEntry = () => opened.destroy()
      const name = Buffer.from(src.name, 'utf8')
      const method = src.compress ? 8 : 0
      const zip64 = src.size >= ZIP64_ENTRY
      const { time, date } = dosDateTime(src.mtime)
      const extra = zip64 ? Buffer.alloc(20) : Buffer.alloc(0)
      if (zip64) {
        extra.writeUInt16LE(0x0001, 0)
        extra.writeUInt16LE(16, 2) // sizes follow in the data descriptor; zeros here
      }
      const header = Buffer.alloc(30)
      header.writeUInt32LE(0x04034b50, 0)
      header.writeUInt16LE(zip64 ? 45 : 20, 4)
      header.writeUInt16LE(0x0808, 6) // bit 3: data descriptor, bit 11: UTF-8 names
      header.writeUInt16LE(method, 8)
      header.writeUInt16LE(time, 10)
      header.writeUInt16LE(date, 12)
      header.writeUInt32LE(0, 14)
      header.writeUInt32LE(zip64 ? U32 : 0, 18)
      header.writeUInt32LE(zip64 ? U32 : 0, 22)
      header.writeUInt16LE(name.length, 26)
      header.writeUInt16LE(extra.length, 28)
      const entryOffset = offset
      try {
        yield header
        yield name
        if (extra.length) yield extra
      } finally {
        if (closed) input.destroy()
      }
      offset += 30 + name.length + extra.length

      let crc = 0
      let usize = 0
      let csize = 0
      let data: AsyncIterable<Buffer> = input
      let deflate: zlib.DeflateRaw | undefined
      let inputError: Error | undefined
      if (src.compress) {
        let storing = ahead()
        const z = zlib.createDeflateRaw({ level: storing ? 0 : level })
        deflate = z
        data = z.iterator({ destroyOnReturn: false })
        stopEntry = () => input.destroy()
        // The source is fed by hand, one chunk at a time: a level changes only while no write is queued
        // behind the flush that `params()` makes (one queued there would run beside the change).
        // Stores while the reads are ahead of the archive taken; deflates at `level` again once it caught up.
        const feed = async () => {
          for await (const c of input as AsyncIterable<Buffer>) {
            crc = crc32(c, crc)
            usize += c.length
            progress.read += c.length
            const want = ahead() || (storing && progress.read > maxRatio * progress.written)
            if (want !== storing) {
              storing = want
              await new Promise<void>((resolve) => z.params(want ? 0 : level, zlib.constants.Z_DEFAULT_STRATEGY, () => resolve()))
            }
            // Ended by the reader's going away while this waited: nothing more is written.
            if (z.destroyed || z.writableEnded) return
            if (!z.write(c)) await drained(z)
          }
        }
        // Never destroyed while a level change may be pending (Node asserts its handle in the flush's
        // callback): a deflater is ended, and drained when nobody reads it, which also closes it.
        feed().then(
          () => {
            if (!z.writableEnded) z.end()
          },
          (err: Error) => {
            inputError = err
            if (!z.writableEnded) z.end()
          },
        )
      } else {
        stopEntry = () => input.destroy()
      }
      try {
        for await (const chunk of data) {
          if (!src.compress) {
            crc = crc32(chunk, crc)
            usize += chunk.length
            progress.read += chunk.length
          }
          csize += chunk.length
          yield chunk
        }
        if (inputError) throw inputError
      } finally {
        stopEntry = undefined
        input.destroy()
        if (deflate && !deflate.readableEnded && !deflate.destroyed) {
          // Left early (the reader went away, or the source failed): what is queued is deflated into
          // the void, and the deflater closes at its end.
          if (!deflate.writableEnded) deflate.end()
          deflate.resume()
        }
      }
      if (closed) return
      offset += csize
      const descriptor = Buffer.alloc(zip64 ? 24 : 16)
      descriptor.writeUInt32LE(0x08074b50, 0)
      descriptor.writeUInt32LE(crc >>> 0, 4)
      if (zip64) {
        descriptor.writeBigUInt64LE(BigInt(csize), 8)
        descriptor.writeBigUInt64LE(BigInt(usize), 16)
      } else {
        if (csize > U32 || usize > U32) throw new Error(`${src.name} grew past 4 GiB while it was written`)
        descriptor.writeUInt32LE(csize, 8)
        descriptor.writeUInt32LE(usize, 12)
      }
      yield descriptor
      offset += descriptor.length
      written.push({ name, method, crc: crc >>> 0, csize, usize, offset: entryOffset, zip64, time, date })
    }

    const cdStart = offset
    for (const w of written) {
      const big = [w.usize >= U32 || w.zip64, w.csize >= U32 || w.zip64, w.offset >= U32]
      const fields = [w.usize, w.csize, w.offset].filter((_, i) => big[i])
      const extra = Buffer.alloc(fields.length ? 4 + 8 * fields.length : 0)
      if (fields.length) {
        extra.writeUInt16LE(0x0001, 0)
        extra.writeUInt16LE(8 * fields.length, 2)
        for (const [i, f] of fields.entries()) extra.writeBigUInt64LE(BigInt(f), 4 + 8 * i)
      }
      const needs64 = fields.length > 0
      const h = Buffer.alloc(46)
      h.writeUInt32LE(0x02014b50, 0)
      h.writeUInt16LE((3 << 8) | 45, 4) // made by: Unix, 4.5
      h.writeUInt16LE(needs64 ? 45 : 20, 6)
      h.writeUInt16LE(0x0808, 8)
      h.writeUInt16LE(w.method, 10)
      h.writeUInt16LE(w.time, 12)
      h.writeUInt16LE(w.date, 14)
      h.writeUInt32LE(w.crc, 16)
      h.writeUInt32LE(big[1] ? U32 : w.csize, 20)
      h.writeUInt32LE(big[0] ? U32 : w.usize, 24)
      h.writeUInt16LE(w.name.length, 28)
      h.writeUInt16LE(extra.length, 30)
      h.writeUInt16LE(0, 32) // comment
      h.writeUInt16LE(0, 34) // disk
      h.writeUInt16LE(0, 36) // internal attributes
      h.writeUInt32LE((0o100644 << 16) >>> 0, 38) // regular file, rw-r--r--
      h.writeUInt32LE(big[2] ? U32 : w.offset, 42)
      yield h
      yield w.name
      if (extra.length) yield extra
      offset += 46 + w.name.length + extra.length
    }
    const cdSize = offset - cdStart
    const count = written.length
    if (count >= U16 || cdSize >= U32 || cdStart >= U32) {
      const z = Buffer.alloc(56 + 20)
      z.writeUInt32LE(0x06064b50, 0)
      z.writeBigUInt64LE(44n, 4)
      z.writeUInt16LE((3 << 8) | 45, 12)
      z.writeUInt16LE(45, 14)
      z.writeUInt32LE(0, 16)
      z.writeUInt32LE(0, 20)
      z.writeBigUInt64LE(BigInt(count), 24)
      z.writeBigUInt64LE(BigInt(count), 32)
      z.writeBigUInt64LE(BigInt(cdSize), 40)
      z.writeBigUInt64LE(BigInt(cdStart), 48)
      // zip64 end-of-central-directory locator
      z.writeUInt32LE(0x07064b50, 56)
      z.writeUInt32LE(0, 60)
      z.writeBigUInt64LE(BigInt(offset), 64)
      z.writeUInt32LE(1, 72)
      yield z
    }
    const end = Buffer.alloc(22)
    end.writeUInt32LE(0x06054b50, 0)
    end.writeUInt16LE(Math.min(count, U16), 8)
    end.writeUInt16LE(Math.min(count, U16), 10)
    end.writeUInt32LE(Math.min(cdSize, U32), 12)
    end.writeUInt32LE(Math.min(cdStart, U32), 16)
    end.writeUInt16LE(0, 20)
    yield end
  }
  const stream = new ZipReadable(generate(), progress, () => {
    closed = true
    stopEntry?.()
  })
  progressOf.set(stream, progress)
  return stream
}

/**
 * The archive as a Node stream: one chunk of the generator per read. Destroyed (its reader gone), it
 * stops the entry being written at once, so the generator returns and the stream closes without waiting
 * for a deflater to produce its next chunk.
 */
class ZipReadable extends Readable {
  readonly #chunks: AsyncGenerator<Buffer>
  readonly #progress: ZipProgress
  readonly #onDestroy: () => void

  constructor(chunks: AsyncGenerator<Buffer>, progress: ZipProgress, onDestroy: () => void) {
    super({ highWaterMark: 256 * 1024 })
    this.#chunks = chunks
    this.#progress = progress
    this.#onDestroy = onDestroy
  }

  override _read(): void {
    this.#chunks.next().then(
      (r) => {
        if (r.done) return void this.push(null)
        this.#progress.written += r.value.length
        this.push(r.value)
      },
      (err: unknown) => this.destroy(err as Error),
    )
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    this.#onDestroy()
    this.#chunks.return(undefined).then(
      () => callback(error),
      () => callback(error),
    )
  }
}

/** Types that are compressed already: stored in the archive without deflate. */
export function isCompressed(type: string): boolean {
  const t = type.toLowerCase()
  return (
    /^(image\/(jpeg|png|gif|webp|avif|heic|heif|jxl)|video\/|audio\/)/.test(t) ||
    /(zip|gzip|x-7z|x-rar|x-bzip2|x-xz|zstd|compressed|x-tar|epub|vnd\.openxmlformats|vnd\.oasis|pdf|woff)/.test(t)
  )
}

/** Unique archive names: `name.ext`, then `name_1.ext`, `name_2.ext`, ... */
export function uniqueNames(): (name: string) => string {
  const used = new Set<string>()
  return (name) => {
    const clean = name.replace(/[\\/]/g, '_').replace(/^\.+/, '_') || 'file'
    if (!used.has(clean.toLowerCase())) {
      used.add(clean.toLowerCase())
      return clean
    }
    const dot = clean.lastIndexOf('.')
    const base = dot > 0 ? clean.slice(0, dot) : clean
    const ext = dot > 0 ? clean.slice(dot) : ''
    for (let i = 1; ; i++) {
      const candidate = `${base}_${i}${ext}`
      if (!used.has(candidate.toLowerCase())) {
        used.add(candidate.toLowerCase())
        return candidate
      }
    }
  }
}
