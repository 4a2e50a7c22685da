/** Setting types several schemas share: a duration and a size, each parsed from a number or a string with a unit. */
import * as v from 'valibot'
import { parseDuration, parseSize } from './units.js'

/** A size setting (bytes, or `"8MB"`) of at least `min` bytes, `fallback` when absent. */
export const size = (fallback: string, min: number) =>
  v.optional(
    v.pipe(
      v.union([v.number(), v.string()]),
      v.transform((x) => parseSize(x)),
      v.number('must be a size'),
      v.minValue(min),
    ),
    fallback,
  )

/** A duration setting (`"10m"`, `"24h"`, or seconds), at least 1 s; parsed to milliseconds. */
export const duration = (example: string, fallback: string) =>
  v.optional(
    v.pipe(
      v.union([v.number(), v.string()]),
      v.transform((x) => parseDuration(x)),
      v.number(`must be a duration such as "${example}" or a number of seconds`),
      v.minValue(1000, 'must be at least 1s'),
    ),
    fallback,
  )
