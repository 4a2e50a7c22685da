/**
 * What a page writes about a video, an audio file or a PDF: its length (`1:05`, `1:02:03`) or its page
 * count (`12 pages`), from the record's `media`, and where its preview image stands (`preview`).
 */
import type { ClientError } from './client.js'

/** What {@link mediaLabel} and {@link previewOf} read of a record (an `AttachmentView` will do). */
export interface WithPreview {
  fileType?: string
  media?: { width: number; height: number } | { durationMs: number } | { pages: number } | null
  /** For a PDF or a video: `pending`, `made`, `failed` or `off` (docs/previews.md). */
  preview?: 'pending' | 'made' | 'failed' | 'off'
  /** For a PDF or a video whose preview is made: the preview image's address. */
  thumbnailUrl?: string | null
}

/**
 * A length in milliseconds as a player shows it: `m:ss` under an hour, `h:mm:ss` from an hour on, rounded
 * to the nearest second (a clip shorter than half a second shows `0:01`, not `0:00`). Answers `''` for
 * a negative or non-finite length.
 *
 * @example
 * ```ts
 * import { formatDuration } from '@attach-storage/client'
 *
 * formatDuration(65_000) // '1:05'
 * formatDuration(3_723_000) // '1:02:03'
 * ```
 */
export function formatDuration(ms: number): string {
  if (!Number.isFinite(ms) || ms < 0) return ''
  const total = Math.max(ms > 0 ? 1 : 0, Math.round(ms / 1000))
  const s = total % 60
  const m = Math.floor(total / 60) % 60
  const h = Math.floor(total / 3600)
  const two = (n: number) => String(n).padStart(2, '0')
  return h ? `${h}:${two(m)}:${two(s)}` : `${m}:${two(s)}`
}

/** A page count as `1 page`, `12 pages`, `1,204 pages`; `''` for anything but a positive integer. */
export function formatPages(pages: number): string {
  if (!Number.isInteger(pages) || pages < 1) return ''
  return `${pages.toLocaleString('en-US')} ${pages === 1 ? 'page' : 'pages'}`
}

/**
 * The label of a record's media: a video's or an audio file's length (`1:05`), a PDF's page count
 * (`12 pages`), or `''` while it is not known (analysed in the background after the save) and for
 * anything else (an image's size is not a label).
 */
export function mediaLabel(record: WithPreview | null | undefined): string {
  const media = record?.media
  if (!media) return ''
  if ('durationMs' in media) return formatDuration(media.durationMs)
  if ('pages' in media) return formatPages(media.pages)
  return ''
}

/**
 * Where a PDF's or a video's preview image stands, as a page shows it: `{state: 'made', url}` once it can
 * be shown (the preview's address), `{state: 'pending'}` while the background job has not made it (look
 * the record up again later), `{state: 'none'}` when there will be none (`failed`, `off`) or the file
 * gets none (an image, a text file, a server without previews).
 */
export function previewOf(
  record: WithPreview | null | undefined,
): { state: 'made'; url: string } | { state: 'pending' } | { state: 'none' } {
  if (record?.preview === 'made' && typeof record.thumbnailUrl === 'string' && record.thumbnailUrl) {
    return { state: 'made', url: record.thumbnailUrl }
  }
  if (record?.preview === 'pending') return { state: 'pending' }
  return { state: 'none' }
}

/** The short label of a badge over a video's or PDF's thumbnail: its length (`1:05`), or its pages (`12 p.`). */
export function badgeOf(record: WithPreview): string {
  const media = record.media
  if (!media) return ''
  if ('durationMs' in media) return formatDuration(media.durationMs)
  if ('pages' in media && Number.isInteger(media.pages) && media.pages > 0) return `${media.pages} p.`
  return ''
}

/**
 * A row's error as the row says it: a virus scan's refusal (`infected`, whose server message is
 * `{name} is infected: {signature}`, the name being the row's already) as `Refused: a virus was found
 * ({signature})`; any other error as the server wrote it.
 */
export function rowError(error: ClientError): ClientError {
  if (error.code !== 'infected') return error
  const found = /\bis infected: (.+)$/s.exec(error.message)?.[1]?.trim()
  return { ...error, message: `Refused: a virus was found (${found || error.message})` }
}

/**
 * The kind of file a record is, for an icon: `video`, `audio`, `pdf`, `image` or `file`.
 */
export function fileKind(record: { fileType?: string } | null | undefined): 'video' | 'audio' | 'pdf' | 'image' | 'file' {
  const type = record?.fileType ?? ''
  if (type === 'application/pdf') return 'pdf'
  if (type.startsWith('video/')) return 'video'
  if (type.startsWith('audio/')) return 'audio'
  if (type.startsWith('image/')) return 'image'
  return 'file'
}
