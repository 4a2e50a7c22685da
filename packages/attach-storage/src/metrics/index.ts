/**
 * `attach-storage/metrics`: the service's work as Prometheus metrics, through prom-client (an optional
 * peer dependency: install it to use this entry).
 *
 * @example
 * import { createPrometheusMetrics } from 'attach-storage/metrics'
 * const metrics = createPrometheusMetrics()
 * const storage = await createAttachStorage({ config, instrumentation: metrics.instrumentation })
 * app.get('/metrics', () => metrics.answer())
 */
import { Counter, Gauge, Histogram, Registry } from 'prom-client'
import type { Instrumentation } from '../service/instrumentation.js'

/** Options of {@link createPrometheusMetrics}. */
export interface PrometheusMetricsOptions {
  /** The registry the metrics are registered in. @default a new one */
  registry?: Registry
  /** The metrics' name prefix. @default 'attach_storage_' */
  prefix?: string
}

/** The metrics of a service: the observer to pass as `instrumentation`, the registry, and the `/metrics` answer. */
export interface PrometheusMetrics {
  /** Pass as `createAttachStorage({ instrumentation })`. */
  instrumentation: Instrumentation
  registry: Registry
  /** The registry in Prometheus's text format, as a `/metrics` route answers it (200, never cached). */
  answer(): Promise<Response>
}

/** Seconds: from a fast view to a slow upload. */
const DURATION_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]

/**
 * Registers the metrics (names below with the default prefix):
 * - `attach_storage_requests_total{group, route, method, status}` and
 *   `attach_storage_request_duration_seconds{group, route, method}`: answered requests by route pattern;
 * - `attach_storage_bytes_total{direction="in"|"out"}`: bytes received into the temporary area, answered from stores;
 * - `attach_storage_resize_duration_seconds` and `attach_storage_resize_queue{state="running"|"waiting"}`;
 * - `attach_storage_sweep_removed_total{kind}`: what sweeps removed, by kind (`temporaryFiles`, `blobs`, ...);
 * - `attach_storage_store_calls_total{store, operation}`, `attach_storage_store_call_duration_seconds{store, operation}`
 *   and `attach_storage_store_errors_total{store, operation}`;
 * - `attach_storage_quota_refusals_total{kind="tmp"|"tus"|"presign"}`: uploads refused with 413
 *   `quota-exceeded` (`upload.userQuota`), by what was refused;
 * - `attach_storage_scans_total{outcome="clean"|"infected"|"too-large"|"unavailable"|"unscanned"}`: virus
 *   scans of uploads (a category's `scan`), by how they ended.
 */
export function createPrometheusMetrics(options: PrometheusMetricsOptions = {}): PrometheusMetrics {
  const registry = options.registry ?? new Registry()
  const p = options.prefix ?? 'attach_storage_'
  const registers = [registry]
  const requests = new Counter({
    name: `${p}requests_total`,
    help: 'Requests answered by the attach-storage handlers, by route pattern and status',
    labelNames: ['group', 'route', 'method', 'status'] as const,
    registers,
  })
  const requestSeconds = new Histogram({
    name: `${p}request_duration_seconds`,
    help: 'Time to the answer of attach-storage requests, by route pattern',
    labelNames: ['group', 'route', 'method'] as const,
    buckets: DURATION_BUCKETS,
    registers,
  })
  const bytes = new Counter({
    name: `${p}bytes_total`,
    help: 'Bytes received into the temporary area (in) and answered from stores (out)',
    labelNames: ['direction'] as const,
    registers,
  })
  const resizeSeconds = new Histogram({
    name: `${p}resize_duration_seconds`,
    help: 'Time to make one resized variant',
    buckets: DURATION_BUCKETS,
    registers,
  })
  const resizeQueue = new Gauge({
    name: `${p}resize_queue`,
    help: 'Resized variants being made (running) and waiting for a slot (waiting)',
    labelNames: ['state'] as const,
    registers,
  })
  const swept = new Counter({
    name: `${p}sweep_removed_total`,
    help: 'What sweeps removed, by kind',
    labelNames: ['kind'] as const,
    registers,
  })
  const storeCalls = new Counter({
    name: `${p}store_calls_total`,
    help: 'Calls of store methods, by store and operation',
    labelNames: ['store', 'operation'] as const,
    registers,
  })
  const storeSeconds = new Histogram({
    name: `${p}store_call_duration_seconds`,
    help: 'Time of store calls, by store and operation',
    labelNames: ['store', 'operation'] as const,
    buckets: DURATION_BUCKETS,
    registers,
  })
  const storeErrors = new Counter({
    name: `${p}store_errors_total`,
    help: 'Store calls that failed (a missing object does not count), by store and operation',
    labelNames: ['store', 'operation'] as const,
    registers,
  })
  const variantJobs = new Counter({
    name: `${p}variant_jobs_total`,
    help: 'Named-variant jobs ended, by outcome (made, exists, original, gone, failed, dropped)',
    labelNames: ['outcome'] as const,
    registers,
  })
  const variantQueue = new Gauge({
    name: `${p}variant_jobs_waiting`,
    help: 'Named-variant jobs waiting to be made, as this instance last learnt it',
    registers,
  })
  const quotaRefusals = new Counter({
    name: `${p}quota_refusals_total`,
    help: 'Uploads refused because their user holds upload.userQuota in pending uploads, by kind (tmp, tus, presign)',
    labelNames: ['kind'] as const,
    registers,
  })
  const scans = new Counter({
    name: `${p}scans_total`,
    help: 'Virus scans of uploads by clamd, by outcome (clean, infected, too-large, unavailable, unscanned)',
    labelNames: ['outcome'] as const,
    registers,
  })
  resizeQueue.set({ state: 'running' }, 0)
  resizeQueue.set({ state: 'waiting' }, 0)
  variantQueue.set(0)

  const instrumentation: Instrumentation = {
    request({ group, route, method, status, seconds }) {
      requests.inc({ group, route, method, status: String(status) })
      requestSeconds.observe({ group, route, method }, seconds)
    },
    bytes(direction, count) {
      bytes.inc({ direction }, count)
    },
    resize(seconds) {
      resizeSeconds.observe(seconds)
    },
    resizeQueue(running, waiting) {
      resizeQueue.set({ state: 'running' }, running)
      resizeQueue.set({ state: 'waiting' }, waiting)
    },
    sweep(report) {
      for (const [kind, n] of Object.entries(report)) if (typeof n === 'number' && n > 0) swept.inc({ kind }, n)
    },
    storeCall({ store, operation, seconds, error }) {
      storeCalls.inc({ store, operation })
      storeSeconds.observe({ store, operation }, seconds)
      if (error !== undefined) storeErrors.inc({ store, operation })
    },
    variantJob(outcome) {
      variantJobs.inc({ outcome })
    },
    variantQueue(waiting) {
      variantQueue.set(waiting)
    },
    quotaRefusal(kind) {
      quotaRefusals.inc({ kind })
    },
    scan(outcome) {
      scans.inc({ outcome })
    },
  }
  return {
    instrumentation,
    registry,
    async answer() {
      return new Response(await registry.metrics(), {
        status: 200,
        headers: { 'content-type': registry.contentType, 'cache-control': 'no-store' },
      })
    },
  }
}
