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

/**
 * Streams a ZIP archive of `sources`, never holding more than one chunk of one file: local headers with
 * data descriptors, names in UTF-8 with the language-encoding flag (bit 11), deflate through zlib for
 * compressible entries, and zip64 records wherever a size, an offset or the entry count passes the
 * classic limits (archives past 4 GiB). A source whose `open()` throws is skipped (`onSkip`).
 * Resolves `entries` with the number of files written once the archive ends.
 */
export function createZipStream(
  sources: AsyncIterable<ZipSource> | Iterable<ZipSource>,
  options: { onSkip?: (source: ZipSource, err: unknown) => void; level?: number } = {},
): Readable {
  async function* generate(): AsyncGenerator<Buffer> {
    const written: Written[] = []
    let offset = 0
    for await (const src of sources) {
      let input: Readable
      try {
        input = await src.open()
      } catch (err) {
        options.onSkip?.(src, err)
        continue
      }
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
      yield header
      yield name
      if (extra.length) yield extra
      offset += 30 + name.length + extra.length

      let crc = 0
      let usize = 0
      let csize = 0
      let data: AsyncIterable<Buffer> = input
      if (src.compress) {
        const deflate = zlib.createDeflateRaw({ level: options.level ?? 6 })
        input.on('error', (err) => deflate.destroy(err))
        data = input.pipe(deflate)
      }
      if (src.compress) {
        input.on('data', (c: Buffer) => {
          crc = crc32(c, crc)
          usize += c.length
        })
      }
      try {
        for await (const chunk of data) {
          if (!src.compress) {
            crc = crc32(chunk, crc)
            usize += chunk.length
          }
          csize += chunk.length
          yield chunk
        }
      } finally {
        input.destroy()
      }
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
  return Readable.from(generate(), { objectMode: false, highWaterMark: 256 * 1024 })
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
