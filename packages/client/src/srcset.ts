/**
 * Responsive images: an `<img srcset>` from a record's named variants (docs/variants.md) and its own
 * address, so a browser picks the smallest file that fills the space it gives the picture.
 */

/**
 * A named variant's box as the category declares it (`variants` of a category, docs/variants.md): the
 * same object as the configuration's, so a page can pass its category's `variants` as they are.
 */
export interface VariantBox {
  w?: number
  h?: number
  fit?: 'inside' | 'cover'
  format?: string
}

/** What {@link srcsetOf} reads of a record (an `AttachmentView` will do). */
export interface WithVariants {
  url: string
  fileType?: string
  /** The record's media: an image's (or a video's) carries its displayed size. */
  media?: { width: number; height: number } | { durationMs: number } | { pages: number } | null
  /** The named variants made so far, name to address, as lookups answer them. */
  variants?: Record<string, string>
  /** Their boxes, name to box, as lookups answer them (what {@link srcsetOf} reads without `boxes`). */
  variantBoxes?: Record<string, VariantBox>
}

/** Options of {@link srcsetOf}. */
export interface SrcsetOptions {
  /**
   * The boxes of the record's category's named variants, name to box. Lookups answer them with each
   * record (`variantBoxes`), which is what is read without this option; give it for records that lack
   * them (saved by an older server, or built by hand).
   */
  boxes?: Record<string, VariantBox>
  /** Leave the record's own `url` out of the candidates (default: it is the widest when `media` is known). */
  withoutOriginal?: boolean
}

/**
 * A `srcset` for a record's picture: `"{address} {width}w"` candidates, narrowest first, from the named
 * variants the record lists as made (`record.variants`) whose box it gives (`record.variantBoxes`, or
 * `options.boxes`), and the record's own `url` at its `media.width` (its displayed size), the widest.
 *
 * Each width is the one the server makes: a box `fit: 'inside'` (the default) scales the picture into it,
 * never larger than the picture, so a variant as wide as the picture or wider (served as the original) is
 * left out. Without `media` (not analysed) only width-only boxes (`{ w }`) count, at `w`. A cover variant
 * (`fit: 'cover'`) is a crop with an aspect of its own, and every candidate of a srcset must show the same
 * picture: it counts only when its box has the picture's aspect (within 1 %). Commas and spaces in
 * addresses are percent-encoded (they separate candidates).
 *
 * Answers `''` for a record whose `fileType` is not a raster image (not `image/*`, or SVG), or when no
 * candidate is left; use it with a `sizes` attribute, and `record.url` as the `src`. The candidates are
 * in the variants' formats: declare formats every browser you serve shows (JPEG, PNG, WebP).
 *
 * @example
 * ```ts
 * import { srcsetOf } from '@attach-storage/client'
 * import type { AttachmentView } from 'attach-storage'
 *
 * // A record as a lookup answers it: its made variants and their boxes come with it.
 * function imageTag(record: AttachmentView): string {
 *   return `<img src="${record.url}" srcset="${srcsetOf(record)}" sizes="(max-width: 600px) 100vw, 600px">`
 * }
 * ```
 */
export function srcsetOf(record: WithVariants | null | undefined, options: SrcsetOptions = {}): string {
  if (!record || (record.fileType !== undefined && (!record.fileType.startsWith('image/') || record.fileType.startsWith('image/svg')))) {
    return ''
  }
  const media = record.media && 'width' in record.media ? record.media : undefined
  const full = media && media.width > 0 && media.height > 0 ? media : undefined
  const candidates: { url: string; width: number }[] = []
  for (const [name, url] of Object.entries(record.variants ?? {})) {
    const box = (options.boxes ?? record.variantBoxes)?.[name]
    const width = box && typeof url === 'string' ? variantWidth(box, full) : undefined
    if (width !== undefined) candidates.push({ url, width })
  }
  if (full && !options.withoutOriginal && record.url) candidates.push({ url: record.url, width: full.width })
  candidates.sort((a, b) => a.width - b.width)
  const seen = new Set<number>()
  const out: string[] = []
  for (const c of candidates) {
    if (seen.has(c.width)) continue // one file per width: the first (a variant before the original)
    seen.add(c.width)
    out.push(`${c.url.replace(/,/g, '%2C').replace(/\s/g, (s) => encodeURIComponent(s))} ${c.width}w`)
  }
  return out.join(', ')
}

/** The width of the file a box makes of a picture of `media`'s size, or undefined when it is no candidate. */
function variantWidth(box: VariantBox, media: { width: number; height: number } | undefined): number | undefined {
  const w = positive(box.w)
  const h = positive(box.h)
  if (w === undefined && h === undefined) return undefined
  if (box.fit === 'cover') {
    if (w === undefined || h === undefined || !media) return undefined
    if (Math.abs(w / h / (media.width / media.height) - 1) > 0.01) return undefined
    return w < media.width ? w : undefined
  }
  if (!media) return h === undefined ? w : undefined
  const scale = Math.min(w !== undefined ? w / media.width : 1, h !== undefined ? h / media.height : 1)
  if (scale >= 1) return undefined // the picture fits the box: the variant is the original
  return Math.max(1, Math.round(media.width * scale))
}

const positive = (n: unknown): number | undefined => (typeof n === 'number' && Number.isFinite(n) && n > 0 ? n : undefined)
