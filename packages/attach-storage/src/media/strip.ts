/**
 * Removing EXIF, XMP and IPTC from stored JPEG, PNG and WebP originals, keeping the ICC profile.
 *
 * Two streaming passes over the bytes, each with flat memory: {@link planStrip} walks the container
 * (JPEG segments up to the scan, PNG and RIFF chunks to the end) and says what would go and the EXIF
 * orientation; {@link stripStream} then copies everything else byte for byte. Only an orientation of
 * 2..8 needs the pixels: {@link reorient} turns them with sharp and re-encodes, keeping the ICC profile.
 * Every read is bounded (a segment body read whole is at most 64 KiB; chunk payloads are streamed),
 * every loop ends with the bytes, and only the first IFD of an EXIF block is read (no link is followed),
 * so a block that lies about its sizes or loops its IFDs costs nothing more than a well-formed one.
 */
import { type Readable, Transform, type TransformCallback } from 'node:stream'
import sharp from 'sharp'

/** The types whose metadata is stripped. */
export const STRIPPABLE_TYPES: ReadonlySet<string> = new Set(['image/jpeg', 'image/png', 'image/webp'])

/** A file whose container cannot be walked although it carries metadata to remove (code `corrupt`). */
export class StripError extends Error {
  readonly code = 'corrupt'
  /** Metadata to remove was found before the point where the walk failed. */
  metadataSeen = false
}

/** What {@link planStrip} found. */
export interface StripPlan {
  /** Bytes that would go (0: the file is kept as it is, unless `orientation` says otherwise). */
  removed: number
  /** The EXIF orientation (1..8; 1 when absent or unreadable). */
  orientation: number
}

const JPEG_DROP = new Set([0xe1, 0xed, 0xfe]) // APP1 (Exif, XMP), APP13 (IPTC/Photoshop), COM
const PNG_DROP = new Set(['eXIf', 'tEXt', 'iTXt', 'zTXt'])
const WEBP_DROP = new Set(['EXIF', 'XMP '])
const PNG_SIGNATURE = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a])
/** Largest EXIF block read for its orientation; the rest of a larger one is skipped unread. */
const EXIF_READ = 64 * 1024
/** Fill bytes (0xFF) accepted between two JPEG segments before the file counts as corrupt. */
const MAX_FILL = 1024

/** Pulls bytes from a stream: exact reads (small), and streamed copies or skips of any length. */
class Reader {
  readonly #it: AsyncIterator<Buffer>
  #buf: Buffer = Buffer.alloc(0)

  constructor(source: AsyncIterable<Buffer | Uint8Array>) {
    this.#it = (source as AsyncIterable<Buffer>)[Symbol.asyncIterator]()
  }

  async #more(): Promise<boolean> {
    const next = await this.#it.next()
    if (next.done) return false
    const chunk = Buffer.isBuffer(next.value) ? next.value : Buffer.from(next.value)
    this.#buf = this.#buf.length ? Buffer.concat([this.#buf, chunk]) : chunk
    return true
  }

  /** Exactly `n` bytes (n is small), or a StripError at the end of the file. */
  async read(n: number): Promise<Buffer> {
    while (this.#buf.length < n) if (!(await this.#more())) throw new StripError('the file ends in the middle of a block')
    const out = this.#buf.subarray(0, n)
    this.#buf = this.#buf.subarray(n)
    return out
  }

  /** True when no byte is left. */
  async atEnd(): Promise<boolean> {
    return this.#buf.length === 0 && !(await this.#more())
  }

  /** The next `n` bytes as they come (copied when `emit`, dropped otherwise); a StripError if the file ends first. */
  async *take(n: number, emit: boolean): AsyncGenerator<Buffer> {
    let left = n
    while (left > 0) {
      if (this.#buf.length === 0 && !(await this.#more())) throw new StripError('a block runs past the end of the file')
      const part = this.#buf.subarray(0, Math.min(left, this.#buf.length))
      this.#buf = this.#buf.subarray(part.length)
      left -= part.length
      if (emit) yield part
    }
  }

  /** Everything left, as it comes. */
  async *rest(): AsyncGenerator<Buffer> {
    if (this.#buf.length) yield this.#buf
    this.#buf = Buffer.alloc(0)
    for (;;) {
      const next = await this.#it.next()
      if (next.done) return
      yield Buffer.isBuffer(next.value) ? next.value : Buffer.from(next.value)
    }
  }

  /** Stops reading (the source is released). */
  async close(): Promise<void> {
    await this.#it.return?.()
  }
}

/**
 * The orientation tag (0x0112) of IFD0 of a TIFF-structured EXIF block; 1 when absent or unreadable.
 * Only IFD0 is read and every offset is checked against the block's length.
 */
export function exifOrientation(tiff: Buffer): number {
  let t = tiff
  if (t.length >= 6 && t.toString('latin1', 0, 6) === 'Exif\0\0') t = t.subarray(6)
  if (t.length < 8) return 1
  const le = t[0] === 0x49 && t[1] === 0x49
  if (!le && !(t[0] === 0x4d && t[1] === 0x4d)) return 1
  const u16 = (o: number) => (le ? t.readUInt16LE(o) : t.readUInt16BE(o))
  const u32 = (o: number) => (le ? t.readUInt32LE(o) : t.readUInt32BE(o))
  if (u16(2) !== 42) return 1
  const ifd = u32(4)
  if (ifd < 8 || ifd + 2 > t.length) return 1
  const count = u16(ifd)
  for (let i = 0; i < count; i++) {
    const entry = ifd + 2 + i * 12
    if (entry + 12 > t.length) return 1
    if (u16(entry) !== 0x0112) continue
    if (u16(entry + 2) !== 3) return 1
    const value = u16(entry + 8)
    return value >= 1 && value <= 8 ? value : 1
  }
  return 1
}

type Walk = AsyncGenerator<Buffer, StripPlan>

async function* walkJpeg(r: Reader, emit: boolean, plan: StripPlan): Walk {
  const soi = await r.read(2)
  if (emit) yield soi
  for (;;) {
    let fill = 0
    let marker = (await r.read(1))[0]!
    if (marker !== 0xff) throw new StripError('a JPEG segment does not start with a marker')
    while (marker === 0xff) {
      if (++fill > MAX_FILL) throw new StripError('too many fill bytes between JPEG segments')
      marker = (await r.read(1))[0]!
    }
    const head = Buffer.from([0xff, marker])
    if (marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
      if (emit) yield head
      continue
    }
    if (marker === 0xd9 || marker === 0x00) throw new StripError('the JPEG ends before its image data')
    const lengthBytes = await r.read(2)
    const length = lengthBytes.readUInt16BE(0)
    if (length < 2) throw new StripError('a JPEG segment has an impossible length')
    if (marker === 0xda) {
      // The scan and everything after it are copied as they are.
      if (emit) {
        yield head
        yield lengthBytes
        yield* r.rest()
      }
      return plan
    }
    if (JPEG_DROP.has(marker)) {
      plan.removed += 2 + length
      const body = await r.read(length - 2)
      if (marker === 0xe1 && plan.orientation === 1 && body.toString('latin1', 0, 6) === 'Exif\0\0') {
        plan.orientation = exifOrientation(body)
      }
      continue
    }
    if (emit) {
      yield head
      yield lengthBytes
    }
    yield* r.take(length - 2, emit)
  }
}

async function* walkPng(r: Reader, emit: boolean, plan: StripPlan): Walk {
  const signature = await r.read(8)
  if (!signature.equals(PNG_SIGNATURE)) throw new StripError('not a PNG signature')
  if (emit) yield signature
  for (;;) {
    const head = await r.read(8)
    const length = head.readUInt32BE(0)
    if (length > 0x7fffffff) throw new StripError('a PNG chunk has an impossible length')
    const type = head.toString('latin1', 4, 8)
    if (PNG_DROP.has(type)) {
      plan.removed += 12 + length
      if (type === 'eXIf' && plan.orientation === 1 && length <= EXIF_READ) {
        plan.orientation = exifOrientation(await r.read(length))
        yield* r.take(4, false)
      } else {
        yield* r.take(length + 4, false)
      }
      continue
    }
    if (emit) yield head
    yield* r.take(length + 4, emit)
    if (type === 'IEND') {
      if (emit) yield* r.rest()
      return plan
    }
  }
}

async function* walkWebp(r: Reader, emit: boolean, plan: StripPlan, removed: number): Walk {
  const header = await r.read(12)
  if (header.toString('latin1', 0, 4) !== 'RIFF' || header.toString('latin1', 8, 12) !== 'WEBP') {
    throw new StripError('not a WebP file')
  }
  const riffSize = header.readUInt32LE(4)
  if (emit) {
    const fixed = Buffer.from(header)
    fixed.writeUInt32LE(riffSize - removed, 4)
    yield fixed
  }
  let left = riffSize - 4
  while (left > 0) {
    if (left < 8) throw new StripError('a WebP chunk runs past the RIFF size')
    const head = await r.read(8)
    const fourcc = head.toString('latin1', 0, 4)
    const size = head.readUInt32LE(4)
    const padded = size + (size & 1)
    if (8 + padded > left) throw new StripError('a WebP chunk runs past the RIFF size')
    left -= 8 + padded
    if (WEBP_DROP.has(fourcc)) {
      plan.removed += 8 + padded
      if (fourcc === 'EXIF' && plan.orientation === 1 && size <= EXIF_READ) {
        plan.orientation = exifOrientation(await r.read(size))
        yield* r.take(padded - size, false)
      } else {
        yield* r.take(padded, false)
      }
      continue
    }
    if (fourcc === 'VP8X' && size >= 1) {
      const body = Buffer.from(await r.read(padded))
      body[0] = body[0]! & ~0x0c // the EXIF (0x08) and XMP (0x04) flags: their chunks go
      if (emit) yield Buffer.concat([head, body])
      continue
    }
    if (emit) yield head
    yield* r.take(padded, emit)
  }
  if (emit) yield* r.rest()
  return plan
}

function walk(type: string, r: Reader, emit: boolean, removed: number, plan: StripPlan = { removed: 0, orientation: 1 }): Walk {
  if (type === 'image/jpeg') return walkJpeg(r, emit, plan)
  if (type === 'image/png') return walkPng(r, emit, plan)
  if (type === 'image/webp') return walkWebp(r, emit, plan, removed)
  throw new TypeError(`strip: unsupported type ${type}`)
}

/**
 * Walks a JPEG, PNG or WebP without keeping it and says what {@link stripStream} would remove and the
 * EXIF orientation. A JPEG is read only up to its scan. Throws a {@link StripError} for a container
 * that cannot be walked (`metadataSeen` says whether metadata was found before the break).
 */
export async function planStrip(source: AsyncIterable<Buffer | Uint8Array>, type: string): Promise<StripPlan> {
  const r = new Reader(source)
  const plan: StripPlan = { removed: 0, orientation: 1 }
  try {
    const it = walk(type, r, false, 0, plan)
    for (;;) {
      const step = await it.next()
      if (step.done) return step.value
    }
  } catch (err) {
    if (err instanceof StripError) err.metadataSeen = plan.removed > 0
    throw err
  } finally {
    await r.close()
  }
}

/**
 * The file without its EXIF, XMP and IPTC blocks, every other byte as it was (`plan` from
 * {@link planStrip} over the same bytes).
 */
export async function* stripStream(source: AsyncIterable<Buffer | Uint8Array>, type: string, plan: StripPlan): AsyncGenerator<Buffer> {
  const r = new Reader(source)
  try {
    yield* walk(type, r, true, plan.removed)
  } finally {
    await r.close()
  }
}

/**
 * The picture turned upright (its EXIF orientation applied to the pixels) and re-encoded in its own
 * format at high quality, with its ICC profile and no other metadata.
 */
export function reorient(source: Readable, type: string, maxInputPixels: number): Readable {
  const image = sharp({ limitInputPixels: maxInputPixels, failOn: 'none' }).rotate().keepIccProfile()
  if (type === 'image/png') image.png()
  else if (type === 'image/webp') image.webp({ quality: 92 })
  else image.jpeg({ quality: 92 })
  source.on('error', (err) => image.destroy(err))
  return source.pipe(image)
}

/** What {@link JpegStripper} did to the bytes that went through it. */
export interface StreamStrip {
  /**
   * `stripped`: the output is the JPEG without its EXIF, XMP, IPTC and comments (`removed` bytes fewer,
   * possibly 0), nothing else to do. `orient`: an EXIF orientation 2..8 was met; that block and all that
   * follows went through as they were, so the pixels still have to be turned (the post-pass).
   * `not-jpeg`: the bytes went through untouched. `corrupt`: the walk broke after metadata was removed
   * (the output is not a usable file; `error` says why); a walk that breaks before any removal lets the
   * bytes through untouched (`not-jpeg`).
   */
  outcome: 'stripped' | 'orient' | 'not-jpeg' | 'corrupt'
  removed: number
  error?: StripError
}

/**
 * A pass-through that removes a JPEG's EXIF, XMP, IPTC and comments while it is being received, so the
 * bytes are written (and hashed) once: the segments before the first scan are walked as they come
 * (APP1, APP13 and COM dropped; every other byte, fill bytes included, kept as it is), then everything
 * from the scan on flows through untouched. Anything that is not a JPEG, or an EXIF orientation that asks
 * for the pixels to be turned, is let through for the post-pass ({@link planStrip}, {@link reorient}).
 * Memory: at most one dropped segment (64 KiB) and 1 KiB of fill bytes are held; a walk that breaks
 * lets the rest through (see {@link StreamStrip}).
 */
export class JpegStripper extends Transform {
  #buf: Buffer = Buffer.alloc(0)
  /** Chunks not joined to `#buf` yet: joined once `#need` bytes are there (a trickle costs no copies). */
  #parts: Buffer[] = []
  #partsLength = 0
  #need = 1
  /** Bytes of the file seen so far (for the SOI check). */
  #seen = 0
  /** Bytes of a kept segment's body still to copy. */
  #copy = 0
  #pass = false
  readonly result: StreamStrip = { outcome: 'not-jpeg', removed: 0 }

  constructor() {
    super({ highWaterMark: 256 * 1024 })
  }

  override _transform(chunk: Buffer, _enc: BufferEncoding, callback: TransformCallback): void {
    if (this.#pass) {
      callback(null, chunk)
      return
    }
    this.#seen += chunk.length
    this.#parts.push(chunk)
    this.#partsLength += chunk.length
    if (this.#buf.length + this.#partsLength < this.#need) {
      callback()
      return
    }
    this.#gather()
    try {
      this.#walk()
    } catch (err) {
      this.#broke(err as StripError)
    }
    callback()
  }

  override _flush(callback: TransformCallback): void {
    this.#gather()
    if (!this.#pass) this.#broke(new StripError('the file ends in the middle of a block'))
    callback()
  }

  #gather(): void {
    if (this.#parts.length === 0) return
    this.#buf = this.#buf.length === 0 && this.#parts.length === 1 ? this.#parts[0]! : Buffer.concat([this.#buf, ...this.#parts])
    this.#parts = []
    this.#partsLength = 0
  }

  /** Gives up walking: the rest goes through as it is. */
  #passRest(outcome: StreamStrip['outcome']): void {
    this.result.outcome = outcome
    this.#pass = true
    if (this.#buf.length) this.push(this.#buf)
    this.#buf = Buffer.alloc(0)
  }

  #broke(err: StripError): void {
    if (this.result.removed > 0) {
      err.metadataSeen = true
      this.result.error = err
      this.#passRest('corrupt')
    } else {
      // Nothing was removed: every byte so far went through as it was.
      this.#passRest('not-jpeg')
    }
  }

  #emit(n: number): void {
    if (n > 0) this.push(this.#buf.subarray(0, n))
    this.#buf = this.#buf.subarray(n)
  }

  /** Walks what is buffered as far as it can; the rest waits for more bytes. */
  #walk(): void {
    this.#need = 1
    if (this.#seen === this.#buf.length && this.result.outcome === 'not-jpeg') {
      // The start of the file: FF D8 FF, or not a JPEG.
      if (this.#buf.length < 3) {
        this.#need = 3
        return
      }
      if (this.#buf[0] !== 0xff || this.#buf[1] !== 0xd8 || this.#buf[2] !== 0xff) {
        this.#passRest('not-jpeg')
        return
      }
      this.result.outcome = 'stripped'
      this.#emit(2)
    }
    for (;;) {
      if (this.#copy > 0) {
        const n = Math.min(this.#copy, this.#buf.length)
        this.#copy -= n
        this.#emit(n)
        if (this.#copy > 0) return
      }
      const b = this.#buf
      if (b.length === 0) return
      if (b[0] !== 0xff) throw new StripError('a JPEG segment does not start with a marker')
      let at = 1
      while (at < b.length && b[at] === 0xff) {
        if (at > MAX_FILL) throw new StripError('too many fill bytes between JPEG segments')
        at++
      }
      if (at >= b.length) {
        this.#need = at + 1
        return
      }
      const marker = b[at]!
      if (marker === 0x01 || (marker >= 0xd0 && marker <= 0xd7)) {
        this.#emit(at + 1)
        continue
      }
      if (marker === 0xd9 || marker === 0x00) throw new StripError('the JPEG ends before its image data')
      if (b.length < at + 3) {
        this.#need = at + 3
        return
      }
      const length = b.readUInt16BE(at + 1)
      if (length < 2) throw new StripError('a JPEG segment has an impossible length')
      if (marker === 0xda) {
        this.#passRest('stripped')
        return
      }
      if (JPEG_DROP.has(marker)) {
        const end = at + 1 + length
        if (b.length < end) {
          this.#need = end
          return
        }
        if (marker === 0xe1 && b.toString('latin1', at + 3, at + 9) === 'Exif\0\0' && exifOrientation(b.subarray(at + 3, end)) !== 1) {
          // The pixels must be turned: the post-pass reads this orientation, so it stays.
          this.#passRest('orient')
          return
        }
        // Fill bytes before a dropped segment go with it.
        this.result.removed += end
        this.#buf = b.subarray(end)
        continue
      }
      this.#copy = length - 2
      this.#emit(at + 3)
    }
  }
}
