/** The `previews` settings (docs/previews.md, docs/configuration.md). */
import * as v from 'valibot'
import { duration, size } from './setting-types.js'

/**
 * Previews of PDFs (their first page) and videos (a frame), and the analysis of video, audio and PDFs
 * into `media`, made in the background on the named-variant queue. A kind whose tools are missing is
 * off (one warning at start, a line in `/readyz`).
 */
export const PreviewsSchema = v.object({
  /** Makes previews and analyses media at all. @default true */
  enabled: v.optional(v.boolean(), true),
  /** `pdftoppm` (poppler-utils); found on PATH when not set. */
  pdftoppm: v.optional(v.string()),
  /** `pdfinfo` (poppler-utils); found on PATH when not set. */
  pdfinfo: v.optional(v.string()),
  /** `ffmpeg`; found on PATH when not set. */
  ffmpeg: v.optional(v.string()),
  /** `ffprobe`; found on PATH when not set. */
  ffprobe: v.optional(v.string()),
  /** Longest side of a preview image, in pixels. @default 1024 */
  maxSide: v.optional(v.pipe(v.number(), v.integer(), v.minValue(64), v.maxValue(4096)), 1024),
  /** A PDF with more pages is not previewed (`too-many-pages`). @default 10000 */
  maxPages: v.optional(v.pipe(v.number(), v.integer(), v.minValue(1)), 10_000),
  /** A longer video or audio file is not previewed nor analysed (`too-long`; `"2h"`, or seconds). @default '24h' */
  maxDuration: duration('24h', '24h'),
  /** Time one tool run may take before it is killed (`timeout`; `"60s"`, or seconds). @default '60s' */
  timeout: duration('60s', '60s'),
  /**
   * Memory (address space) one tool process may take, at least 384 MB (ffmpeg needs about 300 MB to load);
   * beyond it the tool fails (bytes, or `"1GB"`). @default '1GB'
   */
  memory: size('1GB', 384 * 1024 * 1024),
  /**
   * Largest PDF copied to a temporary file to be rendered from a store without local files (bytes, or
   * `"256MB"`); a larger one is not previewed. Videos are read in place through ranges. @default '256MB'
   */
  maxPdfBytes: size('256MB', 1),
})
