/**
 * Readiness: whether the database and every store answer now, each asked once with a time limit, so a
 * hung dependency makes the check fail fast instead of hanging it.
 */
import { AttachStorageError } from '../errors.js'
import type { Store } from '../stores/store.js'
import type { ServiceContext } from './context.js'

/** The key a store is asked about (it need not exist: any answer, found or not, means the store answers). */
export const PROBE_KEY = '_health/probe'

/** How long one dependency may take to answer a readiness check. @default 2000 */
export const READINESS_TIMEOUT_MS = 2000

/** One dependency's answer: `ok`, or what went wrong. */
export interface ReadinessCheck {
  ok: boolean
  /** How long it took to answer (or to give up), in milliseconds. */
  ms: number
  /** What failed, for operators (no secrets: store errors are redacted by the store packages). */
  error?: string
}

/** The readiness of a service: ready when the database and every store answered. */
export interface Readiness {
  ready: boolean
  database: ReadinessCheck
  /** By store name; the temporary store under its own name (`tmp` when it is the built-in one). */
  stores: Record<string, ReadinessCheck>
  /**
   * PDF and video previews and the media of video, audio and PDFs, by kind: `on`, or `off: ...` and why
   * (a missing tool). A kind that is off does not make the service unready.
   */
  previews: { pdf: string; video: string; audio: string }
}

/**
 * How long a readiness answer is reused, in milliseconds: `/readyz` answers without authentication, so
 * however many probes arrive, each store and the database are asked at most once per this period.
 * @default 1000
 */
export const READINESS_MAX_AGE_MS = 1000

/** Options of {@link checkReadiness}. */
export interface ReadinessOptions {
  /** How long one dependency may take to answer. @default 2000 ({@link READINESS_TIMEOUT_MS}) */
  timeoutMs?: number
  /** How long a finished check is reused; 0: ask again each time. @default 1000 ({@link READINESS_MAX_AGE_MS}) */
  maxAgeMs?: number
}

/** The last check of each service: in flight (`doneAt` undefined) or finished at `doneAt` (performance.now()). */
const lastChecks = new WeakMap<ServiceContext, { timeoutMs: number; answer: Promise<Readiness>; doneAt?: number }>()

/**
 * Whether the database and every store answer, each asked at once within `timeoutMs`. Concurrent
 * callers share one check in flight, and a finished check is reused for `maxAgeMs`, so a flood of
 * probes costs one call per store per period, never one per request.
 */
export function checkReadiness(ctx: ServiceContext, options: ReadinessOptions = {}): Promise<Readiness> {
  const timeoutMs = options.timeoutMs ?? READINESS_TIMEOUT_MS
  const maxAgeMs = options.maxAgeMs ?? READINESS_MAX_AGE_MS
  const last = lastChecks.get(ctx)
  if (last && last.timeoutMs === timeoutMs && (last.doneAt === undefined || performance.now() - last.doneAt < maxAgeMs)) {
    return last.answer
  }
  const entry: { timeoutMs: number; answer: Promise<Readiness>; doneAt?: number } = {
    timeoutMs,
    answer: askAll(ctx, timeoutMs).finally(() => {
      entry.doneAt = performance.now()
    }),
  }
  lastChecks.set(ctx, entry)
  return entry.answer
}

/** Asks the database and every store at once, each within `timeoutMs`. */
async function askAll(ctx: ServiceContext, timeoutMs: number): Promise<Readiness> {
  const stores = new Map<string, Store>(ctx.stores.stores)
  if (![...stores.values()].includes(ctx.stores.tmpStore)) stores.set(ctx.stores.tmpStore.name, ctx.stores.tmpStore)
  const [database, ...answers] = await Promise.all([
    timed(() => ctx.repo.ping(), timeoutMs),
    ...[...stores.values()].map((store) => timed(() => store.exists(PROBE_KEY), timeoutMs)),
  ])
  const byName: Record<string, ReadinessCheck> = {}
  ;[...stores.keys()].forEach((name, i) => {
    byName[name] = answers[i]!
  })
  const ready = database!.ok && answers.every((a) => a.ok)
  if (!ready) {
    const failed = [...(database!.ok ? [] : ['database']), ...Object.keys(byName).filter((n) => !byName[n]!.ok)]
    ctx.logger.warn(`attach-storage: not ready: ${failed.join(', ')} did not answer`)
  }
  return { ready, database: database!, stores: byName, previews: { ...ctx.previews.status } }
}

/** Runs `fn`, answering ok, or its failure, or a timeout after `timeoutMs`. */
async function timed(fn: () => Promise<unknown>, timeoutMs: number): Promise<ReadinessCheck> {
  const started = performance.now()
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs)
    timer.unref?.()
  })
  try {
    await Promise.race([fn(), timeout])
    return { ok: true, ms: Math.round(performance.now() - started) }
  } catch (err) {
    const message = err instanceof AttachStorageError || err instanceof Error ? err.message : String(err)
    return { ok: false, ms: Math.round(performance.now() - started), error: message }
  } finally {
    clearTimeout(timer)
  }
}
