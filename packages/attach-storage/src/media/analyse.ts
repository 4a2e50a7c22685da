/**
 * What an image is, learnt once when it is kept: its size as a browser shows it and a ThumbHash
 * placeholder, from one small resize. Bounded like the resizer: sharp's pixel limit, a timeout, and a
 * few analyses at once (beyond the queue: not analysed, `null`). Never fails an upload: a file sharp
 * cannot read is simply not analysed.
 */
import { limitFamily } from './limits.js'
import sharp from 'sharp'
import { rgbaToThumbHash } from 'thumbhash'
import type { ImageMedia as MediaInfo } from '../model.js'
import { readAll } from '../stores/read-all.js'
import type { Store } from '../stores/store.js'
import { HeicError, heicImage, isHeic } from './heic.js'

/** Types analysed (those the sniffer names and sharp reads). */
const ANALYSED = new Set(['image/jpeg', 'image/png', 'image/webp', 'image/gif', 'image/avif', 'image/tiff', 'image/heic', 'image/heif'])

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

/** Analyses at once, per `concurrency` setting (their own pools: resizes and re-encodes have theirs). */
const analyses = limitFamily()

/** True when an analysis asked for now would find its queue full (and answer `null`). */
export function analysisBusy(options: AnalyseOptions): boolean {
  const concurrency = options.concurrency ?? 2
  const limit = analyses.of(concurrency)
  return limit.activeCount + limit.pendingCount >= concurrency + (options.queue ?? 16)
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
  return (await explainImage(input, type, options)).media
}

/** An analysis's outcome: the media, or null and, when the file itself is at fault, what is wrong with it. */
export interface Analysis {
  media: MediaInfo | null
  /**
   * Set when the decoder refused the file (corrupt, truncated, more pixels than the limit); unset when
   * the file was simply not analysed (not an image, busy, too slow, a remote file too large to read).
   */
  problem?: string
}

/** {@link analyseImage}, saying what is wrong with a file the decoder refused. */
export async function explainImage(input: string | Buffer, type: string, options: AnalyseOptions): Promise<Analysis> {
  if (!isAnalysed(type) || analysisBusy(options)) return { media: null }
  return analyses
    .of(options.concurrency ?? 2)(async () => {
      // libvips keeps one error buffer for the whole process: a decode that fails while others run may
      // find its message cleared ("Unknown error"). Such a failure is decoded again, up to twice, so that
      // a truncated picture is named as one rather than taken as "not analysed".
      for (let attempt = 1; ; attempt++) {
        try {
          return { media: await analyse(input, type, options) }
        } catch (err) {
          if (attempt >= DECODE_ATTEMPTS || !lostMessage(err)) throw err
        }
      }
    })
    .catch((err: unknown) => {
      if (lostMessage(err)) return { media: null, problem: 'the image could not be decoded (the decoder gave no reason)' }
      const message = err instanceof Error ? err.message : String(err)
      return isProblem(err, message) ? { media: null, problem: message } : { media: null }
    })
}

/** Decodes of one analysis when the decoder's message is lost (see {@link explainImage}). */
const DECODE_ATTEMPTS = 3

/** A sharp failure whose message libvips lost to another thread's decode. */
const lostMessage = (err: unknown): boolean => err instanceof Error && /^\s*unknown error\s*$/i.test(err.message)

/** True when the decoder's error is about the file (not about the moment: a queue, a timeout). */
function isProblem(err: unknown, message: string): boolean {
  if (err instanceof HeicError) return err.code === 'corrupt' || err.code === 'too-many-pixels' || err.code === 'too-large'
  return (
    !/timeout|timed out/i.test(message) &&
    /^(Input|Vips)|pixel limit|unsupported image format|corrupt|premature end|bad seek|truncated/i.test(message)
  )
}

async function analyse(input: string | Buffer, type: string, options: AnalyseOptions): Promise<MediaInfo | null> {
  const seconds = options.timeoutSeconds ?? 10
  if (isHeic(type)) {
    // Decoded in the HEIC worker (upright already); the placeholder is made from its pixels.
    const h = await heicImage(input, { maxInputPixels: options.maxInputPixels, timeoutSeconds: seconds })
    const { data, info } = await h.image
      .resize({ width: PLACEHOLDER_SIDE, height: PLACEHOLDER_SIDE, fit: 'inside' })
      .ensureAlpha()
      .raw()
      .toBuffer({ resolveWithObject: true })
    return mediaOf(h.width, h.height, info, data)
  }
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
  return mediaOf(width, height, info, data)
}

/** The media of a picture of `width`×`height` from its small RGBA resize (null when the hash is too long). */
function mediaOf(width: number, height: number, small: { width: number; height: number }, rgba: Buffer): MediaInfo | null {
  const placeholder = Buffer.from(rgbaToThumbHash(small.width, small.height, rgba)).toString('base64')
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
  return (await explainStored(store, key, type, size, options)).media
}

/** {@link analyseStored}, saying what is wrong with a file the decoder refused ({@link Analysis}). Never throws. */
export async function explainStored(store: Store, key: string, type: string, size: number, options: AnalyseOptions): Promise<Analysis> {
  if (!isAnalysed(type)) return { media: null }
  try {
    const path = store.localPath?.(key)
    if (path) return await explainImage(path, type, options)
    if (size > MAX_REMOTE_BYTES) return { media: null }
    return await explainImage(await readAll(await store.get(key)), type, options)
  } catch {
    return { media: null }
  }
}
