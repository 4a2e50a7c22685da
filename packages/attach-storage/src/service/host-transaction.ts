/**
 * A commit in the host's transaction (`commitAttachContainer({trx})`, `storage.transaction()`): the
 * entity's row and the attachment records commit or roll back together.
 *
 * Every statement runs on the host's transaction; the files cannot, so a rollback must leave each
 * temporary file committable again. The commit therefore COPIES a temporary file to its place (it
 * does not move it), after remembering that place beside it (`_tmp/{name}.placed.json`, outside the
 * transaction), and keeps the temporary file and its sidecar. After the commit they are deleted; after
 * a rollback (or a crash) the copies that no blob row holds are deleted: by `storage.transaction()` at
 * once, else by the retry (which writes the same place again) and by the sweep (service/housekeeping.ts).
 * No stored file is deleted inside the transaction (a `_deleted` record's file goes after the commit),
 * and the 'saved' event and the named variants wait for the commit: no worker looks for a record that
 * may never exist.
 */
import { link, rename, unlink } from 'node:fs/promises'
import { dirname } from 'node:path'
import type { Kysely, Transaction } from 'kysely'
import { AttachStorageError, badRequest, notFound } from '../errors.js'
import type { AttachmentRecord, AttachmentView, BlobRecord } from '../model.js'
import { errnoOf, isFile, mkdirDurable, syncDir, tempPathFor } from '../stores/local-fs.js'
import { LocalStore } from '../stores/local-store.js'
import type { Store } from '../stores/store.js'
import type { AttachBagInput } from './bag.js'
import { type BagPlan, planBag, type TemporaryEntry } from './commit-check.js'
import { bagViews, blobOf, busyError, recordedEarlier, recordOf } from './commit.js'
import type { ServiceContext } from './context.js'
import { dropBlob } from './housekeeping.js'
import { regularSavedDir, storeKey } from './layout.js'
import { dropVariants } from './records.js'
import { mediaOf } from './media-kept.js'
import { readPlacements, rememberPlacement, tmpKey, tmpMetaKey, tmpPlacedKey } from './temporary.js'
import type { AccessContext, AuthUser } from './types.js'
import { queueNamedVariants } from './variants.js'

/** What waits for the end of a host's transaction: tidying after a commit or a rollback, events, variant jobs. */
interface TransactionWork {
  /** Temporary files committed in it (their files, sidecars and placements go after the commit). */
  committed: Set<string>
  /** Temporary files copied to a place in it (copies no row holds go after a rollback). */
  placed: Set<string>
  saved: Array<{ refDomain: string; refKey: string; records: AttachmentRecord[]; user: AuthUser | null }>
  orphanBlobs: BlobRecord[]
  deleted: AttachmentRecord[]
}

const works = new WeakMap<Transaction<any>, TransactionWork>()

function workOf(trx: Transaction<any>): TransactionWork {
  let w = works.get(trx)
  if (!w) {
    w = { committed: new Set(), placed: new Set(), saved: [], orphanBlobs: [], deleted: [] }
    works.set(trx, w)
  }
  return w
}

/** The context of a commit in the host's transaction `trx`: every statement on it. */
export function inTransaction(ctx: ServiceContext, trx: Transaction<any>): ServiceContext {
  if (!trx || typeof trx !== 'object' || (trx as { isTransaction?: unknown }).isTransaction !== true) {
    throw new TypeError('commitAttachContainer(): trx must be a Kysely Transaction (from db.transaction().execute)')
  }
  return { ...ctx, repo: ctx.repo.within(trx), hostTransaction: trx }
}

/** An entry that failed after writing began: the transaction must roll back, so the save fails as a whole. */
function failedEntry(plan: BagPlan, at: { refCategory: string; index: number; entry: unknown }, err: unknown) {
  plan.failures.failWith(at.refCategory, at.index, at.entry, err)
  return plan.failures.error()
}

/**
 * A confirmed save in the host's transaction (`ctx.hostTransaction`), all or nothing: every entry is
 * checked first, writing nothing (any failure throws `attach-save-failure` listing them all); then the
 * writes, stopping at the first error (on PostgreSQL a failed statement aborts the transaction, so none
 * is issued after it). The host's transaction then commits or rolls back everything.
 */
export async function commitBagInTransaction(
  ctx: ServiceContext,
  input: { refDomain: string; refKey: string | number; bag: AttachBagInput },
  options: { access: AccessContext; date?: Date },
): Promise<AttachmentView[]> {
  const trx = ctx.hostTransaction as Transaction<any>
  const plan = await planBag(ctx, input, { ...options, mode: 'transaction' })
  if (plan.failures.count) throw plan.failures.error()
  const { refDomain, refKey, categories } = plan.bag
  const work = workOf(trx)

  if (plan.delIds.length) {
    const { deleted, orphanBlobs } = await ctx.repo.markDeleted(plan.delIds)
    // Their files go after the commit (a rollback brings the records back).
    work.deleted.push(...deleted)
    work.orphanBlobs.push(...orphanBlobs)
  }
  const created: AttachmentRecord[] = []
  for (const t of plan.temporaries) {
    try {
      const rec = t.saved ?? (await commitTemporary(ctx, t, work))
      if (!t.saved) created.push(rec)
    } catch (err) {
      throw failedEntry(plan, t, err)
    }
  }
  const applied = await ctx.repo.applySave({ refDomain, refKey }, plan.sorts, plan.reuses)
  plan.sorts.forEach((s, i) => {
    if (!applied.sorted[i]) {
      const err = badRequest(`attachment ${s.id} does not belong to ${refDomain}/${refKey}/${s.refCategory}`)
      throw failedEntry(plan, { refCategory: s.refCategory, index: s.sort, entry: undefined }, err)
    }
  })
  plan.reuses.forEach((r, i) => {
    const rec = applied.created[i]
    if (!rec) throw failedEntry(plan, r, notFound(`The saved file ${r.rec.displayName} was deleted meanwhile`))
    created.push(rec)
  })
  if (created.length) work.saved.push({ refDomain, refKey, records: created, user: options.access.user })
  return bagViews(ctx, refDomain, refKey, categories, options.access)
}

/** Copies a file between stores (a copy within one store), never moving it. */
async function copyFile(from: Store, fromKey: string, to: Store, toKey: string, contentType: string): Promise<void> {
  if (from === to) return to.copy(fromKey, toKey)
  if (await linkAcross(from, fromKey, to, toKey)) return
  const { size } = await from.stat(fromKey)
  await to.put(toKey, await from.get(fromKey), { contentType, size })
}

/**
 * Between two local stores on one file system: a hard link, the same bytes under a second name at no
 * cost whatever their size (stored files are never changed in place; each name is deleted on its own).
 * Staged under a partial name and renamed over a dead copy of an earlier attempt, then the directory
 * fsynced: durable once it resolves. False when it cannot be (another file system, no hard links):
 * the caller copies.
 */
async function linkAcross(from: Store, fromKey: string, to: Store, toKey: string): Promise<boolean> {
  if (!from.localPath || !to.localPath || from.type !== 'local' || to.type !== 'local') return false
  const src = from.localPath(fromKey)
  const dst = to.localPath(toKey)
  const staged = tempPathFor(dst)
  try {
    await mkdirDurable(dirname(dst))
    await link(src, staged)
    await rename(staged, dst)
    await syncDir(dirname(dst))
    return true
  } catch (err) {
    if (errnoOf(err) === 'ENOENT' && !(await isFile(src))) throw notFound(`${fromKey} is not in the temporary area`)
    return false
  } finally {
    // A rename onto a name of the same file does nothing: the staged name goes here either way.
    await unlink(staged).catch(() => undefined)
    if (to instanceof LocalStore) to.forgetKey(toKey)
  }
}

/**
 * One temporary file committed in the host's transaction: claimed (a second transaction committing it
 * meanwhile gets a 409 `conflict`), its place remembered, the file copied there, the blob written live
 * with its record, the quota row released; the temporary file stays until the commit.
 */
async function commitTemporary(ctx: ServiceContext, t: TemporaryEntry, work: TransactionWork): Promise<AttachmentRecord> {
  const { at, meta, entry: e } = t
  const savedName = meta.name
  const domain = ctx.registry.domain(at.refDomain)
  const tmp = ctx.stores.tmpStore
  const store = ctx.store(domain.store)
  if ((await ctx.repo.claimTmpName(savedName)) === 'busy') throw busyError(savedName)
  // Read again under the claim: a transaction that committed it since the check has made it saved.
  const earlier = await ctx.repo.findBlobsByTmpName(savedName)
  if (earlier.some((b) => b.refCount > 0)) {
    const saved = await recordedEarlier(ctx, savedName, at, meta.createdBy)
    if (saved) return saved
    throw badRequest(`${savedName} is saved already`, 'saved-already')
  }
  if (earlier.length) throw busyError(savedName)
  const savedDir = regularSavedDir(at.refDomain, at.refKey, at.date, ctx.config.timeZone)
  const key = storeKey(savedDir, savedName)
  if (await ctx.repo.findBlob(domain.store, savedDir, savedName)) throw busyError(savedName)
  // Where the copy goes is known before it is made: a rollback's or a crash's copy is found again.
  await rememberPlacement(ctx, savedName, { store: domain.store, savedDir, savedName })
  work.placed.add(savedName)
  await ctx.testPause?.('reserved', at.access.request)
  try {
    await copyFile(tmp, tmpKey(savedName), store, key, meta.type)
  } catch (err) {
    if (err instanceof AttachStorageError && err.code === 'not-found') {
      throw notFound(`${savedName} is not in the temporary area (expired, or saved already)`)
    }
    throw err
  }
  await ctx.testPause?.('moved', at.access.request)
  const createdDt = ctx.now().toISOString()
  const known = meta.media === undefined && !meta.pending ? { ...meta, media: await mediaOf(ctx, meta) } : meta
  const blob = await ctx.repo.reserveBlob(blobOf(known, { store: domain.store, savedDir, savedName }, createdDt))
  const rec = await ctx.repo.createRecord(blob.id, recordOf(at, e, meta, createdDt), { requireLive: false, requirePending: true })
  if (!rec) throw busyError(savedName)
  // The quota row goes with the commit (a rollback keeps the upload counted, as it stays).
  await ctx.repo.pending.release([savedName])
  work.committed.add(savedName)
  await ctx.testPause?.('recorded', at.access.request)
  return rec
}

/**
 * Tidies what commits in host transactions left of a temporary file, under its claim (nothing while a
 * transaction commits it, nor before it is committed or expired when it has no quota row to claim):
 * the copies no blob row holds (a rollback's, a crash's, an earlier month's);
 * once it is committed (a live blob names it), the temporary file and its sidecar; and the record of
 * placements once committed or `expired`. Answers `committed`, `kept` or `busy`.
 */
export async function tidyPlacements(
  ctx: ServiceContext,
  savedName: string,
  options: { expired?: boolean } = {},
): Promise<'committed' | 'kept' | 'busy'> {
  const tmp = ctx.stores.tmpStore
  return ctx.repo.whileClaimed(savedName, async (repo, claim) => {
    const committed = (await repo.findBlobsByTmpName(savedName)).some((b) => b.refCount > 0)
    // Without a row to hold, a transaction still running cannot be told apart: its copies wait for the
    // file to be committed or to expire.
    if (claim === 'none' && !committed && !options.expired) return 'kept'
    for (const p of await readPlacements(ctx, savedName)) {
      if (await repo.findBlob(p.store, p.savedDir, p.savedName)) continue
      const store = ctx.stores.stores.get(p.store)
      await store?.delete(storeKey(p.savedDir, p.savedName))
    }
    if (committed) await Promise.all([tmp.delete(tmpKey(savedName)), tmp.delete(tmpMetaKey(savedName))])
    if (committed || options.expired) await tmp.delete(tmpPlacedKey(savedName))
    return committed ? 'committed' : 'kept'
  })
}

/** After the host's transaction committed: the temporary files go, the dead files go, then the events and the variant jobs. */
export async function afterCommit(ctx: ServiceContext, trx: Transaction<any>): Promise<void> {
  const work = works.get(trx)
  if (!work) return
  works.delete(trx)
  for (const name of work.placed) {
    await tidyPlacements(ctx, name).catch((err: unknown) =>
      ctx.logger.warn(`attach-storage: tidying the temporary file ${name} failed; the sweep retries`, err),
    )
  }
  await Promise.all([...work.orphanBlobs.map((b) => dropBlob(ctx, b)), ...work.deleted.map((r) => dropVariants(ctx, r))])
  if (work.deleted.length) ctx.events.emit('deleted', { records: work.deleted })
  for (const s of work.saved) {
    ctx.events.emit('saved', s)
    await queueNamedVariants(ctx, s.records)
  }
}

/** After the host's transaction rolled back: the copies it placed go (the temporary files stay, committable). */
export async function afterRollback(ctx: ServiceContext, trx: Transaction<any>): Promise<void> {
  const work = works.get(trx)
  if (!work) return
  works.delete(trx)
  for (const name of work.placed) {
    await tidyPlacements(ctx, name).catch((err: unknown) =>
      ctx.logger.warn(`attach-storage: removing the copies of ${name} failed; the sweep retries`, err),
    )
  }
}

/**
 * Runs `fn` in a transaction of the service's database (MySQL at READ COMMITTED), for the host's own
 * statements and `commitAttachContainer({..., trx})`; after the commit, the committed temporary files
 * and the files of deleted records are removed and the 'saved' events and variant jobs follow; after a
 * rollback the copies no row holds are removed. Resolves with `fn`'s result; rejects with its error.
 */
export async function runTransaction<T>(ctx: ServiceContext, fn: (trx: Transaction<any>) => Promise<T>): Promise<T> {
  const db: Kysely<any> = ctx.repo.db
  const builder = db.transaction()
  let current: Transaction<any> | undefined
  let result: T
  try {
    result = await (ctx.repo.dialect === 'mysql' ? builder.setIsolationLevel('read committed') : builder).execute((trx) => {
      current = trx
      return fn(trx)
    })
  } catch (err) {
    if (current) await afterRollback(ctx, current)
    throw err
  }
  if (current) await afterCommit(ctx, current)
  return result
}
