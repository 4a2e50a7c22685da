/** A user id as the authentication layer gives it (the JWT `sub`); decimal strings become numbers. */
export type UserId = number | string

/**
 * One attachment record: a stored file bound to a reference (`refDomain`, `refKey`, `refCategory`).
 * Every date-time is ISO-8601 in UTC with a trailing `Z`.
 */
export interface AttachmentRecord {
  id: number
  refDomain: string
  refKey: string
  refCategory: string
  /** Original file name; the name a download is saved under. */
  displayName: string
  /** Generated stored name (`{uuid}.{ext}`); never changes. */
  savedName: string
  /** Stored directory, `/{refDomain}/{yyyy}/{MM}/{refKey}/` (or the direct layout). */
  savedDir: string
  /** Media type, derived from the stored bytes. */
  fileType: string
  /** Size in bytes, counted from the stored bytes. */
  fileSize: number
  /** Free extra information (a description, say). */
  ext: string | null
  /** The meta value that the `fmetaValue` lookup filter matches. */
  fmetaValue: string | null
  /** Zero-based display order within the reference. */
  sort: number
  createdBy: UserId | null
  createdDt: string
  /** Hex sha256 of the stored bytes; the strong ETag of views. */
  sha256: string
  /** Name of the store that holds the file. */
  store: string
  /** The physical file this record points at (several records may share one). */
  blobId: number
  /**
   * The image's focal point, 0..1 from the top left, that cover crops (`fit=cover`) keep inside their box;
   * set through PUT (`null` clears it). Absent when none is set.
   */
  focus?: { x: number; y: number } | null
  /**
   * What the file is, learnt when it was kept: for an image its size as a browser shows it (EXIF
   * orientation applied) and a ThumbHash placeholder; `null` for anything else, or while it is not known
   * (a direct-to-cloud upload, an image sharp cannot read, records older than this column).
   */
  media: MediaInfo | null
}

/**
 * What a file is (`media` of a record): an image's displayed size and ThumbHash placeholder; a video's
 * displayed size and length; an audio file's length; a PDF's page count.
 */
export type MediaInfo = ImageMedia | VideoMedia | AudioMedia | PdfMedia

/** The media of an image record: its displayed size and a ThumbHash placeholder (base64, at most 48 characters). */
export interface ImageMedia {
  width: number
  height: number
  placeholder: string
}

/** The media of a video: its frame as displayed (rotation applied) and its length in milliseconds. */
export interface VideoMedia {
  width: number
  height: number
  durationMs: number
}

/** The media of an audio file: its length in milliseconds. */
export interface AudioMedia {
  durationMs: number
}

/** The media of a PDF: its number of pages. */
export interface PdfMedia {
  pages: number
}

/**
 * Where a PDF's or a video's preview image stands: `pending` (its background job has not made it yet),
 * `made`, `failed` (the file could not be previewed: corrupt, encrypted, beyond a bound), `off` (this
 * server lacks the tool).
 */
export type PreviewState = 'pending' | 'made' | 'failed' | 'off'

/** What the server adds when it answers a record. */
export interface AttachmentView extends Omit<AttachmentRecord, 'sha256' | 'store' | 'blobId'> {
  /**
   * Where a client reads the file: the binary group's view route (signed for a guarded category when
   * signing is configured), or the CDN address when the store has a `cdn-url` and the category no
   * secure-access function.
   */
  url: string
  /** The CDN address, when `url` is one. */
  cdnUrl?: string
  /**
   * The category's named variants made so far, name to address (`?variant=` on the view route by id);
   * present only when the category names variants.
   */
  variants?: Record<string, string>
  /**
   * The boxes of those named variants, name to box, as the category declares them: what a `srcset`
   * needs to know each variant's width (`srcsetOf(record)` of `@attach-storage/client`). Present with
   * `variants`.
   */
  variantBoxes?: Record<string, { w?: number; h?: number; fit?: 'inside' | 'cover'; format?: 'webp' | 'avif' | 'jpeg' | 'png' }>
  /** For a PDF or a video: where its preview image stands (docs/previews.md). */
  preview?: PreviewState
  /**
   * For a PDF or a video whose preview is made: its address (a JPEG, longest side `previews.max-side`).
   * `?w=`/`?h=`/`?format=`/`fit` and named variants on the view route by id are made from it too.
   */
  thumbnailUrl?: string
}

/** One physical stored file, possibly shared by several records (the `savedDir` reuse case). */
export interface BlobRecord {
  id: number
  store: string
  savedDir: string
  savedName: string
  fileSize: number
  fileType: string
  sha256: string
  /** Live records pointing at this file; the file goes when it drops to zero. */
  refCount: number
  createdDt: string
}
