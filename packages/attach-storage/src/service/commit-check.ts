/**
 * The checks of a confirmed save made without changing anything: `checkAttachContainer()` (for hosts
 * whose tables are in another database, before they insert), and the first half of a commit in a host's
 * transaction, which writes nothing unless every entry passes (service/host-transaction.ts).
 */
import { AttachStorageError, badRequest, forbidden, notFound } from '../errors.js'
import type { AttachmentRecord } from '../model.js'
import type { NewRecord } from '../repository/attach-repository.js'
import { parseInput } from '../validation.js'
import { AttachBagSchema, type AttachBagInput } from './bag.js'
import {
  type EntryPlace,
  entryOf,
  type PreparedBag,
  planReuse,
  positiveId,
  prepareBag,
  recordedEarlier,
  refilter,
  SaveFailures,
  sameUploader,
} from './commit.js'
import type { ServiceContext } from './context.js'
import { verifyDirectUpload } from './direct-to-cloud.js'
import { checkRefKey, parseRegularSavedDir, regularSavedDir, SAVED_NAME, storeKey } from './layout.js'
import { readTmpMeta, type TmpMeta, tmpKey, tmpUploadKey } from './temporary.js'
import type { Store } from '../stores/store.js'
import type { AccessContext, AttachBagEntry, AttachContainer, AuthUser, SaveFailure } from './types.js'

/** A temporary file's entry that passed its checks: its place, and its sidecar (verified), or the record it has already. */
export interface TemporaryEntry {
  refCategory: string
  index: number
  entry: AttachBagEntry
  at: EntryPlace
  meta: TmpMeta
  /** The record an earlier save of the same entry made (the retry of a save whose answer was lost). */
  saved?: AttachmentRecord
}

/** A re-sort asked by one or more entries: one per `(category, id)`, the last entry's index wins. */
export interface SortAsk {
  id: number
  refCategory: string
  sort: number
  asked: Array<{ index: number; entry: unknown }>
}

/** The `_deleted` ids of a bag that name records of its reference; the others fail their entry. */
export function deletedIds(bag: PreparedBag, failures: SaveFailures): Set<number> {
  const { refDomain, refKey, deleted, ours } = bag
  const ids = new Set<number>()
  deleted.forEach((d, index) => {
    const id = positiveId(d)
    if (id === undefined) failures.fail('_deleted', index, d, 'id must be a positive integer', 'bad-request')
    else if (!ours.has(id)) failures.fail('_deleted', index, d, `attachment ${id} does not belong to ${refDomain}/${refKey}`, 'not-found')
    else ids.add(id)
  })
  return ids
}

/**
 * The entries of a bag's categories in order. Malformed entries and re-sorts cost no exception and no
 * await (a bag of a thousand stays cheap): the re-sorts are answered, one per `(category, id)`. Each
 * file entry (a temporary file, or a `savedDir` reuse) goes to `onFile` at its place; a throw fails it.
 */
export async function walkEntries(
  bag: PreparedBag,
  failures: SaveFailures,
  place: { date: Date; access: AccessContext },
  onFile: (e: AttachBagEntry, at: EntryPlace, entry: unknown) => Promise<void>,
): Promise<Map<string, SortAsk>> {
  const { refDomain, refKey } = bag
  const sorts = new Map<string, SortAsk>()
  for (const [refCategory, entries] of bag.categories) {
    for (let index = 0; index < entries.length; index++) {
      const entry = entries[index]
      if (!entry || typeof entry !== 'object' || Array.isArray(entry)) {
        failures.fail(refCategory, index, entry, 'entry must be an object', 'bad-request')
        continue
      }
      const e = entry as AttachBagEntry
      if (e.id !== undefined && e.id !== null) {
        const id = Number(e.id)
        if (!Number.isSafeInteger(id) || id <= 0) failures.fail(refCategory, index, entry, 'id must be a positive integer', 'bad-request')
        else {
          const key = `${refCategory}\u0000${id}`
          const known = sorts.get(key)
          if (known) {
            known.sort = index
            known.asked.push({ index, entry })
          } else sorts.set(key, { id, refCategory, sort: index, asked: [{ index, entry }] })
        }
        continue
      }
      try {
        await onFile(e, { refDomain, refKey, refCategory, sort: index, ...place }, entry)
      } catch (err) {
        failures.failWith(refCategory, index, entry, err)
      }
    }
  }
  return sorts
}

/** A save checked entry by entry, nothing written yet. */
export interface BagPlan {
  bag: PreparedBag
  /** The records `_deleted` removes. */
  delIds: number[]
  temporaries: TemporaryEntry[]
  reuses: Array<{ refCategory: string; index: number; entry: unknown; blobId: number; rec: NewRecord }>
  /** The re-sorts, one per `(category, id)` (the last entry's index wins). */
  sorts: Array<{ id: number; refCategory: string; sort: number }>
  failures: SaveFailures
}

/**
 * Checks every entry of a bag as a commit would, in the same order, writing nothing. `dry` (for
 * `checkAttachContainer()`): a direct-to-cloud upload not verified yet must be there, and a temporary
 * file whose earlier save was interrupted counts as committable (a commit resumes it). `transaction`:
 * a direct upload is verified now (its bytes become the temporary file), and an interrupted earlier
 * save is a 409 `conflict` (it belongs to a commit outside the transaction).
 */
export async function planBag(
  ctx: ServiceContext,
  input: { refDomain: string; refKey: string | number | undefined; bag: AttachBagInput },
  options: { access: AccessContext; date?: Date; mode: 'dry' | 'transaction' },
): Promise<BagPlan> {
  const { access, mode } = options
  const bag = await prepareBag(ctx, input, access)
  const { refDomain, refKey, ours } = bag
  const date = options.date ?? ctx.now()
  const failures = new SaveFailures(ctx, `${refDomain}/${refKey}`)

  const delIds = deletedIds(bag, failures)

  const temporaries: TemporaryEntry[] = []
  const reuses: BagPlan['reuses'] = []
  const reuseChecks = new Map()
  const sorts = await walkEntries(bag, failures, { date, access }, async (e, at, entry) => {
    const { refCategory, sort: index } = at
    if (e.savedDir !== undefined && e.savedDir !== null) {
      reuses.push({ refCategory, index, entry, ...(await planReuse(ctx, e, at, reuseChecks)) })
    } else {
      temporaries.push({ refCategory, index, entry: e, at, ...(await checkTemporary(ctx, entry, at, mode)) })
    }
  })
  // A re-sort needs a live record of this reference and category that `_deleted` leaves.
  for (const s of sorts.values()) {
    const r = ours.get(s.id)
    if (r && r.refCategory === s.refCategory && !delIds.has(s.id)) continue
    for (const { index, entry } of s.asked) {
      failures.fail(
        s.refCategory,
        index,
        entry,
        `attachment ${s.id} does not belong to ${refDomain}/${refKey}/${s.refCategory}`,
        'bad-request',
      )
    }
  }
  return {
    bag,
    delIds: [...delIds],
    temporaries,
    reuses,
    sorts: [...sorts.values()].map(({ id, refCategory, sort }) => ({ id, refCategory, sort })),
    failures,
  }
}

/** The checks of an entry that commits a temporary file (those of the commit, in its order), writing nothing in `dry` mode. */
async function checkTemporary(
  ctx: ServiceContext,
  entry: unknown,
  at: EntryPlace,
  mode: 'dry' | 'transaction',
): Promise<{ meta: TmpMeta; saved?: AttachmentRecord }> {
  const e = entryOf(entry)
  if (typeof e.savedName !== 'string' || !SAVED_NAME.test(e.savedName)) {
    throw badRequest('savedName must be the name a temporary upload answered')
  }
  const savedName = e.savedName
  const domain = ctx.registry.domain(at.refDomain)
  const category = ctx.registry.category(at.refDomain, at.refCategory)
  const createdBy = at.access.user?.id ?? null
  const tmp = ctx.stores.tmpStore
  let meta = await readTmpMeta(ctx, savedName, { withFile: false })
  if (!meta) {
    const saved = await recordedEarlier(ctx, savedName, at, createdBy)
    if (saved) return { meta: { name: savedName } as TmpMeta, saved }
    throw notFound(`${savedName} is not in the temporary area (expired, or saved already)`)
  }
  if (meta.refDomain !== at.refDomain) throw badRequest(`${savedName} was uploaded for another domain`)
  if (!sameUploader(meta.createdBy, createdBy)) throw forbidden(`${savedName} was uploaded by another user`)
  if (meta.pending) {
    if (mode === 'transaction') meta = await verifyDirectUpload(ctx, meta, at.access.user)
    else if (!(await ctx.store(meta.pending.store).exists(tmpUploadKey(savedName)))) {
      throw notFound(`Nothing was uploaded for ${savedName} yet`)
    }
  }
  const earlier = await ctx.repo.findBlobsByTmpName(savedName)
  if (earlier.some((b) => b.refCount > 0)) {
    const saved = await recordedEarlier(ctx, savedName, at, meta.createdBy)
    if (!saved) throw badRequest(`${savedName} is saved already`, 'saved-already')
    return { meta, saved }
  }
  // Not verified yet (dry): its bytes are checked by the commit.
  if (meta.pending) return { meta }
  const tmpThere = await tmp.exists(tmpKey(savedName))
  // A pending blob of an interrupted commit outside a transaction: such a commit resumes it (its file
  // may be at its place already); a transaction leaves it to that commit.
  const pending = earlier.filter((b) => b.refCount === 0)
  if (mode === 'transaction' && pending.length) throw busyFor(savedName)
  const resumable = pending.find((p) => {
    const place = parseRegularSavedDir(p.savedDir)
    return p.store === domain.store && place?.refDomain === at.refDomain && place.refKey === at.refKey
  })
  // Where the bytes are: the temporary area, else the place of an interrupted commit (the commit moves
  // another reference's file back first, and resumes this reference's there).
  let source: [Store, string] | undefined = tmpThere ? [tmp, tmpKey(savedName)] : undefined
  for (const p of source ? [] : [...(resumable ? [resumable] : []), ...pending.filter((x) => x !== resumable)]) {
    const store = ctx.stores.stores.get(p.store)
    const key = storeKey(p.savedDir, p.savedName)
    if (store && (await store.exists(key))) {
      source = [store, key]
      break
    }
  }
  if (!source) throw notFound(`${savedName} is not in the temporary area (expired, or saved already)`)
  if (meta.refCategory !== at.refCategory) await refilter(ctx, category, meta, source[0], source[1])
  if (!resumable && at.refKey !== '') {
    const savedDir = regularSavedDir(at.refDomain, at.refKey, at.date, ctx.config.timeZone)
    const existing = await ctx.repo.findBlob(domain.store, savedDir, savedName)
    if (existing && existing.refCount !== 0) throw badRequest(`${savedName} is saved already`, 'saved-already')
    if (existing && mode === 'transaction') throw busyFor(savedName)
  }
  return { meta }
}

const busyFor = (savedName: string) =>
  new AttachStorageError('conflict', `${savedName} is being saved by another request; retry this entry`, { status: 409 })

/** What {@link checkAttachContainer} answers. */
export type AttachCheck =
  | { ok: true }
  | {
      ok: false
      /** The error code the commit would throw: `attach-save-failure` (see `failures`), `forbidden`, `too-many-entries`... */
      code: string
      /** Its HTTP status. */
      status: number
      message: string
      /** How many entries would fail (0 when the whole bag is refused). */
      failureCount: number
      /** The first 100 of them, as the commit's `attach-save-failure` lists them. */
      failures: SaveFailure[]
    }

/** The input of `commitAttachContainer()` (without `trx`). */
export interface AttachCommitInput {
  attachContainer: AttachContainer | null | undefined
  refKey: string | number
  refDomain?: string
  entity?: Record<string, unknown>
  date?: Date | string
  user: AuthUser | null
  request?: Request
}

/**
 * The input of `checkAttachContainer()`: that of `commitAttachContainer()` without `trx`; `refKey` may
 * be omitted for an entity not inserted yet (its domain's `mayChange` is then asked by the commit only,
 * and `_deleted` and re-sort entries fail: no record belongs to it).
 */
export type AttachCheckInput = Omit<AttachCommitInput, 'refKey'> & { refKey?: string | number }

/**
 * Says, changing nothing (no file moved, no row written), whether `commitAttachContainer()` with the
 * same input would succeed now, and why not: the same codes and reasons. A direct-to-cloud upload not
 * verified yet is only looked for (the commit verifies its bytes). It answers for a commit without
 * `trx`; in a transaction the same answers hold, except that a file whose commit outside a transaction
 * was interrupted is a `conflict` there. What others do between the check and the commit can still
 * change the outcome (a concurrent commit of the same file, an expiry).
 */
export async function checkAttachContainer(ctx: ServiceContext, input: AttachCheckInput): Promise<AttachCheck> {
  try {
    if (input.attachContainer === null || input.attachContainer === undefined) return { ok: true }
    const bag = parseInput(AttachBagSchema, input.attachContainer, 'attachContainer')
    const refDomain = input.refDomain ?? bag.refDomain
    if (typeof refDomain !== 'string') throw badRequest('attachContainer.refDomain is required')
    if (input.refKey !== undefined) checkRefKey(input.refKey)
    const date = dateOf(ctx, refDomain, input)
    const plan = await planBag(ctx, { refDomain, refKey: input.refKey, bag }, { access: accessFor(input), date, mode: 'dry' })
    if (!plan.failures.count) return { ok: true }
    const err = plan.failures.error()
    return {
      ok: false,
      code: err.code,
      status: err.status,
      message: err.message,
      failureCount: plan.failures.count,
      failures: plan.failures.failures,
    }
  } catch (err) {
    if (!(err instanceof AttachStorageError) || err.status >= 500) throw err
    return { ok: false, code: err.code, status: err.status, message: err.message, failureCount: 0, failures: [] }
  }
}

/** The access of an in-process call. */
export const accessFor = (input: { user: AuthUser | null; request?: Request }): AccessContext => ({
  user: input.user,
  request: input.request ?? null,
})

/**
 * The date that places a commit's files: an explicit `date` wins, else the entity's date field (the
 * domain's `dateField`), else undefined (now).
 */
export function dateOf(
  ctx: ServiceContext,
  refDomain: string,
  input: { entity?: Record<string, unknown>; date?: Date | string },
): Date | undefined {
  const domain = ctx.registry.domain(refDomain)
  let raw: unknown = input.date ?? input.entity?.[domain.dateField]
  if (raw === '' || raw === null) raw = undefined
  if (raw === undefined) return undefined
  const date = raw instanceof Date ? raw : new Date(raw as string | number)
  if (Number.isNaN(date.getTime())) throw badRequest(`The entity's ${domain.dateField} is not a date-time`)
  return date
}
