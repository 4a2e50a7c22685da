/** The sweep: expired temporary files, files no record uses, variants of deleted records, partial files. */
import type { BlobRecord } from '../model.js'
import type { Store } from '../stores/store.js'
import type { ServiceContext } from './context.js'
import { storeKey } from './layout.js'
import { sweepDirectUploads } from './direct-to-cloud.js'
import { sweepResumable } from './resumable.js'
import { TMP_PREFIX } from './temporary.js'

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

/**
 * Removes expired temporary files (older than `tmp-ttl`), unfinished resumable uploads created before
 * that, partial files of interrupted writes older than
 * that, and retries the physical deletion of files whose last record went (or that were never
 * attached: pending blobs of saves nobody retried). Safe to run on several instances at once.
 */
export async function sweep(
  ctx: ServiceContext,
): Promise<{ temporaryFiles: number; resumableUploads: number; blobs: number; partialFiles: number }> {
  const s = ctx.stores
  const cutoff = new Date(ctx.now().getTime() - ctx.config.tmpTtl)
  // What interrupted writes left (a local store's `.partial` files of a crash), in every store that can tell.
  let partialFiles = 0
  for (const store of new Set([s.tmpStore, ...s.stores.values()])) {
    if (!store.sweepPartials) continue
    partialFiles += await store.sweepPartials(cutoff).catch((err: unknown) => {
      ctx.logger.warn(`attach-storage: removing partial files of store "${store.name}" failed`, err)
      return 0
    })
  }
  let temporaryFiles = 0
  for await (const e of s.tmpStore.list(TMP_PREFIX)) {
    if (e.lastModified < cutoff) {
      await s.tmpStore.delete(e.key)
      if (!e.key.endsWith('.meta.json')) temporaryFiles++
    }
  }
  temporaryFiles += await sweepDirectUploads(ctx, cutoff)
  // Unfinished resumable uploads (`_tus/{name}/`) created before the cutoff.
  const resumableUploads = await sweepResumable(ctx, cutoff)
  let blobs = 0
  for (;;) {
    const dead = await ctx.repo.listDeadBlobs(cutoff.toISOString(), 100)
    if (!dead.length) break
    for (const b of dead) {
      await dropBlob(ctx, b)
      blobs++
    }
    if (dead.length < 100) break
  }
  // Rows of named variants whose record went while their job ran.
  await ctx.repo.variants.forgetOrphans().catch((err: unknown) => ctx.logger.warn('attach-storage: forgetting variant rows failed', err))
  await ctx.repo.pending.forgetExpired(ctx.now().toISOString()).catch((e: unknown) => ctx.logger.warn('attach-storage: quota rows kept', e))
  return { temporaryFiles, resumableUploads, blobs, partialFiles }
}
