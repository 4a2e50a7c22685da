import { rm } from 'node:fs/promises'
import type { Readable } from 'node:stream'
import sharp from 'sharp'
import { parseSize } from '../config/units.js'
import { isHeic, MAX_HEIC_BYTES, heicSize } from '../media/heic.js'
import { spoolToFile } from '../media/spool.js'
import { readAll } from '../stores/read-all.js'

/** What a filter is shown of an uploaded file. Everything here is derived from the stored bytes. */
export interface FileProbe {
  /** The client's file name (only for messages; never trusted for the type). */
  displayName: string
  /** Lower-case extension of the client's name, without the dot. */
  extension: string
  /** Size in bytes, counted. */
  size: number
  /** Media type sniffed from the content. */
  type: string
  /** Hex sha256 of the content. */
  sha256: string
  /** The first bytes of the content (up to 64 KiB). */
  head: Uint8Array
  /** Streams the whole stored content. */
  open(): Promise<Readable>
}

/** A filter's verdict on a file: `null`/`undefined` passes; `{code, message}` rejects it. */
// biome-ignore lint/suspicious/noConfusingVoidType: public API, so that a check() with no return statement is a valid filter
export type FilterVerdict = { code: string; message: string } | null | undefined | void

/**
 * One filter of a filter chain. Register it with `registry.registerFilter()`, then name it in a
 * category's `filters` (or, as a request filter, in an upload's `filters` object).
 *
 * @example
 * const noEmpty: AttachFilter = {
 *   name: 'no-empty',
 *   check: (file) => (file.size === 0 ? { code: 'no-empty', message: `${file.displayName} is empty` } : null),
 * }
 */
export interface AttachFilter {
  /** The name a category's chain or a request's `filters` object uses. */
  readonly name: string
  /**
   * Judges one received file, with the options of the chain entry (`{name, ...options}`) or of the
   * request. A throw refuses the file with the filter's name as the code (and is logged).
   */
  check(file: FileProbe, options: Record<string, unknown>): FilterVerdict | Promise<FilterVerdict>
}

const formatBytes = (n: number): string =>
  n >= 1024 ** 3
    ? `${(n / 1024 ** 3).toFixed(1)} GB`
    : n >= 1024 ** 2
      ? `${(n / 1024 ** 2).toFixed(1)} MB`
      : n >= 1024
        ? `${(n / 1024).toFixed(1)} KB`
        : `${n} bytes`

/**
 * `size`: rejects files larger than `maxSize`. A bare number is megabytes (what existing clients send);
 * a string carries its unit (`"500KB"`, `"2MB"`). Error code `size`.
 */
export const sizeFilter: AttachFilter = {
  name: 'size',
  check(file, options) {
    const raw = options.maxSize
    if (raw === undefined) return null
    const max = parseSize(raw, 'mb')
    if (max === undefined) return { code: 'size', message: `maxSize ${JSON.stringify(raw)} is not a size` }
    if (file.size > max) {
      return { code: 'size', message: `${file.displayName} is ${formatBytes(file.size)}, larger than ${formatBytes(max)}` }
    }
    return null
  },
}

/**
 * Reads an image's width and height (EXIF orientation applied), or undefined for non-images. The header
 * is read from the probe's head; when it is not there (large metadata blocks before it, a TIFF directory
 * at the end), the content is spooled to a temporary file (deleted before this returns) and the decoder
 * reads the header from the file: it is never handed a stream, which it would buffer whole.
 */
export async function imageDimensions(file: FileProbe): Promise<{ width: number; height: number } | undefined> {
  if (!file.type.startsWith('image/') || file.type === 'image/svg+xml') return undefined
  if (isHeic(file.type)) return heicDimensions(file)
  const read = async (input: Buffer | string) => {
    const meta = await sharp(input, { failOn: 'none' }).metadata()
    if (!meta.width || !meta.height) return undefined
    const swap = meta.orientation !== undefined && meta.orientation >= 5
    return swap ? { width: meta.height, height: meta.width } : { width: meta.width, height: meta.height }
  }
  const fromHead = await read(Buffer.from(file.head.buffer, file.head.byteOffset, file.head.byteLength)).catch(() => undefined)
  if (fromHead || file.head.byteLength >= file.size) return fromHead
  let path: string | undefined
  try {
    path = await spoolToFile(await file.open())
    return await read(path)
  } catch {
    return undefined
  } finally {
    if (path) await rm(path, { force: true }).catch(() => undefined)
  }
}

/**
 * A HEIC photo's size as shown, from its header (in the HEIC worker): the head first, the whole file (at
 * most {@link MAX_HEIC_BYTES}) when the header reaches past it; undefined when it cannot be read.
 */
async function heicDimensions(file: FileProbe): Promise<{ width: number; height: number } | undefined> {
  const fromHead = await heicSize(file.head)
  if (fromHead || file.head.byteLength >= file.size || file.size > MAX_HEIC_BYTES) return fromHead
  try {
    return await heicSize(await readAll(await file.open()))
  } catch {
    return undefined
  }
}

/**
 * `dimension`: rejects an image outside `minWidth`, `minHeight`, `maxWidth`, `maxHeight` (pixels, each
 * optional). A non-image passes. Error code `dimension`.
 */
export const dimensionFilter: AttachFilter = {
  name: 'dimension',
  async check(file, options) {
    const limits = ['minWidth', 'minHeight', 'maxWidth', 'maxHeight'] as const
    const bounds: Partial<Record<(typeof limits)[number], number>> = {}
    for (const k of limits) {
      const val = options[k]
      if (val === undefined || val === null) continue
      const n = Number(val)
      if (!Number.isFinite(n) || n < 0) return { code: 'dimension', message: `${k} must be a number of pixels` }
      bounds[k] = n
    }
    if (Object.keys(bounds).length === 0) return null
    const dim = await imageDimensions(file)
    if (!dim) return null
    const { width, height } = dim
    const bad =
      (bounds.minWidth !== undefined && width < bounds.minWidth) ||
      (bounds.minHeight !== undefined && height < bounds.minHeight) ||
      (bounds.maxWidth !== undefined && width > bounds.maxWidth) ||
      (bounds.maxHeight !== undefined && height > bounds.maxHeight)
    if (!bad) return null
    const range = (lo?: number, hi?: number) => `${lo ?? 0}..${hi ?? '∞'}`
    return {
      code: 'dimension',
      message: `${file.displayName} is ${width}×${height} px; allowed width ${range(bounds.minWidth, bounds.maxWidth)}, height ${range(bounds.minHeight, bounds.maxHeight)}`,
    }
  },
}

/** Raster image types that the `image` filter accepts (SVG is not one: it can carry script). */
const IMAGE_TYPES = new Set([
  'image/jpeg',
  'image/png',
  'image/gif',
  'image/webp',
  'image/avif',
  'image/heic',
  'image/heif',
  'image/bmp',
  'image/tiff',
  'image/x-icon',
  'image/vnd.microsoft.icon',
  'image/jxl',
])

/** Types whose header is read (by sharp, or the HEIC worker), so a signature alone does not make an image. */
const DECODABLE = new Set(['image/jpeg', 'image/png', 'image/gif', 'image/webp', 'image/avif', 'image/tiff', 'image/heic', 'image/heif'])

/**
 * `image`: only raster images, judged by content, not by name: the signature must name an image type
 * and, for the types the decoder reads, the header must give the image's dimensions. Error code `type`.
 */
export const imageFilter: AttachFilter = {
  name: 'image',
  async check(file) {
    if (IMAGE_TYPES.has(file.type) && (!DECODABLE.has(file.type) || (await imageDimensions(file)))) return null
    return { code: 'type', message: `${file.displayName} is not an image (${file.type})` }
  },
}

/**
 * `type`: `allow` and/or `deny` lists of media types (`image/*` wildcards allowed), judged by content.
 * Error code `type`.
 */
export const typeFilter: AttachFilter = {
  name: 'type',
  check(file, options) {
    const list = (x: unknown): string[] =>
      Array.isArray(x) ? x.map(String) : typeof x === 'string' ? x.split(',').map((s) => s.trim()) : []
    const matches = (pattern: string) => (pattern.endsWith('/*') ? file.type.startsWith(pattern.slice(0, -1)) : file.type === pattern)
    const allow = list(options.allow)
    const deny = list(options.deny)
    if (deny.some(matches) || (allow.length > 0 && !allow.some(matches))) {
      return { code: 'type', message: `${file.displayName}: files of type ${file.type} are not accepted here` }
    }
    return null
  },
}

/** Filters a request's `filters` object may name without registration. */
export const DEFAULT_REQUEST_FILTERS: readonly AttachFilter[] = [sizeFilter, dimensionFilter]

/** Filters a category's chain may name without registration. */
export const BUILT_IN_FILTERS: readonly AttachFilter[] = [sizeFilter, dimensionFilter, imageFilter, typeFilter]
