/**
 * `attach-storage sweep`: the service's sweep (expired temporary files, pending rows nobody finished,
 * partial files of crashed writes, files whose last record went), then the resize variants whose record
 * is gone, in every store. `--dry-run` counts what would go and removes nothing.
 *
 * What cannot be removed (a store down) is passed, counted per kind and store, reported, and tried again
 * by the next sweep; the command then exits 1. Store calls are bounded as the service's sweep bounds them
 * (see `SweepTally`), so a store that is down or stalled cannot keep it running; Ctrl-C stops it at once
 * (exit 130), without waiting for the store call in flight.
 */
import type { ServiceContext } from '../service/context.js'
import { sweep } from '../service/housekeeping.js'
import { type SweepFailure, SweepTally } from '../service/sweep-tally.js'
import { TMP_PREFIX } from '../service/temporary.js'
import type { Store } from '../stores/store.js'
import { type CliIo, distinctStores, EXIT, type GlobalOptions, openService, report } from './runtime.js'
import { batches, variantOwner } from './walk.js'

/** Variant keys of a store whose record is not live any more (each listing step bounded by `t`). */
async function* orphanVariants(ctx: ServiceContext, store: Store, t: SweepTally): AsyncGenerator<string> {
  for await (const batch of t.list(batches(store, ''))) {
    if (t.stopped) return
    const variants = batch.flatMap((key) => {
      const id = key.startsWith(TMP_PREFIX) ? undefined : variantOwner(key)
      return id === undefined ? [] : [{ key, id }]
    })
    if (!variants.length) continue
    const live = new Set((await ctx.repo.findByIds([...new Set(variants.map((v) => v.id))])).map((r) => r.id))
    for (const v of variants) if (!live.has(v.id)) yield v.key
  }
}

/**
 * Removes (or, with `dryRun`, counts) the orphaned variants of every store but those in `skip` (left
 * alone by the sweep before); a store that fails is passed.
 */
async function sweepOrphanVariants(ctx: ServiceContext, t: SweepTally, dryRun: boolean, skip = new Set<string>()): Promise<number> {
  let n = 0
  for (const store of distinctStores(ctx)) {
    if (t.stopped) break
    if (skip.has(store.name)) continue
    try {
      for await (const key of orphanVariants(ctx, store, t)) {
        if (t.stopped || t.down(store.name)) break
        if (dryRun) {
          n++
          continue
        }
        try {
          await t.call(store.delete(key))
          t.ok(store.name)
          n++
        } catch (err) {
          if (!t.stopped) t.fail('orphan-variants', store.name, err)
        }
      }
    } catch (err) {
      if (!t.stopped) t.fail('orphan-variants', store.name, err)
    }
  }
  return n
}

/** Counts what a sweep would remove. */
async function dryRun(ctx: ServiceContext, t: SweepTally) {
  const cutoff = new Date(ctx.now().getTime() - ctx.config.tmpTtl)
  let temporaryFiles = 0
  const tmp = ctx.stores.tmpStore
  try {
    for await (const e of t.list(tmp.list(TMP_PREFIX))) {
      if (t.stopped) break
      if (e.lastModified < cutoff && !e.key.endsWith('.meta.json')) temporaryFiles++
    }
  } catch (err) {
    if (!t.stopped) t.fail('temporary-files', tmp.name, err)
  }
  const blobs = await ctx.repo.operations.countDeadBlobs(cutoff.toISOString())
  return { temporaryFiles, blobs, partialFiles: null, orphanVariants: await sweepOrphanVariants(ctx, t, true) }
}

/** A failure as the text report shows it. */
const failureLine = (f: SweepFailure) =>
  `could not remove ${f.count} of ${f.kind} in store "${f.store}"${f.gaveUp ? ' (left alone after failures in a row)' : ''}: ${f.message}`

export async function sweepCommand(options: GlobalOptions & { dryRun?: boolean }, io: CliIo): Promise<number> {
  const { ctx, close } = await openService(options, io)
  try {
    let result: { temporaryFiles: number; blobs: number; partialFiles: number | null; orphanVariants: number; resumableUploads?: number }
    let failures: SweepFailure[]
    if (options.dryRun) {
      const t = new SweepTally({ signal: io.signal })
      result = await dryRun(ctx, t)
      failures = t.failures()
    } else {
      const { failures: serviceFailures, interrupted: _, ...swept } = await sweep(ctx, { signal: io.signal })
      const t = new SweepTally({ signal: io.signal })
      const down = new Set(serviceFailures.filter((f) => f.gaveUp).map((f) => f.store))
      const removed = await sweepOrphanVariants(ctx, t, false, down)
      t.log(ctx.logger)
      result = { ...swept, orphanVariants: removed }
      failures = [...serviceFailures, ...t.failures()]
    }
    const verb = options.dryRun ? 'would remove' : 'removed'
    const interrupted = io.signal.aborted
    const notRemoved = failures.reduce((n, f) => n + f.count, 0)
    report(io, options, { dryRun: !!options.dryRun, ...result, failed: notRemoved, failures, interrupted }, [
      `${verb} ${result.temporaryFiles} expired temporary file(s)`,
      `${verb} ${result.blobs} unreferenced or pending file row(s) and their files`,
      result.partialFiles === null
        ? 'partial files of crashed writes: counted only when removed'
        : `${verb} ${result.partialFiles} partial file(s)`,
      `${verb} ${result.orphanVariants} orphaned resize variant(s)`,
      ...failures.map(failureLine),
      ...(notRemoved ? [`${notRemoved} thing(s) not removed: the next sweep tries again`] : []),
      ...(interrupted ? ['interrupted: run again to finish'] : []),
    ])
    if (notRemoved) return EXIT.problems
    return interrupted ? EXIT.interrupted : EXIT.ok
  } finally {
    await close()
  }
}
