/** The confirmed save and `commitAttachContainer()`: entries bound to a reference, crash-safe. */
import { queueNamedVariants } from './variants.js'
import { AttachStorageError, badRequest, forbidden, notFound } from '../errors.js'
import { extensionOf } from '../media/sniff.js'
import type { AttachmentRecord, AttachmentView, BlobRecord } from '../model.js'
import type { NewBlob, NewRecord } from '../repository/attach-repository.js'
import type { RegisteredCategory } from '../registry/registry.js'
import type { Store } from '../stores/store.js'
import { mayChange, mayChangeEntity, mayRead, sameUser } from './access.js'
import type { ServiceContext } from './context.js'
import { checkRefKey, parseRegularSavedDir, regularSavedDir, SAVED_NAME, storeKey } from './layout.js'
import { cleanDisplayName, cleanText } from './names.js'
import { deleteRecords } from './records.js'
import { mediaOf } from './media-kept.js'
import { readHead, readTmpMeta, type TmpMeta, tmpKey, tmpMetaKey } from './temporary.js'
import { parseInput } from '../validation.js'
import { AttachBagSchema, type AttachBagInput, checkEntryCount } from './bag.js'
import { type AccessContext, accessOf, type AttachBagEntry, type SaveFailure } from './types.js'
import { runFilters, transfer } from './uploads.js'
import { readableViews } from './urls.js'
import { verifyDirectUpload } from './direct-to-cloud.js'
import { releaseUploads } from './quota.js'
import { commitBagInTransaction, inTransaction } from './host-transaction.js'
import { type AttachCommitInput, dateOf, deletedIds, walkEntries } from './commit-check.js'
import type { Transaction } from 'kysely'

/** The positive integer `id` of an `{id}` object (a `_deleted` or re-sort entry), else undefined. */
export function positiveId(x: unknown): number | undefined {
  const id = x && typeof x === 'object' ? Number((x as { id?: unknown }).id) : NaN
  return Number.isSafeInteger(id) && id > 0 ? id : undefined
}

/** Most failures an `attach-save-failure` lists (with `failureCount`, all of them): its body stays small. */
export const FAILURES_LISTED = 100

/** Where an entry goes: its reference and category, its index (the `sort`), the placing date, the caller. */
export interface EntryPlace {
  refDomain: string
  refKey: string
  refCategory: string
  sort: number
  date: Date
  access: AccessContext
}

/** A bag read and checked as a whole: its reference, its categories' entries, and the touched records of it. */
export interface PreparedBag {
  refDomain: string
  refKey: string
  categories: Array<[string, unknown[]]>
  deleted: unknown[]
  /** The touched records (by `_deleted` and re-sort entries) of this reference, by id. */
  ours: Map<number, AttachmentRecord>
}

/**
 * The checks of a whole bag, before any entry is read: its size, its domain and categories, the
 * domain's `mayChange`, and `mayChange` on every record it touches (403 `forbidden` throws).
 */
export async function prepareBag(
  ctx: ServiceContext,
  input: { refDomain: string; refKey: string | number | undefined; bag: AttachBagInput },
  access: AccessContext,
): Promise<PreparedBag> {
  checkEntryCount(input.bag, ctx.config.save.maxEntries)
  const domain = ctx.registry.domain(input.refDomain)
  const refDomain = domain.name
  // No key (a check before the entity exists): no record is its own, and its `mayChange` waits for the commit.
  const refKey = input.refKey === undefined ? '' : checkRefKey(input.refKey)
  const b = input.bag
  if (b.refDomain !== undefined && b.refDomain !== refDomain) {
    throw badRequest(`The AttachBag's refDomain "${String(b.refDomain).slice(0, 100)}" differs from "${refDomain}"`)
  }
  const categories: Array<[string, unknown[]]> = []
  for (const [key, value] of Object.entries(b)) {
    if (key === 'refDomain' || key === '_deleted') continue
    ctx.registry.category(refDomain, key)
    categories.push([key, value as unknown[]])
  }
  const deleted = b._deleted ?? []

  // Who may change this entity's attachments at all is the host's call.
  if (refKey !== '' && !(await mayChangeEntity(ctx, domain, refKey, access))) {
    throw forbidden(`You may not change the attachments of ${refDomain}/${refKey}`)
  }
  // One rule for every record the bag touches (deletions and re-sorts), checked before anything changes.
  const touched = new Set<number>()
  for (const x of [...deleted, ...categories.flatMap(([, entries]) => entries)]) {
    const id = positiveId(x)
    if (id !== undefined) touched.add(id)
  }
  /** The touched records of this reference (others are entry failures below and change nothing). */
  const ours = new Map<number, AttachmentRecord>()
  for (const r of touched.size && refKey !== '' ? await ctx.repo.findByIds([...touched]) : []) {
    if (r.refDomain !== refDomain || r.refKey !== refKey) continue
    if (!(await mayChange(ctx, access, r))) throw forbidden(`You may not change attachment ${r.id}`)
    ours.set(r.id, r)
  }
  return { refDomain, refKey, categories, deleted, ours }
}

/** The failures of a save's entries: every one counted, the first {@link FAILURES_LISTED} listed. */
export class SaveFailures {
  readonly failures: SaveFailure[] = []
  count = 0
  constructor(
    readonly ctx: ServiceContext,
    readonly where: string,
  ) {}

  fail(refCategory: string, index: number, entry: unknown, reason: string, code: string): void {
    this.count++
    if (this.failures.length >= FAILURES_LISTED) return
    const name = entry && typeof entry === 'object' ? (entry as AttachBagEntry).displayName : undefined
    this.failures.push({ code, refCategory, index, displayName: typeof name === 'string' ? cleanDisplayName(name, '') : '', reason })
  }

  /** Fails an entry with a thrown error: its code and message when it is a 4xx, else `internal-error` (logged). */
  failWith(refCategory: string, index: number, entry: unknown, err: unknown): void {
    const mine = err instanceof AttachStorageError && err.status < 500
    if (!mine) this.ctx.logger.error(`attach-storage: saving ${this.where}/${refCategory}[${index}] failed`, err)
    this.fail(
      refCategory,
      index,
      entry,
      mine ? err.message : 'the file could not be saved; retry this entry',
      mine ? err.code : 'internal-error',
    )
  }

  /** The 500 `attach-save-failure` of the failures so far. */
  error(): AttachStorageError {
    const listed = this.count > this.failures.length ? `; the first ${this.failures.length} are listed in failures` : ''
    return new AttachStorageError(
      'attach-save-failure',
      `${this.count} of the attachments could not be saved${listed}; resend only the entries listed in failures`,
      { status: 500, details: { success: false, failureCount: this.count, failures: this.failures } },
    )
  }
}

/**
 * Confirmed save of an AttachBag for `(refDomain, refKey)`, files placed by `date` (call time by
 * default). At most `save.maxEntries` entries in all (400 `too-many-entries`, before anything is read).
 * Entries are independent: every failure is collected, the successes stay saved, and a partial failure
 * throws `attach-save-failure` (500) with `failureCount` and the first {@link FAILURES_LISTED}
 * `failures`; resending only those completes the save. Deletions go first (one transaction); each new
 * file is committed crash-safely on its own; the re-sorts and the reuses are then written in one
 * transaction, a few statements whatever their number. Resolves with the reference's records of the
 * bag's categories, in `sort` order. In a host's transaction (`ctx.hostTransaction`) the save is all or
 * nothing instead (service/host-transaction.ts).
 */
export async function commitBag(
  ctx: ServiceContext,
  input: { refDomain: string; refKey: string | number; bag: AttachBagInput },
  options: { access: AccessContext; date?: Date },
): Promise<AttachmentView[]> {
  if (ctx.hostTransaction) return commitBagInTransaction(ctx, input, options)
  const { access } = options
  const user = access.user
  const bag = await prepareBag(ctx, input, access)
  const { refDomain, refKey, categories } = bag

  const date = options.date ?? ctx.now()
  const failed = new SaveFailures(ctx, `${refDomain}/${refKey}`)
  const fail = failed.fail.bind(failed)

  // Deletions first, so that a bag may replace a file in one save.
  const delIds = deletedIds(bag, failed)
  await deleteRecords(ctx, [...delIds])

  const created: AttachmentRecord[] = []
  const reuses: Array<{ refCategory: string; index: number; entry: unknown; blobId: number; rec: NewRecord }> = []
  const reuseChecks = new Map<string, Promise<ReuseSource>>()
  const sorts = await walkEntries(bag, failed, { date, access }, async (e, at, entry) => {
    if (e.savedDir !== undefined && e.savedDir !== null) {
      reuses.push({ refCategory: at.refCategory, index: at.sort, entry, ...(await planReuse(ctx, e, at, reuseChecks)) })
    } else {
      created.push(await commitEntry(ctx, entry, at))
    }
  })
  // The re-sorts and the reuses' records: one transaction.
  const sortList = [...sorts.values()]
  const applied = await ctx.repo.applySave({ refDomain, refKey }, sortList, reuses)
  sortList.forEach((s, i) => {
    if (applied.sorted[i]) return
    for (const { index, entry } of s.asked) {
      fail(s.refCategory, index, entry, `attachment ${s.id} does not belong to ${refDomain}/${refKey}/${s.refCategory}`, 'bad-request')
    }
  })
  reuses.forEach((r, i) => {
    const rec = applied.created[i]
    if (rec) created.push(rec)
    else fail(r.refCategory, r.index, r.entry, `The saved file ${r.rec.displayName} was deleted meanwhile`, 'not-found')
  })

  if (created.length) {
    ctx.events.emit('saved', { refDomain, refKey, records: created, user })
    // Queued before the answer: the retry of a save whose answer was lost queues them again.
    await queueNamedVariants(ctx, created)
  }
  if (failed.count) throw failed.error()
  return bagViews(ctx, refDomain, refKey, categories, access)
}

/** The reference's records of the bag's categories, in `sort` order, as views. */
export async function bagViews(
  ctx: ServiceContext,
  refDomain: string,
  refKey: string,
  categories: Array<[string, unknown[]]>,
  access: AccessContext,
): Promise<AttachmentView[]> {
  const wanted = new Set(categories.map(([c]) => c))
  // Whole categories are left out, so the positions (`idx`) within the others stay as they are.
  const all = (await ctx.repo.listByReference(refDomain, refKey)).filter((r) => wanted.has(r.refCategory))
  // Reading and describing a thousand records are two pieces of work: other requests get a turn between.
  await new Promise((resolve) => setImmediate(resolve))
  return readableViews(ctx, all, access)
}

/** An entry as an object, else a 400 that fails it. */
export function entryOf(entry: unknown): AttachBagEntry {
  if (!entry || typeof entry !== 'object' || Array.isArray(entry)) throw badRequest('entry must be an object')
  return entry as AttachBagEntry
}

/** A saved file found for reuse, with the record that lets the caller see it. */
interface ReuseSource {
  blob: BlobRecord
  holder: AttachmentRecord
}

/**
 * The record a `savedDir` entry (the reuse of a stored file: a new record, no copy) is to make, once the
 * caller may see that file and the target category's filters passed on its bytes. The file's checks are
 * made once per file and category in a save (`checks`), however many entries reuse it.
 */
export async function planReuse(
  ctx: ServiceContext,
  e: AttachBagEntry,
  at: EntryPlace,
  checks: Map<string, Promise<ReuseSource>>,
): Promise<{ blobId: number; rec: NewRecord }> {
  if (typeof e.savedName !== 'string' || !SAVED_NAME.test(e.savedName)) {
    throw badRequest('savedName must be the name a temporary upload answered')
  }
  const savedName = e.savedName
  const source = parseRegularSavedDir(e.savedDir)
  if (!source) throw badRequest('savedDir is not the directory of a saved attachment')
  const savedDir = e.savedDir as string
  const key = `${at.refCategory}\u0000${savedDir}\u0000${savedName}`
  let check = checks.get(key)
  if (!check) {
    check = checkReuse(ctx, { ...source, savedDir, savedName }, at)
    checks.set(key, check)
  }
  const { blob, holder } = await check
  return {
    blobId: blob.id,
    rec: {
      refDomain: at.refDomain,
      refKey: at.refKey,
      refCategory: at.refCategory,
      displayName: cleanDisplayName(e.displayName, holder.displayName),
      ext: cleanText(e.ext),
      fmetaValue: cleanText(e.fmetaValue),
      sort: at.sort,
      createdBy: at.access.user?.id ?? null,
      createdDt: ctx.now().toISOString(),
    },
  }
}

/** The checks of one reused file for one category: it is live, the caller may read it, the category's filters pass. */
async function checkReuse(
  ctx: ServiceContext,
  source: { refDomain: string; refKey: string; savedDir: string; savedName: string },
  at: EntryPlace,
): Promise<ReuseSource> {
  const { savedDir, savedName } = source
  const domain = ctx.registry.domain(at.refDomain)
  const category = ctx.registry.category(at.refDomain, at.refCategory)
  const sourceDomain = ctx.registry.domain(source.refDomain)
  const blob = await ctx.repo.findBlob(sourceDomain.store, savedDir, savedName)
  if (!blob || blob.refCount <= 0) throw notFound(`No saved file ${savedDir}${savedName}`)
  const holders = (await ctx.repo.listByReference(source.refDomain, source.refKey)).filter((r) => r.blobId === blob.id)
  const holder = holders[0]
  if (!holder) throw notFound(`No saved file ${savedDir}${savedName}`)
  if (!(await mayRead(ctx, at.access, holder))) throw forbidden(`The file ${savedName} may not be reused here`)
  if (sourceDomain.store !== domain.store) throw badRequest('savedDir reuse across stores is not possible')
  // The target category's filters run on the stored bytes, as for a temporary file of another category.
  await refilter(
    ctx,
    category,
    { displayName: holder.displayName, size: blob.fileSize, type: blob.fileType, sha256: blob.sha256 },
    ctx.store(blob.store),
    storeKey(blob.savedDir, blob.savedName),
  )
  return { blob, holder }
}

/** Whether two uploaders are the same user (both none counts as the same). */
export const sameUploader = (a: unknown, b: unknown) => ((a ?? null) === null ? (b ?? null) === null : sameUser(a, b))

/** The 409 `conflict` of a temporary file another request is saving. */
export const busyError = (savedName: string) =>
  new AttachStorageError('conflict', `${savedName} is being saved by another request; retry this entry`, { status: 409 })

/** The record an earlier attempt made for this entry: same reference and category, same uploader. */
export async function recordedEarlier(
  ctx: ServiceContext,
  savedName: string,
  at: EntryPlace,
  uploader: unknown,
): Promise<AttachmentRecord | undefined> {
  const live = new Set((await ctx.repo.findBlobsByTmpName(savedName)).filter((b) => b.refCount > 0).map((b) => b.id))
  if (!live.size) return undefined
  const records = await ctx.repo.listByReference(at.refDomain, at.refKey, at.refCategory)
  return records.find((r) => live.has(r.blobId) && sameUploader(r.createdBy, uploader))
}

/**
 * One entry of a confirmed save at its index that commits a temporary file, crash-safely. Resolves with
 * the new record; throws to fail the entry. (Re-sorts and reuses are written together by {@link commitBag}.)
 */
async function commitEntry(ctx: ServiceContext, entry: unknown, at: EntryPlace): Promise<AttachmentRecord> {
  const e = entryOf(entry)
  if (typeof e.savedName !== 'string' || !SAVED_NAME.test(e.savedName)) {
    throw badRequest('savedName must be the name a temporary upload answered')
  }
  const savedName = e.savedName
  const domain = ctx.registry.domain(at.refDomain)
  const category = ctx.registry.category(at.refDomain, at.refCategory)
  const createdDt = ctx.now().toISOString()
  const createdBy = at.access.user?.id ?? null

  // From the temporary area. Each step leaves a state from which the retry of the same request
  // completes the save: the pending blob remembers the temporary name before the file moves, the record
  // is one transaction, and the sidecar goes last (docs/architecture.md, "The confirmed save").
  const tmp = ctx.stores.tmpStore
  const store = ctx.store(domain.store)
  const tmpFile = tmpKey(savedName)
  const recordedBefore = (uploader: unknown) => recordedEarlier(ctx, savedName, at, uploader)
  const busy = () => busyError(savedName)
  const pause = async (step: 'reserved' | 'moved' | 'recorded' | 'done') => {
    await ctx.testPause?.(step, at.access.request)
  }

  let meta = await readTmpMeta(ctx, savedName, { withFile: false })
  if (!meta) {
    // No sidecar: expired, never uploaded, or saved. A save whose answer was lost (a crash after the
    // sidecar went) answers the record it made.
    const saved = await recordedBefore(createdBy)
    if (saved) return saved
    throw notFound(`${savedName} is not in the temporary area (expired, or saved already)`)
  }
  if (meta.refDomain !== at.refDomain) throw badRequest(`${savedName} was uploaded for another domain`)
  // A temporary file belongs to its uploader: nobody else commits it, and its record keeps them as createdBy.
  if (!sameUploader(meta.createdBy, createdBy)) throw forbidden(`${savedName} was uploaded by another user`)
  const uploader = meta.createdBy
  // A direct-to-cloud upload is verified once, here, before it counts as a temporary file.
  if (meta.pending) meta = await verifyDirectUpload(ctx, meta, at.access.user)
  else if (meta.media === undefined) meta = { ...meta, media: await mediaOf(ctx, meta) }

  const earlier = await ctx.repo.findBlobsByTmpName(savedName)
  if (earlier.some((b) => b.refCount > 0)) {
    // Recorded before the sidecar could go: that record is the answer, never a second one.
    const saved = await recordedBefore(uploader)
    if (!saved) throw badRequest(`${savedName} is saved already`, 'saved-already')
    await tmp.delete(tmpMetaKey(savedName)).catch(() => undefined)
    return saved
  }
  // Pending blobs of interrupted attempts: one of this reference is resumed (whatever its month);
  // others are given up, their file going back to the temporary area first.
  let tmpThere = await tmp.exists(tmpFile)
  let blob: BlobRecord | undefined
  let placed = false
  for (const p of earlier) {
    const pStore = ctx.stores.stores.get(p.store)
    const pKey = storeKey(p.savedDir, p.savedName)
    const there = pStore ? await pStore.exists(pKey) : false
    const place = parseRegularSavedDir(p.savedDir)
    if (!blob && p.refCount === 0 && p.store === domain.store && place?.refDomain === at.refDomain && place.refKey === at.refKey) {
      blob = p
      placed = there && !tmpThere
      continue
    }
    if (p.refCount === 0 && !(await ctx.repo.retireBlob(p.id))) throw busy()
    if (there && pStore) {
      if (tmpThere) await pStore.delete(pKey)
      else {
        await transfer(pStore, pKey, tmp, tmpFile, meta.type)
        tmpThere = true
      }
    }
    await ctx.repo.purgeBlob(p.id)
  }
  if (!placed && !tmpThere) throw notFound(`${savedName} is not in the temporary area (expired, or saved already)`)
  const savedDir = blob?.savedDir ?? regularSavedDir(at.refDomain, at.refKey, at.date, ctx.config.timeZone)
  const key = storeKey(savedDir, savedName)
  if (meta.refCategory !== at.refCategory) {
    // The target category's own filters must pass too; a lax category is no way around a strict one.
    const [from, fromKey] = placed ? [store, key] : [tmp, tmpFile]
    await refilter(ctx, category, meta, from, fromKey)
  }
  if (blob) {
    if (!(await ctx.repo.touchPendingBlob(blob.id))) throw busy()
  } else {
    const existing = await ctx.repo.findBlob(domain.store, savedDir, savedName)
    if (existing && existing.refCount !== 0) throw badRequest(`${savedName} is saved already`, 'saved-already')
    if (existing && !(await ctx.repo.touchPendingBlob(existing.id, savedName))) throw busy()
    // The intent is remembered before anything moves: the pending blob names the temporary file. It is
    // written under the file's claim: never while a host's transaction commits that file, nor after one did.
    const newBlob = blobOf(meta, { store: domain.store, savedDir, savedName }, createdDt)
    const reserved =
      existing ??
      (await ctx.repo.whileClaimed(savedName, async (repo) =>
        (await repo.findBlobsByTmpName(savedName)).some((b) => b.refCount > 0) ? undefined : repo.reserveBlob(newBlob),
      ))
    if (reserved === 'busy') throw busy()
    if (!reserved) {
      const saved = await recordedBefore(uploader)
      if (saved) return saved
      throw badRequest(`${savedName} is saved already`, 'saved-already')
    }
    blob = reserved
  }
  await pause('reserved')
  if (!placed) await transfer(tmp, tmpFile, store, key, meta.type)
  await pause('moved')
  // A failure here leaves the file at its place under its pending blob: the retry records it.
  const rec = await ctx.repo.createRecord(blob.id, recordOf(at, e, meta, createdDt), { requireLive: false, requirePending: true })
  if (!rec) {
    // Another attempt recorded it first (its record is the answer), or the blob went meanwhile.
    const saved = await recordedBefore(uploader)
    if (saved) {
      await tmp.delete(tmpMetaKey(savedName)).catch(() => undefined)
      return saved
    }
    if (!(await ctx.repo.findBlobById(blob.id))) {
      // Nothing guards the file at its place any more: back to where the client left it.
      await transfer(store, key, tmp, tmpFile, meta.type).catch((err) =>
        ctx.logger.error(`attach-storage: could not return ${savedName} to the temporary area`, err),
      )
    }
    throw busy()
  }
  await pause('recorded')
  await releaseUploads(ctx, [savedName])
  await tmp.delete(tmpMetaKey(savedName)).catch(() => undefined)
  await pause('done')
  return rec
}

/**
 * Runs a category's own filter chain on a stored file (one moving into the category from another, or
 * reused through `savedDir`); a refusal throws a 400 with the filter's code.
 */
export async function refilter(
  ctx: ServiceContext,
  category: RegisteredCategory,
  file: { displayName: string; size: number; type: string; sha256: string },
  store: Store,
  key: string,
): Promise<void> {
  const error = await runFilters(ctx, category, [], {
    displayName: file.displayName,
    extension: extensionOf(file.displayName),
    size: file.size,
    type: file.type,
    sha256: file.sha256,
    head: await readHead(store, key),
    open: () => store.get(key),
  })
  if (error) throw badRequest(`${error.code}: ${error.message}`, error.code)
}

/**
 * Commits the `attachContainer` of a host entity save, in-process. Files are placed by `date` when
 * given (an explicit date wins), else by the entity's creation date-time (the domain's `dateField`,
 * default `createdDt`), else now; the month is taken in `timeZone`. Errors (a partial failure included) reach the caller.
 *
 * With `trx` (the host's tables in the service's database): every statement runs on the host's
 * transaction, so the entity's row and the records commit or roll back together; the save is then all
 * or nothing (any failure throws, nothing written is kept once the host rolls back), and every
 * temporary file stays committable after a rollback. Prefer `storage.transaction()`, which tidies at
 * once after the commit or the rollback and only then fires the 'saved' event and queues the named
 * variants (with a transaction of your own, the sweep tidies, and variants are made on first view).
 *
 * @example
 * const post = await storage.transaction(async (trx) => {
 *   const post = await trx.insertInto('board').values({...}).returningAll().executeTakeFirstOrThrow()
 *   await storage.commitAttachContainer({ refKey: post.id, attachContainer: body.attachContainer, entity: post, user, trx })
 *   return post
 * })
 */
export async function commitAttachContainer(
  ctx: ServiceContext,
  input: AttachCommitInput & {
    /** The host's Kysely transaction on the service's database: the commit is part of it. */
    trx?: Transaction<any>
  },
): Promise<AttachmentView[]> {
  if (input.attachContainer === null || input.attachContainer === undefined) return []
  const bag = parseInput(AttachBagSchema, input.attachContainer, 'attachContainer')
  const refDomain = input.refDomain ?? bag.refDomain
  if (typeof refDomain !== 'string') throw badRequest('attachContainer.refDomain is required')
  const date = dateOf(ctx, refDomain, input)
  const c = input.trx ? inTransaction(ctx, input.trx) : ctx
  return commitBag(c, { refDomain, refKey: input.refKey, bag }, { access: accessOf(input.user, input.request ?? null), date })
}

/** The blob row of a temporary file placed at `place` (a pending blob until its record is written). */
export function blobOf(meta: TmpMeta, place: { store: string; savedDir: string; savedName: string }, createdDt: string): NewBlob {
  return {
    ...place,
    fileSize: meta.size,
    fileType: meta.type,
    sha256: meta.sha256,
    createdDt,
    tmpName: meta.name,
    media: meta.media ?? null,
  }
}

/** The record an entry committing a temporary file makes: at its place and index, its uploader as createdBy. */
export function recordOf(at: EntryPlace, e: AttachBagEntry, meta: TmpMeta, createdDt: string): NewRecord {
  return {
    refDomain: at.refDomain,
    refKey: at.refKey,
    refCategory: at.refCategory,
    displayName: cleanDisplayName(e.displayName, meta.displayName),
    ext: cleanText(e.ext),
    fmetaValue: cleanText(e.fmetaValue),
    sort: at.sort,
    createdBy: meta.createdBy,
    createdDt,
  }
}
