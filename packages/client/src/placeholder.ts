/**
 * The picture shown while an image record loads: its ThumbHash `placeholder` (server side:
 * media/analyse.ts) decoded into a tiny PNG `data:` URL, for an `<img>`'s `src` or a CSS background.
 */
import { thumbHashToDataURL } from 'thumbhash'

/** What {@link placeholderDataUrl} reads of a record: its `media` (an `AttachmentView` will do). */
export interface WithMedia {
  /** The record's media: only an image's carries a placeholder. */
  media?: { placeholder?: string } | { durationMs: number } | { pages: number } | null
}

/**
 * A record's placeholder as a `data:image/png;base64,...` URL (about 32 pixels on its longer side, the
 * record's aspect ratio, blurred by nature), or undefined when the record has none (not an image, not
 * analysed yet) or it cannot be decoded.
 *
 * @example
 * ```ts
 * import { placeholderDataUrl } from '@attach-storage/client'
 * import type { AttachmentView } from 'attach-storage'
 *
 * function imageTag(record: AttachmentView): string {
 *   const placeholder = placeholderDataUrl(record)
 *   return `<img src="${record.url}"${placeholder ? ` style="background:url(${placeholder}) center/cover"` : ''}>`
 * }
 * ```
 */
export function placeholderDataUrl(record: WithMedia | null | undefined): string | undefined {
  const media = record?.media
  const hash = media && 'placeholder' in media ? media.placeholder : undefined
  if (typeof hash !== 'string' || hash.length < 5 || hash.length > 48) return undefined
  try {
    const bytes = Uint8Array.from(atob(hash), (c) => c.charCodeAt(0))
    return thumbHashToDataURL(bytes)
  } catch {
    return undefined
  }
}
