/**
 * Bounds for the sweep's store calls, and what it could not do. A store that is down must not make a
 * sweep run for ever, hand it the same rows again, or write a log line per row: each call is bounded
 * in time and by the caller's signal, a store that failed {@link SweepBounds.maxConsecutiveFailures}
 * calls in a row is left alone for the rest of the sweep, and failures are counted per kind and store,
 * then logged once each.
 */
import type { Logger } from './types.js'

/** How long a sweep waits for one store call. */
export const SWEEP_CALL_TIMEOUT_MS = 15_000

/** Failed calls in a row after which a sweep leaves a store alone. */
export const SWEEP_GIVE_UP_AFTER = 5

/** Options of a sweep. */
export interface SweepBounds {
  /** Stops the sweep: the call in flight is no longer waited for, nothing more is started. */
  signal?: AbortSignal
  /** Longest wait for one store call; a slower call counts as failed (and may still finish). @default 15 s */
  callTimeoutMs?: number
  /** Failed store calls in a row after which the store is left alone until the next sweep. @default 5 */
  maxConsecutiveFailures?: number
}

/** What a sweep could not remove, for one kind of thing in one store. */
export interface SweepFailure {
  /** `files` (unused files and their variants), `temporary-files`, `partial-files`, `direct-uploads`, `resumable-uploads`, `orphan-variants`, `rows`. */
  kind: string
  store: string
  /** Things not removed (a phase that could not even list its store counts 1). */
  count: number
  /** The first failure's message. */
  message: string
  /** The store was left alone after failures in a row: later items were not tried. */
  gaveUp: boolean
}

/** A store call that took longer than the sweep waits. */
export class SweepTimeoutError extends Error {
  constructor(ms: number) {
    super(`no answer within ${ms} ms`)
    this.name = 'SweepTimeoutError'
  }
}

/** The sweep was stopped by its signal. */
export class SweepAbortedError extends Error {
  constructor() {
    super('sweep stopped')
    this.name = 'SweepAbortedError'
  }
}

/** Counts a sweep's failures per kind and store and bounds its store calls. */
export class SweepTally {
  readonly #failures = new Map<string, SweepFailure & { error: unknown }>()
  readonly #streak = new Map<string, number>()
  readonly #timeoutMs: number
  readonly #giveUpAfter: number
  readonly signal: AbortSignal | undefined

  constructor(bounds: SweepBounds = {}) {
    this.signal = bounds.signal
    this.#timeoutMs = bounds.callTimeoutMs ?? SWEEP_CALL_TIMEOUT_MS
    this.#giveUpAfter = bounds.maxConsecutiveFailures ?? SWEEP_GIVE_UP_AFTER
  }

  /** True once the signal has stopped the sweep. */
  get stopped(): boolean {
    return this.signal?.aborted === true
  }

  /** True when `store` failed too many calls in a row: the sweep leaves it alone. */
  down(store: string): boolean {
    return (this.#streak.get(store) ?? 0) >= this.#giveUpAfter
  }

  /**
   * Waits for `work` (a store call) at most the timeout (times `calls`, for work made of several
   * calls), and not after the signal: rejects with {@link SweepTimeoutError} or {@link SweepAbortedError}
   * then (the work itself may go on).
   */
  call<T>(work: Promise<T>, calls = 1): Promise<T> {
    const ms = this.#timeoutMs * calls
    return new Promise<T>((resolve, reject) => {
      const signal = this.signal
      const onAbort = () => reject(new SweepAbortedError())
      if (signal?.aborted) return onAbort()
      const timer = setTimeout(() => reject(new SweepTimeoutError(ms)), ms)
      signal?.addEventListener('abort', onAbort, { once: true })
      work.then(resolve, reject).finally(() => {
        clearTimeout(timer)
        signal?.removeEventListener('abort', onAbort)
      })
    })
  }

  /** The entries of a store listing, each step bounded as {@link call}. */
  async *list<T>(entries: AsyncIterable<T>): AsyncGenerator<T> {
    const it = entries[Symbol.asyncIterator]()
    try {
      for (;;) {
        const step = await this.call(it.next())
        if (step.done) return
        yield step.value
      }
    } finally {
      // Let the listing end in the background (a stalled store may never answer).
      void Promise.resolve(it.return?.()).catch(() => undefined)
    }
  }

  /** A call to `store` answered: its run of failures ends. */
  ok(store: string): void {
    this.#streak.delete(store)
  }

  /**
   * `count` things of `kind` in `store` were not removed because of `error` (a store call that failed
   * counts towards leaving the store alone; `count` without `error` adds things not tried).
   */
  fail(kind: string, store: string, error?: unknown, count = 1): void {
    const key = `${kind}\n${store}`
    let f = this.#failures.get(key)
    if (!f) {
      f = { kind, store, count: 0, message: error === undefined ? 'not tried' : messageOf(error), gaveUp: false, error }
      this.#failures.set(key, f)
    }
    f.count += count
    if (error !== undefined) this.#streak.set(store, (this.#streak.get(store) ?? 0) + 1)
    if (this.down(store)) f.gaveUp = true
  }

  /** The failures, one per kind and store. */
  failures(): SweepFailure[] {
    return [...this.#failures.values()].map(({ error: _error, ...f }) => f)
  }

  /** Logs one line per kind and store of failure. */
  log(logger: Logger): void {
    for (const f of this.#failures.values()) {
      logger.warn(
        `attach-storage: the sweep could not remove ${f.count} of ${f.kind} in store "${f.store}"${
          f.gaveUp ? ` (the store was left alone after ${this.#giveUpAfter} failures in a row)` : ''
        }: ${f.message}; the next sweep tries again`,
        f.error,
      )
    }
  }
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error)
}
