/** The sweep: expired temporary files, files no record uses, variants of deleted records, partial files. */
import type { BlobRecord } from '../model.js'
import type { Store } from '../stores/store.js'
import type { ServiceContext } from './context.js'
import { storeKey } from './layout.js'
import { sweepDirectUploads } from './direct-to-cloud.js'
import { sweepResumable } from './resumable.js'
import { type SweepBounds, type SweepFailure, SweepTally } from './sweep-tally.js'
import { PLACED_SUFFIX, TMP_PREFIX } from './temporary.js'
import { tidyPlacements } from './host-transaction.js'

/**
 * Deletes the variants under a stored directory whose record is gone (`{savedDir}_v/{id}/...`): what a
 * failed delete left behind is found again when the directory's files are swept.
 */
export async function sweepVariants(ctx: ServiceContext, store: Store, savedDir: string): Promise<void> {
  const prefix = `${storeKey(savedDir, '')}_v/`
  const keys: Array<{ key: string; id: number }> = []
  for await (const e of store.list(prefix)) {
    const id = Number(e.key.slice(prefix.length).split('/')[0])
    if (Number.isSafeInteger(id)) keys.push({ key: e.key, id })
  }
  if (!keys.length) return
  const live = new Set((await ctx.repo.findByIds([...new Set(keys.map((k) => k.id))])).map((r) => r.id))
  for (const k of keys) if (!live.has(k.id)) await store.delete(k.key)
}

/** Deletes a blob nobody references (its file and its variants), then purges its row; a failure is left for the sweep. */
export async function dropBlob(ctx: ServiceContext, b: BlobRecord): Promise<void> {
  try {
    const store = ctx.store(b.store)
    await store.delete(storeKey(b.savedDir, b.savedName))
    await sweepVariants(ctx, store, b.savedDir)
    await ctx.repo.purgeBlob(b.id)
  } catch (err) {
    // The records are already invisible; the sweep retries the physical delete.
    ctx.logger.warn(`attach-storage: deleting ${b.savedDir}${b.savedName} failed; the sweep retries`, err)
  }
}

/** What a sweep removed, what it could not, and whether its signal stopped it. */
export interface SweepResult {
  temporaryFiles: number
  resumableUploads: number
  blobs: number
  partialFiles: number
  /** What could not be removed, one entry per kind and store; retried by the next sweep. */
  failures: SweepFailure[]
  /** The signal stopped the sweep before the end. */
  interrupted: boolean
}

/** Dead blob rows read per query. */
const DEAD_PAGE = 100

/** A phase the sweep calls as one (direct and resumable uploads) is waited for this many call timeouts. */
const PHASE_CALLS = 10

/** Deletes a dead blob's file and its variants (each wait bounded), then purges its rows; true when it went. */
async function dropDeadBlob(ctx: ServiceContext, t: SweepTally, b: BlobRecord): Promise<boolean> {
  const store = ctx.store(b.store)
  try {
    await t.call(store.delete(storeKey(b.savedDir, b.savedName)))
    await t.call(sweepVariants(ctx, store, b.savedDir))
  } catch (err) {
    if (!t.stopped) t.fail('files', b.store, err)
    return false
  }
  t.ok(b.store)
  await ctx.repo.purgeBlob(b.id)
  return true
}

/**
 * Removes expired temporary files (older than `tmp-ttl`), unfinished resumable uploads created before
 * that, partial files of interrupted writes older than
 * that, and retries the physical deletion of files whose last record went (or that were never
 * attached: pending blobs of saves nobody retried). Safe to run on several instances at once.
 *
 * Bounded when a store is down: a row it cannot delete is passed (walked by id, counted in
 * `failures`, tried again by the next sweep), each store call is waited for at most
 * `callTimeoutMs` (15 s; a whole phase of direct or resumable uploads 10 times that), a store that failed `maxConsecutiveFailures` (5) calls in a row is left alone
 * for the rest of the sweep, and each kind of failure is logged once. `signal` stops it between calls.
 */
export async function sweep(ctx: ServiceContext, bounds: SweepBounds = {}): Promise<SweepResult> {
  const s = ctx.stores
  const t = new SweepTally(bounds)
  const cutoff = new Date(ctx.now().getTime() - ctx.config.tmpTtl)
  const result: SweepResult = { temporaryFiles: 0, resumableUploads: 0, blobs: 0, partialFiles: 0, failures: [], interrupted: false }
  const done = () => {
    t.log(ctx.logger)
    result.failures = t.failures()
    result.interrupted = t.stopped
    return result
  }
  // What interrupted writes left (a local store's `.partial` files of a crash), in every store that can tell.
  for (const store of new Set([s.tmpStore, ...s.stores.values()])) {
    if (!store.sweepPartials || t.down(store.name) || t.stopped) continue
    try {
      result.partialFiles += await t.call(store.sweepPartials(cutoff))
      t.ok(store.name)
    } catch (err) {
      if (!t.stopped) t.fail('partial-files', store.name, err)
    }
  }
  const tmp = s.tmpStore
  try {
    for await (const e of t.list(tmp.list(TMP_PREFIX))) {
      if (t.stopped || t.down(tmp.name)) break
      if (e.key.endsWith(PLACED_SUFFIX)) {
        // Commits in a host's transaction: the copies of one that rolled back or died, the temporary
        // file of one that committed (service/host-transaction.ts).
        const name = e.key.slice(TMP_PREFIX.length, -PLACED_SUFFIX.length)
        try {
          if ((await t.call(tidyPlacements(ctx, name, { expired: e.lastModified < cutoff }))) === 'committed') result.temporaryFiles++
          t.ok(tmp.name)
        } catch (err) {
          if (!t.stopped) t.fail('temporary-files', tmp.name, err)
        }
        continue
      }
      if (e.lastModified >= cutoff) continue
      try {
        await t.call(tmp.delete(e.key))
        t.ok(tmp.name)
        if (!e.key.endsWith('.meta.json')) result.temporaryFiles++
      } catch (err) {
        if (!t.stopped) t.fail('temporary-files', tmp.name, err)
      }
    }
  } catch (err) {
    if (!t.stopped) t.fail('temporary-files', tmp.name, err)
  }
  if (t.stopped) return done()
  // Unclaimed direct uploads, then unfinished resumable uploads (`_tus/{name}/`) created before the cutoff:
  // each a walk of many calls, waited for at most PHASE_CALLS call timeouts.
  if (!t.down(tmp.name)) {
    try {
      result.temporaryFiles += await t.call(sweepDirectUploads(ctx, cutoff), PHASE_CALLS)
    } catch (err) {
      if (!t.stopped) t.fail('direct-uploads', tmp.name, err)
    }
    try {
      result.resumableUploads = await t.call(sweepResumable(ctx, cutoff), PHASE_CALLS)
    } catch (err) {
      if (!t.stopped) t.fail('resumable-uploads', tmp.name, err)
    }
  }
  // Files no record uses: walked by id, so a row whose file cannot go now is passed, not handed back.
  for (let after = 0; !t.stopped; ) {
    const dead = await ctx.repo.listDeadBlobs(cutoff.toISOString(), DEAD_PAGE, after)
    for (const b of dead) {
      if (t.stopped) break
      if (t.down(b.store)) t.fail('files', b.store)
      else if (await dropDeadBlob(ctx, t, b)) result.blobs++
    }
    if (dead.length < DEAD_PAGE) break
    after = dead[dead.length - 1]!.id
  }
  if (t.stopped) return done()
  // Rows of named variants whose record went while their job ran.
  await ctx.repo.variants.forgetOrphans().catch((err: unknown) => ctx.logger.warn('attach-storage: forgetting variant rows failed', err))
  await ctx.repo.pending.forgetExpired(ctx.now().toISOString()).catch((e: unknown) => ctx.logger.warn('attach-storage: quota rows kept', e))
  return done()
}
