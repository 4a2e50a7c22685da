/** The HTTP headers an Azure blob is stored with: active content goes as a download of a safe type. */
import type { BlobHTTPHeaders } from '@azure/storage-blob'
import { isActiveContent } from 'attach-storage/store-kit'

/** The type a blob of active content is stored and uploaded with: one no browser runs. */
export const SAFE_TYPE = 'application/octet-stream'

/**
 * The HTTP headers a blob of `contentType` is stored with. Active content (HTML, SVG, XML, JavaScript,
 * ...: what the core serves as a download only) is stored as `application/octet-stream` with
 * `Content-Disposition: attachment`, so that its container or CDN address, if anyone reaches it,
 * downloads the file instead of running it on that origin.
 */
export function blobHeaders(contentType: string | undefined): BlobHTTPHeaders {
  if (contentType && isActiveContent(contentType)) return { blobContentType: SAFE_TYPE, blobContentDisposition: 'attachment' }
  return contentType ? { blobContentType: contentType } : {}
}
