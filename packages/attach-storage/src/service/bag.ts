/** The shape of an `attachContainer` (`AttachContainer`), checked at the edge and by `commitAttachContainer()`. */
import * as v from 'valibot'
import { AttachStorageError, badRequest } from '../errors.js'
import { isJsonObject } from '../validation.js'

/** The most entries any save may hold, whatever `save.maxEntries` says (its own ceiling). */
export const ENTRIES_CEILING = 100_000
/** The most members of a bag: its categories, `refDomain` and `_deleted`. */
export const BAG_MEMBERS_MAX = 256

/**
 * Checks how many entries a bag holds in all (new files, reuses, re-sorts and `_deleted` together),
 * reading no entry: more than `max` throws 400 `too-many-entries`, more than {@link BAG_MEMBERS_MAX}
 * members 400 `bad-request`. Anything that is no bag is left to the schema.
 */
export function checkEntryCount(bag: unknown, max: number): void {
  if (!isJsonObject(bag)) return
  const keys = Object.keys(bag)
  if (keys.length > BAG_MEMBERS_MAX) throw badRequest(`An AttachBag has at most ${BAG_MEMBERS_MAX} members (categories)`)
  let n = 0
  for (const key of keys) {
    const list = bag[key]
    if (key !== 'refDomain' && Array.isArray(list)) n += list.length
  }
  if (n > max) {
    throw new AttachStorageError(
      'too-many-entries',
      `The save holds ${n} entries; one save holds at most ${max} (new files, reuses, re-sorts and _deleted together)`,
      { status: 400 },
    )
  }
}

/**
 * One entry. The confirmed save checks each alone, so that a bad one fails alone (a `failures` item); the
 * metadata tells the bounds test (http/routes/bounds.test.ts) which layer bounds it.
 */
const entry = v.pipe(
  v.unknown(),
  v.metadata({
    checkedLater:
      'commitEntry checks each entry alone: ids are numbers, savedName and savedDir match bounded patterns, texts are cut to 1024 characters',
  }),
)

/** At most {@link ENTRIES_CEILING} entries (the length is checked before any entry is). */
const entryList = (message: string) =>
  v.pipe(
    v.custom<unknown[]>((x) => !Array.isArray(x) || x.length <= ENTRIES_CEILING, message),
    v.array(entry, message),
    v.maxLength(ENTRIES_CEILING, message),
  )

/**
 * `{refDomain?, _deleted?: [{id}], <category>: entries[]}`: the bag as a whole. Each entry is checked on
 * its own by the confirmed save, so that a bad entry fails alone (a `failures` item), not the whole bag.
 * The entries are counted first, before any is read: past {@link ENTRIES_CEILING} the parse throws 400
 * `too-many-entries` (an error, not a schema issue, so that its code reaches the client); the confirmed
 * save then holds the bag to `save.maxEntries`.
 */
export const AttachBagSchema = v.pipe(
  v.custom<Record<string, unknown>>(isJsonObject, 'must be a JSON object'),
  v.check((bag) => {
    checkEntryCount(bag, ENTRIES_CEILING)
    return true
  }),
  v.maxEntries(BAG_MEMBERS_MAX, `must have at most ${BAG_MEMBERS_MAX} members (categories)`),
  v.objectWithRest(
    {
      refDomain: v.optional(v.pipe(v.string('must be a string'), v.maxLength(1024, 'must be a domain name'))),
      _deleted: v.optional(entryList('must be an array of {id}')),
    },
    entryList('must be an array of file entries'),
  ),
)

/** An `attachContainer` whose shape {@link AttachBagSchema} checked (its entries not yet: each is checked alone). */
export type AttachBagInput = v.InferOutput<typeof AttachBagSchema>
