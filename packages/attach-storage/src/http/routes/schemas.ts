/**
 * Schemas the routes share: bounded primitives, path segments, ids, lookup filters, resize queries.
 * Every array, string and record a route accepts has an upper bound (routes/bounds.test.ts walks every
 * route table and fails on one without): build them from {@link boundedString} and {@link boundedArray}.
 */
import * as v from 'valibot'
import { MAX_DIMENSION } from '../../media/resize.js'

/** A string of at most `max` UTF-16 units. */
export const boundedString = (max: number, message = `must be a string of at most ${max} characters`) =>
  v.pipe(v.string(message), v.maxLength(max, message))

/** An array of at most `max` items of `item` (its length is checked before any item is). */
export const boundedArray = <T extends v.GenericSchema>(item: T, max: number, message = `must be an array of at most ${max} items`) =>
  v.pipe(
    v.custom<unknown[]>((x) => !Array.isArray(x) || x.length <= max, message),
    v.array(item, message),
    v.maxLength(max, message),
  )

/**
 * A value whose schema cannot say its bound because another layer checks it piece by piece (the entries
 * of an AttachBag, each checked alone by the confirmed save); `why` says which layer, and the bounds test
 * accepts the value on that word.
 */
export const checkedLater = <T extends v.GenericSchema>(schema: T, why: string) => v.pipe(schema, v.metadata({ checkedLater: why }))

/** Longest path segment, domain, category or reference key a route takes (a reference key is at most 255). */
export const SEGMENT_MAX = 1024
/** Longest file name a client may send (it is kept cut to 1024 characters, without what names.ts removes). */
export const NAME_MAX = 4096
/** Longest free text a route takes (`ext`, `fmetaValue`, a direct path): kept cut to 1024 characters. */
export const TEXT_MAX = 4096
/** Most records one PUT or POST delete names (each is checked and changed in one transaction). */
export const RECORDS_MAX = 1000

/** A path segment, domain, category or reference key: non-empty, at most {@link SEGMENT_MAX} units. */
export const SegmentSchema = v.pipe(boundedString(SEGMENT_MAX), v.nonEmpty())

/** `view` or `download`: how the binary group answers a file. */
export const ActionSchema = v.picklist(['view', 'download'])

/** A path segment holding an attachment id: 1-15 digits. */
export const IdSegmentSchema = v.pipe(v.string(), v.regex(/^\d{1,15}$/), v.transform(Number))

/** A zero-based index given as a path segment: 1-9 digits. */
export const IndexSegmentSchema = v.pipe(v.string(), v.regex(/^\d{1,9}$/, 'must be a non-negative integer'), v.transform(Number))

/** A positive attachment id in a JSON body. */
export const PositiveIdSchema = v.pipe(
  v.number('must be a positive integer'),
  v.safeInteger('must be a positive integer'),
  v.minValue(1, 'must be a positive integer'),
)

/** A number or a numeric string (older clients send either), as a number. */
export const LooseIntegerSchema = (message: string, min: number) =>
  v.pipe(
    v.union([v.number(), v.pipe(v.string(), v.maxLength(32, message))], message),
    v.transform(Number),
    v.safeInteger(message),
    v.minValue(min, message),
  )

/** A reference key as clients send it: a string, or an integer. */
export const RefKeySchema = v.union(
  [boundedString(SEGMENT_MAX, 'must be a string'), v.pipe(v.number(), v.safeInteger(), v.transform(String))],
  'must be a string',
)

/** `ext`, `extAlt` and `fmetaValue` of a lookup or a view by reference. */
export const LookupQuerySchema = v.object({
  ext: v.optional(boundedString(TEXT_MAX)),
  extAlt: v.optional(boundedString(TEXT_MAX)),
  fmetaValue: v.optional(boundedString(TEXT_MAX)),
})

const dimension = v.optional(
  v.pipe(
    v.string(),
    v.regex(/^\d{1,5}$/, `must be a whole number of pixels from 1 to ${MAX_DIMENSION}`),
    v.transform(Number),
    v.minValue(1, `must be a whole number of pixels from 1 to ${MAX_DIMENSION}`),
    v.maxValue(MAX_DIMENSION, `must be a whole number of pixels from 1 to ${MAX_DIMENSION}`),
  ),
)

/** `w`, `h` and `format` of a view; `format=auto` is negotiated on `Accept` by the route. */
export const ResizeQuerySchema = v.object({
  w: dimension,
  h: dimension,
  format: v.optional(v.picklist(['webp', 'avif', 'jpeg', 'png', 'auto', ''], 'must be one of webp, avif, jpeg, png, auto')),
  /** `cover`: the exact `w`×`h` box (both needed), cropped around the record's focus; `inside` (the default): fit within it. */
  fit: v.optional(v.picklist(['cover', 'inside', ''], 'must be cover or inside')),
  /** How a cover crop without a focus picks its region: `attention` (the default, the busiest region). */
  crop: v.optional(v.picklist(['attention', ''], 'must be attention')),
  /** One of the category's named variants (`thumb`); not with `w`, `h` or `format`. */
  variant: v.optional(v.pipe(v.string(), v.regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/, 'must be a variant name'))),
  /** `1`: a PDF's or a video's preview image itself (a record's `thumbnailUrl`); not with a box or a variant. */
  preview: v.optional(v.picklist(['1', 'true', '0', 'false', ''], 'must be 1 or 0')),
})
