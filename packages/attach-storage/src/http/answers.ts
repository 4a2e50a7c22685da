/**
 * The JSON answers of both groups as valibot schemas: what the OpenAPI document states each route
 * answers, and what the handler tests check every JSON answer against.
 */
import * as v from 'valibot'

/** A user id as answered (`createdBy`): a decimal integer as a number, else the string. */
export const UserIdAnswer = v.union([v.number(), v.string()])

/** A record as answered: the stored metadata and where a client reads the file. */
export const AttachmentViewAnswer = v.object({
  id: v.number(),
  refDomain: v.string(),
  refKey: v.string(),
  refCategory: v.string(),
  displayName: v.string(),
  savedName: v.string(),
  savedDir: v.string(),
  fileType: v.string(),
  fileSize: v.number(),
  ext: v.nullable(v.string()),
  fmetaValue: v.nullable(v.string()),
  sort: v.number(),
  createdBy: v.nullable(UserIdAnswer),
  createdDt: v.string(),
  /**
   * What the file is: an image's size as a browser shows it and its ThumbHash placeholder (base64); a
   * video's frame size and length; an audio file's length; a PDF's pages. Null for anything else or
   * while not known (video, audio and PDFs are analysed in the background).
   */
  media: v.nullable(
    v.union([
      v.object({ width: v.number(), height: v.number(), placeholder: v.pipe(v.string(), v.maxLength(48)) }),
      v.object({ width: v.number(), height: v.number(), durationMs: v.number() }),
      v.object({ durationMs: v.number() }),
      v.object({ pages: v.number() }),
    ]),
  ),
  /** A PDF's or a video's preview: `pending`, `made`, `failed`, or `off` (the server lacks the tool). */
  preview: v.optional(v.picklist(['pending', 'made', 'failed', 'off'])),
  /** The preview image's address (`?preview=1` on the view route by id), once made. */
  thumbnailUrl: v.optional(v.string()),
  /** The binary group's view route (signed when guarded), or the CDN address. */
  url: v.string(),
  /** The CDN address, when `url` is one. */
  cdnUrl: v.optional(v.string()),
  /** The named variants made so far, name to address; present when the category names variants. */
  variants: v.optional(v.record(v.string(), v.string())),
  /** The boxes of those named variants, name to box, as the category declares them (for a `srcset`). */
  variantBoxes: v.optional(
    v.record(
      v.string(),
      v.object({
        w: v.optional(v.number()),
        h: v.optional(v.number()),
        fit: v.optional(v.picklist(['inside', 'cover'])),
        format: v.optional(v.picklist(['webp', 'avif', 'jpeg', 'png'])),
      }),
    ),
  ),
  /** An image's focal point for cover crops (0..1 from the top left); absent or null when none is set. */
  focus: v.optional(v.nullable(v.object({ x: v.number(), y: v.number() }))),
})

/** `{code, message}` of a refused item of an upload. */
const ItemError = v.object({ code: v.string(), message: v.string() })

/** An upload's refused file. */
const RefusedItem = v.object({ displayName: v.string(), size: v.number(), error: ItemError })

/** One file of a temporary upload: its `name` is the `savedName` of the confirmed save. */
export const TemporaryItemAnswer = v.union([
  v.object({
    name: v.string(),
    displayName: v.string(),
    size: v.number(),
    type: v.string(),
    url: v.null(),
    thumbnailUrl: v.null(),
    deleteUrl: v.null(),
    deleteType: v.literal('DELETE'),
  }),
  RefusedItem,
])

/** One file of a direct upload. */
export const DirectItemAnswer = v.union([
  v.object({ name: v.string(), savedDir: v.string(), url: v.string(), displayName: v.string(), size: v.number(), type: v.string() }),
  RefusedItem,
])

/** A temporary upload's answer: the items under `resultKey` (default `files`). */
export const TemporaryUploadAnswer = v.record(v.string(), v.array(TemporaryItemAnswer))

/** A direct upload's answer. */
export const DirectUploadAnswer = v.object({ files: v.array(DirectItemAnswer) })

/** An AttachBag as answered: `refDomain` and each category's records. */
export const AttachBagAnswer = v.objectWithRest({ refDomain: v.string() }, v.array(AttachmentViewAnswer))

/** `{success: true, count}` of PUT and delete. */
export const CountAnswer = v.object({ success: v.literal(true), count: v.number() })

/** `{success: true, attachList}` of the confirmed save. */
export const SavedAnswer = v.object({ success: v.literal(true), attachList: v.array(AttachmentViewAnswer) })

/** GET config. */
export const ConfigAnswer = v.object({
  cdnUrl: v.nullable(v.string()),
  domains: v.record(v.string(), v.object({ store: v.string(), categories: v.array(v.string()) })),
})

/** POST attach/presign. */
export const PresignAnswer = v.object({
  name: v.string(),
  uploadUrl: v.string(),
  method: v.picklist(['PUT', 'POST']),
  headers: v.record(v.string(), v.string()),
  expiresAt: v.string(),
})

/** The CKEditor drag-and-drop answer (CKEditor 5's simple upload adapter reads it too). */
export const EditorDndAnswer = v.union([
  v.object({ uploaded: v.literal(1), fileName: v.string(), url: v.string() }),
  v.object({ uploaded: v.literal(0), error: v.object({ message: v.string() }) }),
])

/** One entry of the `failures` of `attach-save-failure`. */
export const SaveFailureAnswer = v.object({
  refCategory: v.string(),
  index: v.number(),
  displayName: v.string(),
  reason: v.string(),
  code: v.string(),
})

/** Every 4xx and 5xx of both groups: `{code, message}`, plus `failures` on `attach-save-failure`. */
export const ErrorAnswer = v.looseObject({
  code: v.pipe(v.string(), v.regex(/^[a-z][a-z0-9-]*$/)),
  message: v.string(),
  failures: v.optional(v.array(SaveFailureAnswer)),
})
