/**
 * What an image is, learnt once when it is kept: its size as a browser shows it and a ThumbHash
 * placeholder, from one small resize. Bounded like the resizer: sharp's pixel limit, a timeout, and a
 * few analyses at once (beyond the queue: not analysed, `null`). Never fails an upload: a file sharp
 * cannot read is simply not analysed.
 */
import pLimit, { type LimitFunction } from 'p-limit'
import sharp from 'sharp'
import { rgbaToThumbHash } from 'thumbhash'
import type { MediaInfo } from '../model.js'
import { readAll } from '../stores/read-all.js'
import type { Store } from '../stores/store.js'

/** Types analysed (those the sniffer names and sharp reads). */
const ANALYSED = new Set(['image/jpeg', 'image/png', 'image/webp', 'image/gif', 'image/avif', 'image/tiff'])

/**
 * Largest side of the resize a ThumbHash is made from (ThumbHash asks for at most 100 pixels). Its
 * encoding runs on the event loop: at 64 pixels about 1 ms (100 pixels: about 2.5 ms, 80 ms cold).
 */
const PLACEHOLDER_SIDE = 64

/** Longest placeholder kept (base64 characters). */
export const MAX_PLACEHOLDER_CHARS = 48

/** Largest file of a remote temporary store read into memory for analysis; larger ones are not analysed. */
const MAX_REMOTE_BYTES = 32 * 1024 * 1024

/** What bounds an analysis. */
export interface AnalyseOptions {
  /** sharp's `limitInputPixels`: larger images are not analysed. */
  maxInputPixels: number
  /** Analyses running at once in this process. @default 2 */
  concurrency?: number
  /** Analyses waiting for a slot; beyond it a file is not analysed (`null`). @default 16 */
  queue?: number
  /** Seconds one analysis may take in sharp before it is given up. @default 10 */
  timeoutSeconds?: number
}

const limiters = new Map<number, LimitFunction>()

function limiterOf(concurrency: number): LimitFunction {
  let limit = limiters.get(concurrency)
  if (!limit) {
    limit = pLimit(concurrency)
    limiters.set(concurrency, limit)
  }
  return limit
}

/** True when files of this (sniffed) type are analysed. */
export function isAnalysed(type: string): boolean {
  return ANALYSED.has(type)
}

/**
 * The media of an image, from its bytes or a local path: `{width, height, placeholder}` with EXIF
 * orientation applied, or null (not an image sharp reads, corrupt, too many pixels, too slow, too busy).
 * The decoding and the resize run in sharp's threads; only the 64-pixel ThumbHash runs here.
 */
export async function analyseImage(input: string | Buffer, type: string, options: AnalyseOptions): Promise<MediaInfo | null> {
  if (!isAnalysed(type)) return null
  const concurrency = options.concurrency ?? 2
  const limit = limiterOf(concurrency)
  if (limit.activeCount + limit.pendingCount >= concurrency + (options.queue ?? 16)) return null
  return limit(() => analyse(input, options)).catch(() => null)
}

async function analyse(input: string | Buffer, options: AnalyseOptions): Promise<MediaInfo | null> {
  const seconds = options.timeoutSeconds ?? 10
  const open = () => sharp(input, { limitInputPixels: options.maxInputPixels, failOn: 'error' }).timeout({ seconds })
  const meta = await open().metadata()
  const swap = (meta.orientation ?? 1) >= 5
  const width = meta.autoOrient?.width ?? (swap ? meta.height : meta.width)
  const height = meta.autoOrient?.height ?? (swap ? meta.width : meta.height)
  if (!width || !height) return null
  const { data, info } = await open()
    .rotate()
    .resize({ width: PLACEHOLDER_SIDE, height: PLACEHOLDER_SIDE, fit: 'inside' })
    .ensureAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true })
  const placeholder = Buffer.from(rgbaToThumbHash(info.width, info.height, data)).toString('base64')
  if (placeholder.length > MAX_PLACEHOLDER_CHARS) return null
  return { width, height, placeholder }
}

/**
 * The media of a file kept in `store` at `key` (read by path when the store is local; a remote file up
 * to 32 MiB is read whole, a larger one is not analysed). Never throws.
 */
export async function analyseStored(
  store: Store,
  key: string,
  type: string,
  size: number,
  options: AnalyseOptions,
): Promise<MediaInfo | null> {
  if (!isAnalysed(type)) return null
  try {
    const path = store.localPath?.(key)
    if (path) return await analyseImage(path, type, options)
    if (size > MAX_REMOTE_BYTES) return null
    return await analyseImage(await readAll(await store.get(key)), type, options)
  } catch {
    return null
  }
}
