/**
 * `attach-storage sweep`: the service's sweep (expired temporary files, pending rows nobody finished,
 * partial files of crashed writes, files whose last record went), then the resize variants whose record
 * is gone, in every store. `--dry-run` counts what would go and removes nothing.
 */
import { sweep } from '../service/housekeeping.js'
import type { ServiceContext } from '../service/context.js'
import { TMP_PREFIX } from '../service/temporary.js'
import type { Store } from '../stores/store.js'
import { type CliIo, distinctStores, EXIT, type GlobalOptions, openService, report } from './runtime.js'
import { batches, variantOwner } from './walk.js'

/** Variant keys of a store whose record is not live any more. */
async function* orphanVariants(ctx: ServiceContext, store: Store, signal: AbortSignal): AsyncGenerator<string> {
  for await (const batch of batches(store, '')) {
    if (signal.aborted) return
    const variants = batch.flatMap((e) => {
      const id = e.key.startsWith(TMP_PREFIX) ? undefined : variantOwner(e.key)
      return id === undefined ? [] : [{ key: e.key, id }]
    })
    if (!variants.length) continue
    const live = new Set((await ctx.repo.findByIds([...new Set(variants.map((v) => v.id))])).map((r) => r.id))
    for (const v of variants) if (!live.has(v.id)) yield v.key
  }
}

export async function sweepCommand(options: GlobalOptions & { dryRun?: boolean }, io: CliIo): Promise<number> {
  const { ctx, close } = await openService(options, io)
  try {
    const cutoff = new Date(ctx.now().getTime() - ctx.config.tmpTtl)
    let result: { temporaryFiles: number; blobs: number; partialFiles: number | null; orphanVariants: number }
    if (options.dryRun) {
      let temporaryFiles = 0
      for await (const e of ctx.stores.tmpStore.list(TMP_PREFIX)) {
        if (e.lastModified < cutoff && !e.key.endsWith('.meta.json')) temporaryFiles++
      }
      const blobs = await ctx.repo.countDeadBlobs(cutoff.toISOString())
      let orphanVariantCount = 0
      for (const store of distinctStores(ctx)) for await (const _ of orphanVariants(ctx, store, io.signal)) orphanVariantCount++
      result = { temporaryFiles, blobs, partialFiles: null, orphanVariants: orphanVariantCount }
    } else {
      const swept = await sweep(ctx)
      let removed = 0
      for (const store of distinctStores(ctx)) {
        for await (const key of orphanVariants(ctx, store, io.signal)) {
          await store.delete(key)
          removed++
        }
      }
      result = { ...swept, orphanVariants: removed }
    }
    const verb = options.dryRun ? 'would remove' : 'removed'
    const interrupted = io.signal.aborted
    report(io, options, { dryRun: !!options.dryRun, ...result, interrupted }, [
      `${verb} ${result.temporaryFiles} expired temporary file(s)`,
      `${verb} ${result.blobs} unreferenced or pending file row(s) and their files`,
      result.partialFiles === null
        ? 'partial files of crashed writes: counted only when removed'
        : `${verb} ${result.partialFiles} partial file(s)`,
      `${verb} ${result.orphanVariants} orphaned resize variant(s)`,
      ...(interrupted ? ['interrupted: run again to finish'] : []),
    ])
    return interrupted ? EXIT.interrupted : EXIT.ok
  } finally {
    await close()
  }
}
