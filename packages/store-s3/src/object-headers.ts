/** The headers an S3 object is stored with: active content goes as a download of a safe type. */
import { isActiveContent } from 'attach-storage/store-kit'

/** The type an object of active content is stored and uploaded with: one no browser runs. */
export const SAFE_TYPE = 'application/octet-stream'

/**
 * The headers an object of `contentType` is stored with. Active content (HTML, SVG, XML, JavaScript,
 * ...: what the core serves as a download only) is stored as `application/octet-stream` with
 * `Content-Disposition: attachment`, so that its bucket or CDN address, if anyone reaches it, downloads
 * the file instead of running it on that origin.
 */
export function objectHeaders(contentType: string | undefined): { ContentType?: string; ContentDisposition?: string } {
  if (contentType && isActiveContent(contentType)) return { ContentType: SAFE_TYPE, ContentDisposition: 'attachment' }
  return contentType ? { ContentType: contentType } : {}
}
