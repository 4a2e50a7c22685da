/** The shape of an AttachBag (`attachContainer`), checked at the edge and by `commitAttachContainer()`. */
import * as v from 'valibot'
import { isJsonObject } from '../validation.js'

const entries = v.array(v.unknown(), 'must be an array of file entries')

/**
 * `{refDomain?, _deleted?: [{id}], <category>: entries[]}`: the bag as a whole. Each entry is checked on
 * its own by the confirmed save, so that a bad entry fails alone (a `failures` item), not the whole bag.
 */
export const AttachBagSchema = v.pipe(
  v.custom<Record<string, unknown>>(isJsonObject, 'must be a JSON object'),
  v.objectWithRest(
    {
      refDomain: v.optional(v.string('must be a string')),
      _deleted: v.optional(v.array(v.unknown(), 'must be an array of {id}')),
    },
    entries,
  ),
)

/** A bag whose shape {@link AttachBagSchema} checked. */
export type AttachBagInput = v.InferOutput<typeof AttachBagSchema>
