import type { Readable } from 'node:stream'
import sharp, { type Metadata } from 'sharp'
import { badRequest } from '../errors.js'
import type { Store } from '../stores/store.js'

/** Largest `w` / `h` a client may ask for. */
export const MAX_DIMENSION = 4096

/** Types the resizer reads; anything else is served as it is. */
const RESIZABLE = new Set(['image/jpeg', 'image/png', 'image/webp', 'image/avif', 'image/tiff'])

/** Output formats a client may ask for with `format=`. */
const FORMATS = { webp: 'image/webp', avif: 'image/avif', jpeg: 'image/jpeg', png: 'image/png' } as const
type Format = keyof typeof FORMATS

/** A parsed resize request: the bounding box and the output format (undefined: the original's). */
export interface ResizeRequest {
  w: number | undefined
  h: number | undefined
  format: Format | undefined
  /** The format was negotiated on `Accept` (`format=auto`): answers vary by Accept. */
  negotiated: boolean
}

function dimension(value: string | null, name: string): number | undefined {
  if (value === null) return undefined
  if (!/^\d{1,5}$/.test(value)) throw badRequest(`${name} must be a whole number of pixels from 1 to ${MAX_DIMENSION}`)
  const n = Number(value)
  if (n < 1 || n > MAX_DIMENSION) throw badRequest(`${name} must be a whole number of pixels from 1 to ${MAX_DIMENSION}`)
  return n
}

/**
 * Reads `w`, `h` and `format` (`webp`, `avif`, `jpeg`, `png` or `auto`, negotiated on `Accept`) of a view
 * request. Undefined when neither `w` nor `h` is given; 400 on a bad value.
 */
export function parseResizeRequest(url: URL, accept: string | null): ResizeRequest | undefined {
  const w = dimension(url.searchParams.get('w'), 'w')
  const h = dimension(url.searchParams.get('h'), 'h')
  const f = url.searchParams.get('format')
  let format: Format | undefined
  let negotiated = false
  if (f !== null && f !== '') {
    if (f === 'auto') {
      negotiated = true
      const a = (accept ?? '').toLowerCase()
      format = a.includes('image/avif') ? 'avif' : a.includes('image/webp') ? 'webp' : undefined
    } else if (f in FORMATS) {
      format = f as Format
    } else {
      throw badRequest('format must be one of webp, avif, jpeg, png, auto')
    }
  }
  if (w === undefined && h === undefined) return undefined
  return { w, h, format, negotiated }
}

/** True when the resizer reads this media type. */
export function isResizable(type: string): boolean {
  return RESIZABLE.has(type)
}

/** The variant's store key: beside the original, `{savedDir}_v/{id}/{w}x{h}[.{format}]`. */
export function variantKey(originalDirKey: string, id: number, r: ResizeRequest): string {
  return `${originalDirKey}_v/${id}/${r.w ?? 0}x${r.h ?? 0}${r.format ? '.' + r.format : ''}`
}

/** The folder of every variant of one record. */
export function variantPrefix(originalDirKey: string, id: number): string {
  return `${originalDirKey}_v/${id}/`
}

/** What a made variant is. */
export interface Variant {
  key: string
  size: number
  type: string
  /** The bytes, when this request just made the variant (stored already; served without a re-read). */
  bytes?: Buffer
}

/** Options of the resizer. */
export interface ResizerOptions {
  /** Largest input image in pixels (width × height) the decoder accepts: the guard against image bombs. */
  maxInputPixels: number
}

/**
 * Makes resized variants through the attachment's own store: read the original, apply EXIF orientation,
 * fit inside the box without distortion and never upscale, write the variant atomically, and only then
 * serve it. Identical requests that arrive together share one generation. Images the decoder refuses
 * (corrupt, truncated, too many pixels) are remembered and served as their original.
 */
export class Resizer {
  readonly #inflight = new Map<string, Promise<Variant | undefined>>()
  /** Keys whose original needs no resize or cannot be decoded: serve the original. */
  readonly #asOriginal = new Map<string, true>()
  /** Variants known to be in their store: a cached view costs no store round trip to find it. */
  readonly #known = new Map<string, Variant>()
  readonly #options: ResizerOptions
  /** How many variants this process has generated (for tests and benchmarks). */
  generated = 0

  constructor(options: ResizerOptions) {
    this.#options = options
  }

  /**
   * The variant for a request, made on first use; undefined when the original should be served as it is
   * (smaller than the box, not decodable).
   */
  async variant(
    store: Store,
    originalKey: string,
    key: string,
    originalType: string,
    r: ResizeRequest,
    onError: (err: unknown) => void,
  ): Promise<Variant | undefined> {
    const cacheKey = `${store.name}\u0000${key}`
    if (this.#asOriginal.has(cacheKey)) return undefined
    const known = this.#known.get(cacheKey)
    if (known) return known
    const type = r.format ? FORMATS[r.format] : originalType
    try {
      const s = await store.stat(key)
      if (s.size > 0) return this.#remember_(cacheKey, { key, size: s.size, type })
    } catch {
      // Not made yet.
    }
    let p = this.#inflight.get(cacheKey)
    if (!p) {
      p = this.#make(store, originalKey, key, type, r)
        .then((v) => {
          if (v) this.#remember_(cacheKey, { key: v.key, size: v.size, type: v.type })
          return v
        })
        .catch((err) => {
          onError(err)
          this.#remember(cacheKey)
          return undefined
        })
        .finally(() => this.#inflight.delete(cacheKey))
      this.#inflight.set(cacheKey, p)
    }
    return p
  }

  /** Variants are deleted only with their record, whose lookup fails first; forgetting is for memory. */
  #remember_(cacheKey: string, v: Variant): Variant {
    if (this.#known.size > 50_000) this.#known.delete(this.#known.keys().next().value!)
    this.#known.set(cacheKey, v)
    return v
  }

  /** Forgets what is known of a record's variants (called when it is deleted). */
  forget(storeName: string, prefix: string): void {
    const start = `${storeName}\u0000${prefix}`
    for (const k of this.#known.keys()) if (k.startsWith(start)) this.#known.delete(k)
    for (const k of this.#asOriginal.keys()) if (k.startsWith(start)) this.#asOriginal.delete(k)
  }

  #remember(cacheKey: string): void {
    if (this.#asOriginal.size > 10_000) this.#asOriginal.delete(this.#asOriginal.keys().next().value!)
    this.#asOriginal.set(cacheKey, true)
  }

  async #make(store: Store, originalKey: string, key: string, type: string, r: ResizeRequest): Promise<Variant | undefined> {
    // The header tells the size; an original inside the box is served as it is (never upscaled).
    // A local original is read by path: the decoder then seeks instead of being fed a stream.
    const path = store.localPath?.(originalKey)
    const meta = path
      ? await sharp(path, { limitInputPixels: this.#options.maxInputPixels, failOn: 'none' }).metadata()
      : await readMetadata(await store.get(originalKey), this.#options.maxInputPixels)
    const swap = (meta.orientation ?? 1) >= 5
    const width = swap ? meta.height : meta.width
    const height = swap ? meta.width : meta.height
    if (!width || !height) throw new Error('the image has no dimensions')
    if (width * height > this.#options.maxInputPixels) throw new Error(`the image has more than ${this.#options.maxInputPixels} pixels`)
    const fits = (r.w === undefined || width <= r.w) && (r.h === undefined || height <= r.h)
    if (fits && !r.format) {
      this.#remember(`${store.name}\u0000${key}`)
      return undefined
    }
    const options = { limitInputPixels: this.#options.maxInputPixels, failOn: 'error' as const, sequentialRead: true }
    const pipeline = (path ? sharp(path, options) : sharp(options))
      .rotate()
      .resize({ width: r.w, height: r.h, fit: 'inside', withoutEnlargement: true })
    if (r.format) pipeline.toFormat(r.format, r.format === 'avif' ? { effort: 2 } : {})
    if (!path) {
      const source = await store.get(originalKey)
      source.on('error', (err) => pipeline.destroy(err))
      pipeline.on('error', () => source.destroy())
      source.pipe(pipeline)
    }
    // A variant is at most 4096×4096: made in memory, written whole (atomically), then served from here.
    const bytes = await pipeline.toBuffer()
    if (bytes.length === 0) throw new Error('the resizer produced no bytes')
    await store.put(key, bytes, { contentType: type })
    this.generated++
    return { key, size: bytes.length, type, bytes }
  }
}

async function readMetadata(stream: Readable, maxInputPixels: number): Promise<Metadata> {
  // The decoder needs only the header; the rest of the stream is dropped.
  const chunks: Buffer[] = []
  let size = 0
  for await (const c of stream) {
    chunks.push(c as Buffer)
    size += (c as Buffer).length
    if (size >= 512 * 1024) break
  }
  stream.destroy()
  const head = Buffer.concat(chunks)
  return sharp(head, { limitInputPixels: maxInputPixels, failOn: 'none' }).metadata()
}
