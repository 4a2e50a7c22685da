/** Schemas the routes share: path segments, ids, lookup filters, resize queries. */
import * as v from 'valibot'
import { MAX_DIMENSION } from '../../media/resize.js'

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
  v.pipe(v.union([v.number(), v.string()], message), v.transform(Number), v.safeInteger(message), v.minValue(min, message))

/** A reference key as clients send it: a string, or an integer. */
export const RefKeySchema = v.union([v.string(), v.pipe(v.number(), v.safeInteger(), v.transform(String))], 'must be a string')

/** `ext`, `extAlt` and `fmetaValue` of a lookup or a view by reference. */
export const LookupQuerySchema = v.object({
  ext: v.optional(v.string()),
  extAlt: v.optional(v.string()),
  fmetaValue: v.optional(v.string()),
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
  /** One of the category's named variants (`thumb`); not with `w`, `h` or `format`. */
  variant: v.optional(v.pipe(v.string(), v.regex(/^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$/, 'must be a variant name'))),
})
