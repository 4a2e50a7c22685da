/** Starts the queue named variants are made from: in this process, or on pg-boss on PostgreSQL. */
import type { Kysely } from 'kysely'
import { configError } from '../errors.js'
import type { ServiceContext } from './context.js'
import { MemoryVariantQueue, type VariantJob, type VariantQueue } from './variant-queue.js'
import { startPgBossQueue } from './variant-queue-pgboss.js'
import { makeNamedVariant } from './variants.js'
import { makePreview, PREVIEW_JOB } from './previews.js'

/** True when some registered category names a variant, or some kind of preview is on. */
function anyBackgroundWork(ctx: ServiceContext): boolean {
  if (ctx.previews.on('pdf') || ctx.previews.on('video') || ctx.previews.on('audio')) return true
  return ctx.registry.domains().some((d) => [...d.categories.values()].some((c) => c.variants.size > 0))
}

/**
 * The queue of named-variant and preview jobs for this service (undefined when no category names a
 * variant and previews are off):
 * `variant-jobs.queue` `memory`, or `pg-boss` (the default on PostgreSQL), whose workers run only when
 * `variant-jobs.worker` is true.
 */
export async function startVariantJobs(ctx: ServiceContext, db: Kysely<any>): Promise<VariantQueue | undefined> {
  if (!anyBackgroundWork(ctx)) return undefined
  const c = ctx.config.variantJobs
  const dialect = ctx.repo.dialect
  const kind = c.queue === 'auto' ? (dialect === 'postgres' ? 'pg-boss' : 'memory') : c.queue
  if (kind === 'pg-boss' && dialect !== 'postgres') {
    throw configError(`attach.variant-jobs.queue pg-boss needs a PostgreSQL database (db.type is ${dialect})`)
  }
  const work = async (job: VariantJob) => {
    const started = performance.now()
    try {
      const outcome = job.name === PREVIEW_JOB ? await makePreview(ctx, job) : await makeNamedVariant(ctx, job)
      // A preview job reports as a variant job: media learnt (audio) is made; refused for good is failed.
      ctx.observe.variantJob(outcome === 'analysed' ? 'made' : outcome, (performance.now() - started) / 1000)
    } catch (err) {
      ctx.observe.variantJob('failed', (performance.now() - started) / 1000)
      throw err
    }
  }
  const onWaiting = (n: number) => ctx.observe.variantQueue(n)
  if (kind === 'memory') {
    return new MemoryVariantQueue(work, {
      concurrency: c.concurrency,
      maxQueued: c.maxQueued,
      retryLimit: c.retryLimit,
      onWaiting,
      onDrop: (job) => {
        ctx.observe.variantJob('dropped', 0)
        ctx.logger.warn(`attach-storage: the variant queue is full; variant "${job.name}" of ${job.fileId} is made on first view`)
      },
      onFail: (job, err) =>
        ctx.logger.warn(
          `attach-storage: variant "${job.name}" of attachment ${job.fileId} could not be made; it is tried on first view`,
          err,
        ),
    })
  }
  return startPgBossQueue(work, {
    db,
    worker: c.worker,
    concurrency: c.concurrency,
    retryLimit: c.retryLimit,
    jobTimeoutMs: c.jobTimeout,
    extra: c.pgBoss,
    logger: ctx.logger,
    onWaiting,
  })
}
