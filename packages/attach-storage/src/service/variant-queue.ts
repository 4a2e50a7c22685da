/**
 * Where named-variant jobs wait until an instance makes them: in this process ({@link MemoryVariantQueue})
 * or in the PostgreSQL database through pg-boss (`variant-queue-pgboss.ts`), where every instance shares
 * the work and a crash loses no job.
 */

/** One job: make the named variant `name` of record `fileId`. */
export interface VariantJob {
  fileId: number
  name: string
}

/** What runs one job; a throw has the job tried again later (up to the retry limit). */
export type VariantWork = (job: VariantJob) => Promise<void>

/** A queue of named-variant jobs. */
export interface VariantQueue {
  readonly kind: 'memory' | 'pg-boss'
  /** Queues jobs; a job already waiting for the same record and name is not queued twice. */
  enqueue(jobs: VariantJob[]): Promise<void>
  /** Jobs waiting (not yet running) as far as this instance knows. */
  waiting(): number
  /** Resolves once this process has no job waiting or running (memory), or none it runs (pg-boss). */
  idle(): Promise<void>
  /** Stops taking jobs and waits (a bounded time) for the running ones. */
  stop(): Promise<void>
}

/** Options of {@link MemoryVariantQueue}. */
export interface MemoryQueueOptions {
  /** Jobs run at once. */
  concurrency: number
  /** Most jobs waiting; further ones are dropped (`onDrop`). */
  maxQueued: number
  /** Times a failed job is tried again, after 1 s, 2 s, 4 s... */
  retryLimit: number
  /** Told of each job dropped because the queue is full. */
  onDrop(job: VariantJob): void
  /** Told of a job that failed for good. */
  onFail(job: VariantJob, error: unknown): void
  /** Told of the number waiting whenever it changes. */
  onWaiting?(waiting: number): void
  /** The first retry's delay in milliseconds (doubled each time). @default 1000 */
  retryDelayMs?: number
}

const keyOf = (j: VariantJob) => `${j.fileId}\u0000${j.name}`

/**
 * Jobs in this process, first in first out, at most `concurrency` at once and `maxQueued` waiting. They
 * are lost with the process: a view of the variant makes it then, and `attach-storage variants make`
 * makes what is missing.
 */
export class MemoryVariantQueue implements VariantQueue {
  readonly kind = 'memory'
  readonly #o: MemoryQueueOptions
  readonly #work: VariantWork
  readonly #waiting: Array<{ job: VariantJob; attempt: number }> = []
  /** Keys of jobs waiting or running: a second save of the same record does not queue it twice. */
  readonly #keys = new Set<string>()
  readonly #timers = new Set<NodeJS.Timeout>()
  #running = 0
  #stopped = false
  #idle: Array<() => void> = []

  constructor(work: VariantWork, options: MemoryQueueOptions) {
    this.#work = work
    this.#o = options
  }

  async enqueue(jobs: VariantJob[]): Promise<void> {
    if (this.#stopped) return
    for (const job of jobs) {
      const k = keyOf(job)
      if (this.#keys.has(k)) continue
      if (this.#waiting.length >= this.#o.maxQueued) {
        this.#o.onDrop(job)
        continue
      }
      this.#keys.add(k)
      this.#waiting.push({ job, attempt: 0 })
    }
    this.#o.onWaiting?.(this.#waiting.length)
    this.#pump()
  }

  waiting(): number {
    return this.#waiting.length
  }

  idle(): Promise<void> {
    if (this.#busy()) return new Promise((resolve) => this.#idle.push(resolve))
    return Promise.resolve()
  }

  async stop(): Promise<void> {
    this.#stopped = true
    for (const t of this.#timers) clearTimeout(t)
    this.#timers.clear()
    this.#waiting.length = 0
    this.#keys.clear()
    await this.idle()
  }

  #busy(): boolean {
    return this.#running > 0 || this.#waiting.length > 0 || this.#timers.size > 0
  }

  #pump(): void {
    while (!this.#stopped && this.#running < this.#o.concurrency && this.#waiting.length) {
      const { job, attempt } = this.#waiting.shift()!
      this.#o.onWaiting?.(this.#waiting.length)
      this.#running++
      void this.#run(job, attempt)
    }
    if (!this.#busy()) for (const resolve of this.#idle.splice(0)) resolve()
  }

  async #run(job: VariantJob, attempt: number): Promise<void> {
    try {
      await this.#work(job)
      this.#keys.delete(keyOf(job))
    } catch (err) {
      if (attempt < this.#o.retryLimit && !this.#stopped) {
        // Tried again after a growing delay, through the queue (so within `concurrency`).
        const t = setTimeout(
          () => {
            this.#timers.delete(t)
            if (this.#stopped) return
            this.#waiting.unshift({ job, attempt: attempt + 1 })
            this.#pump()
          },
          (this.#o.retryDelayMs ?? 1000) * 2 ** attempt,
        )
        t.unref()
        this.#timers.add(t)
      } else {
        this.#keys.delete(keyOf(job))
        this.#o.onFail(job, err)
      }
    } finally {
      this.#running--
      this.#pump()
    }
  }
}
