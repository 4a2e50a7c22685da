/**
 * Named-variant jobs in the PostgreSQL database, through pg-boss (an optional peer, loaded only here):
 * every instance on the database takes jobs from one queue, each job is fetched by one worker
 * (`FOR UPDATE SKIP LOCKED`), and a job whose instance died is failed after `jobTimeout` and tried again.
 * pg-boss keeps its tables in its own schema (`pgboss` unless `variant-jobs.pg-boss.schema` says
 * otherwise) and runs its SQL through the service's own Kysely pool.
 */
import { CompiledQuery, type Kysely } from 'kysely'
import { configError } from '../errors.js'
import type { Logger } from './types.js'
import type { VariantJob, VariantQueue, VariantWork } from './variant-queue.js'

/** The pg-boss queue the jobs go to. */
export const VARIANT_QUEUE_NAME = 'attach-variants'

/** Options of {@link startPgBossQueue}. */
export interface PgBossQueueOptions {
  /** The service's Kysely instance on PostgreSQL; pg-boss's statements run through its pool. */
  db: Kysely<any>
  /** This instance runs jobs (`variant-jobs.worker`); otherwise it only queues them. */
  worker: boolean
  concurrency: number
  retryLimit: number
  /** Milliseconds after which a running job is taken to have died with its instance. */
  jobTimeoutMs: number
  /** More options of pg-boss's constructor, as the host wrote them. */
  extra: Record<string, unknown>
  logger: Logger
  /** Told of the number waiting whenever this instance learns it. */
  onWaiting?(waiting: number): void
  /** How pg-boss is loaded (tests). */
  importModule?: (specifier: string) => Promise<unknown>
}

/** The part of pg-boss 10's API used here. */
interface Boss {
  on(event: 'error', handler: (error: unknown) => void): unknown
  start(): Promise<unknown>
  stop(options?: { graceful?: boolean; wait?: boolean; timeout?: number; close?: boolean }): Promise<void>
  createQueue(name: string, options: Record<string, unknown>): Promise<void>
  updateQueue(name: string, options: Record<string, unknown>): Promise<void>
  insert(jobs: Array<{ name: string; data: object; singletonKey?: string }>): Promise<void>
  work(name: string, options: Record<string, unknown>, handler: (jobs: Array<{ data: VariantJob }>) => Promise<void>): Promise<string>
  notifyWorker(id: string): void
  getQueueSize(name: string): Promise<number>
}

type BossClass = new (options: Record<string, unknown>) => Boss

/** Starts pg-boss on the service's database, creates the queue, and (for a worker) its workers. */
export async function startPgBossQueue(work: VariantWork, o: PgBossQueueOptions): Promise<VariantQueue> {
  const load = o.importModule ?? ((s: string) => import(s))
  let PgBoss: BossClass
  try {
    const mod = (await load('pg-boss')) as { default?: BossClass }
    PgBoss = (mod.default ?? mod) as BossClass
  } catch (cause) {
    throw configError(
      'Named variants on PostgreSQL run on pg-boss: install it (npm install pg-boss@10), or set attach.variant-jobs.queue to memory',
      { cause },
    )
  }
  const boss = new PgBoss({
    // pg-boss runs its SQL through the service's pool: one pool, and a host's own Kysely works too.
    db: { executeSql: (text: string, values: unknown[] = []) => o.db.executeQuery(CompiledQuery.raw(text, values)) },
    schedule: false,
    ...o.extra,
  })
  boss.on('error', (err) => o.logger.warn('attach-storage: the variant job queue reported an error', err))
  await boss.start()
  const queue = {
    // One job waiting and one running per record and name at most: saving again queues nothing new.
    policy: 'stately',
    retryLimit: o.retryLimit,
    retryDelay: 2,
    retryBackoff: true,
    expireInSeconds: Math.max(1, Math.round(o.jobTimeoutMs / 1000)),
  }
  // Created by the first instance; the settings of the instance that started last apply to new jobs.
  await boss.createQueue(VARIANT_QUEUE_NAME, queue)
  await boss.updateQueue(VARIANT_QUEUE_NAME, queue)
  const workers: string[] = []
  let running = 0
  let idle: Array<() => void> = []
  let waiting = 0
  const refresh = () => {
    boss
      .getQueueSize(VARIANT_QUEUE_NAME)
      .then((n) => {
        waiting = n
        o.onWaiting?.(n)
      })
      .catch(() => undefined)
  }
  if (o.worker) {
    for (let i = 0; i < o.concurrency; i++) {
      workers.push(
        await boss.work(VARIANT_QUEUE_NAME, { batchSize: 1, pollingIntervalSeconds: 2 }, async (jobs) => {
          running++
          try {
            for (const job of jobs) await work(job.data)
          } finally {
            running--
            refresh()
            if (running === 0) for (const resolve of idle.splice(0)) resolve()
          }
        }),
      )
    }
  }
  let stopped = false
  return {
    kind: 'pg-boss',
    async enqueue(jobs) {
      if (!jobs.length) return
      await boss.insert(
        jobs.map((job) => ({
          name: VARIANT_QUEUE_NAME,
          data: { fileId: job.fileId, name: job.name },
          singletonKey: `${job.fileId}:${job.name}`,
        })),
      )
      // This instance's workers look at once rather than at their next poll.
      for (const id of workers) boss.notifyWorker(id)
      refresh()
    },
    waiting: () => waiting,
    idle: () => (running === 0 ? Promise.resolve() : new Promise((resolve) => idle.push(resolve))),
    async stop() {
      if (stopped) return
      stopped = true
      // Running jobs get a few seconds; what is still running then is failed, and retried by another instance.
      await boss.stop({ graceful: true, wait: true, timeout: 10_000, close: false })
      idle = []
    },
  }
}
