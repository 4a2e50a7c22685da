/**
 * What the service reports about its work, for metrics and tracing: each answered request, the bytes in
 * and out, resizes and their queue, sweeps, and every store call. A host passes observers
 * (`instrumentation`; `attach-storage/metrics` makes the Prometheus one); OpenTelemetry spans are made
 * through `@opentelemetry/api` when the host has registered an SDK before the service starts.
 */
import { type Span, SpanStatusCode, type Tracer, trace } from '@opentelemetry/api'
import { AttachStorageError } from '../errors.js'
import type { Store } from '../stores/store.js'
import type { StoreSet } from './stores.js'

/** One answered request of a route group. */
export interface RequestReport {
  /** `api` (the JSON group) or `assets` (the binary group). */
  group: 'api' | 'assets'
  /** The route's pattern below the group's prefix (`attach/view/:id`), or `unmatched`. */
  route: string
  method: string
  status: number
  /** From the request's arrival to the answer's headers. */
  seconds: number
}

/** One call of a store's method. */
export interface StoreCallReport {
  store: string
  operation: string
  seconds: number
  /** The failure, when the call failed for another reason than a missing object (`not-found`). */
  error?: unknown
}

/** What a sweep removed (`storage.sweep()`'s answer). */
export type SweepReport = Record<string, number>

/** An observer of the service's work; every method is optional and must not throw or block. */
export interface Instrumentation {
  request?(report: RequestReport): void
  /** Bytes received into the temporary area (`in`), or answered from a store (`out`). */
  bytes?(direction: 'in' | 'out', count: number): void
  /** A resized variant made, and how long it took. */
  resize?(seconds: number): void
  /** The resize queue now: generations running and waiting. */
  resizeQueue?(running: number, waiting: number): void
  sweep?(report: SweepReport): void
  storeCall?(report: StoreCallReport): void
  /**
   * A named-variant job ended: `made`, `exists` (made before), `original` (the original serves as it),
   * `gone` (record or name no longer there), `failed` (tried again later), `dropped` (the in-process
   * queue was full).
   */
  variantJob?(outcome: VariantJobReport, seconds: number): void
  /** Named-variant jobs waiting, as this instance last learnt it. */
  variantQueue?(waiting: number): void
  /** An upload refused with 413 `quota-exceeded`: a multipart temporary upload, a tus creation or a presign. */
  quotaRefusal?(kind: 'tmp' | 'tus' | 'presign'): void
  /**
   * A virus scan ended (a category's `scan`): `clean`, `infected`, `too-large` (over clamd's
   * StreamMaxLength), `unavailable` (no verdict: 503), `unscanned` (no verdict, kept by `on-error: accept`).
   */
  scan?(outcome: ScanReport): void
}

/** How a virus scan ended (see {@link Instrumentation.scan}). */
export type ScanReport = 'clean' | 'infected' | 'too-large' | 'unavailable' | 'unscanned'

/** How a named-variant job ended (see {@link Instrumentation.variantJob}). */
export type VariantJobReport = 'made' | 'exists' | 'original' | 'gone' | 'failed' | 'dropped'

/** Every observer as one, each call guarded (an observer's failure is not the request's). */
export function fanOut(observers: Instrumentation[]): Required<Instrumentation> & { readonly active: boolean } {
  const each =
    <K extends keyof Instrumentation>(key: K) =>
    (...args: Parameters<Required<Instrumentation>[K]>) => {
      for (const o of observers) {
        try {
          ;(o[key] as ((...a: unknown[]) => void) | undefined)?.(...args)
        } catch {
          // an observer's failure is its own
        }
      }
    }
  return {
    active: observers.length > 0,
    request: each('request'),
    bytes: each('bytes'),
    resize: each('resize'),
    resizeQueue: each('resizeQueue'),
    sweep: each('sweep'),
    storeCall: each('storeCall'),
    variantJob: each('variantJob'),
    variantQueue: each('variantQueue'),
    quotaRefusal: each('quotaRefusal'),
    scan: each('scan'),
  }
}

/** The tracer of the service when an OpenTelemetry SDK is registered now; undefined otherwise (no spans at all). */
export function tracerIfInstalled(): Tracer | undefined {
  const provider = trace.getTracerProvider() as { getDelegate?: () => unknown }
  const delegate = provider.getDelegate?.() ?? provider
  // Without an SDK, the API's provider hands out spans that record nothing: skip them altogether.
  if ((delegate as { constructor?: { name?: string } }).constructor?.name === 'NoopTracerProvider') return undefined
  return trace.getTracer('attach-storage')
}

/** The store methods timed and traced (`list` streams; its calls are not). */
const CALLS = ['put', 'get', 'stat', 'exists', 'move', 'copy', 'delete', 'readBytes', 'presignGet', 'presignPut'] as const

/**
 * The store seen through instrumentation: each call of {@link CALLS} is timed and reported (a failure
 * other than `not-found` as an error), and runs in a span `store.<operation>` when there is a tracer.
 * Everything else is the store itself.
 */
export function instrumentStore(store: Store, observe: Required<Instrumentation>, tracer: Tracer | undefined): Store {
  const wrapped = new Map<PropertyKey, unknown>()
  return new Proxy(store, {
    get(target, property) {
      const value = Reflect.get(target, property, target)
      if (typeof value !== 'function') return value
      let w = wrapped.get(property)
      if (w) return w
      const fn = (value as (...a: unknown[]) => unknown).bind(target)
      if (!(CALLS as readonly PropertyKey[]).includes(property)) w = fn
      else {
        const operation = String(property)
        w = (...args: unknown[]) => timedCall(store.name, operation, () => fn(...args) as Promise<unknown>, args[0], observe, tracer)
      }
      wrapped.set(property, w)
      return w
    },
  })
}

async function timedCall(
  storeName: string,
  operation: string,
  call: () => Promise<unknown>,
  key: unknown,
  observe: Required<Instrumentation>,
  tracer: Tracer | undefined,
): Promise<unknown> {
  const started = performance.now()
  const run = async (span?: Span) => {
    try {
      return await call()
    } catch (err) {
      const missing = err instanceof AttachStorageError && err.code === 'not-found'
      if (!missing) {
        observe.storeCall({ store: storeName, operation, seconds: (performance.now() - started) / 1000, error: err })
        span?.recordException(err as Error)
        span?.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error).message })
        throw err
      }
      observe.storeCall({ store: storeName, operation, seconds: (performance.now() - started) / 1000 })
      throw err
    } finally {
      span?.end()
    }
  }
  if (!tracer) {
    const result = await run()
    observe.storeCall({ store: storeName, operation, seconds: (performance.now() - started) / 1000 })
    return result
  }
  const result = await tracer.startActiveSpan(
    `store.${operation}`,
    { attributes: { 'attach_storage.store': storeName, ...(typeof key === 'string' ? { 'attach_storage.key': key } : {}) } },
    (span) => run(span),
  )
  observe.storeCall({ store: storeName, operation, seconds: (performance.now() - started) / 1000 })
  return result
}

/** The stores of a service seen through instrumentation (unchanged when there is nothing to report to). */
export function instrumentStores(set: StoreSet, observe: ReturnType<typeof fanOut>, tracer: Tracer | undefined): StoreSet {
  if (!observe.active && !tracer) return set
  const seen = new Map<Store, Store>()
  const wrap = (s: Store) => {
    let w = seen.get(s)
    if (!w) {
      w = instrumentStore(s, observe, tracer)
      seen.set(s, w)
    }
    return w
  }
  return { ...set, stores: new Map([...set.stores].map(([name, s]) => [name, wrap(s)])), tmpStore: wrap(set.tmpStore) }
}
