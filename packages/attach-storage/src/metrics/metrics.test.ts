import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { context, trace } from '@opentelemetry/api'
import { AsyncLocalStorageContextManager } from '@opentelemetry/context-async-hooks'
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AttachStorageError } from '../errors.js'
import { type Kit, makeKit, png, saveFile } from '../testing/handler-kit.js'
import { LocalStore } from '../stores/local-store.js'
import type { Store } from '../stores/store.js'
import { createPrometheusMetrics } from './index.js'

/** A local store whose `get` fails for keys under `broken/` (a store error the metrics must count). */
function failingStore(dir: string): Store {
  const local = new LocalStore('archive', { baseDir: dir })
  return Object.assign(Object.create(local) as Store, {
    name: 'archive',
    type: 'failing',
    get: (key: string, range?: { start: number; end?: number }) =>
      key.startsWith('broken/') ? Promise.reject(new AttachStorageError('store-failure', 'disk gone')) : local.get(key, range),
  })
}

/** The value of one sample line of the text format (`name{labels} value`), or undefined. */
function sample(text: string, name: string, labels: Record<string, string> = {}): number | undefined {
  for (const line of text.split('\n')) {
    if (!line.startsWith(name)) continue
    const m = /^([a-z_]+)(?:\{(.*)\})? (\S+)$/.exec(line)
    if (!m || m[1] !== name) continue
    const have = Object.fromEntries([...(m[2] ?? '').matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]))
    if (Object.entries(labels).every(([k, v]) => have[k] === v)) return Number(m[3])
  }
  return undefined
}

describe('Prometheus metrics (attach-storage/metrics)', () => {
  let kit: Kit
  let dir: string
  const metrics = createPrometheusMetrics()
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-metrics-'))
    kit = await makeKit('sqlite', {
      instrumentation: metrics.instrumentation,
      stores: { archive: failingStore(dir) },
      config: { domains: { demo: { categories: { default: {}, image: { filters: ['image'] } } } } },
    })
  })
  afterAll(async () => {
    await kit.cleanup()
    await rm(dir, { recursive: true, force: true })
  })

  it('counts requests by route pattern and status, bytes in and out, resizes, sweeps and store errors', async () => {
    const photo = await png(600, 400)
    const rec = await saveFile(kit, photo, 'p.png', '1', 'image')
    const view = await kit.call(`/assets/storage/attach/view/${rec.id}`)
    const viewed = (await view.arrayBuffer()).byteLength
    const small = await kit.call(`/assets/storage/attach/view/${rec.id}?w=60`)
    await small.arrayBuffer()
    // The variant is written behind its answer: its store call counts once written.
    await kit.storage.resizer.settled()
    expect((await kit.call('/assets/storage/attach/view/999999')).status).toBe(404)
    expect((await kit.call('/api/storage/attach/tmp', { method: 'POST', user: null })).status).toBe(401)
    // A store that fails: a read through it is a store error, and a 500 of the route.
    await expect(kit.storage.store('archive').get('broken/x')).rejects.toThrow('disk gone')
    await expect(kit.storage.store('archive').get('missing/y')).rejects.toMatchObject({ code: 'not-found' })
    await kit.storage.sweep()

    const res = await metrics.answer()
    expect(res.headers.get('content-type')).toContain('text/plain')
    const text = await res.text()
    expect(sample(text, 'attach_storage_requests_total', { group: 'api', route: 'attach/tmp', method: 'POST', status: '200' })).toBe(1)
    expect(sample(text, 'attach_storage_requests_total', { group: 'api', route: 'unmatched', method: 'POST', status: '401' })).toBe(1)
    expect(sample(text, 'attach_storage_requests_total', { group: 'assets', route: 'attach/:action/:id', status: '200' })).toBe(2)
    expect(sample(text, 'attach_storage_requests_total', { group: 'assets', route: 'attach/:action/:id', status: '404' })).toBe(1)
    expect(sample(text, 'attach_storage_request_duration_seconds_count', { group: 'assets', route: 'attach/:action/:id' })).toBe(3)
    expect(sample(text, 'attach_storage_bytes_total', { direction: 'in' })).toBe(photo.size)
    expect(sample(text, 'attach_storage_bytes_total', { direction: 'out' })).toBeGreaterThan(viewed)
    expect(sample(text, 'attach_storage_resize_duration_seconds_count')).toBe(1)
    expect(sample(text, 'attach_storage_resize_queue', { state: 'running' })).toBe(0)
    expect(sample(text, 'attach_storage_store_errors_total', { store: 'archive', operation: 'get' })).toBe(1)
    expect(sample(text, 'attach_storage_store_calls_total', { store: 'archive', operation: 'get' })).toBe(2)
    expect(sample(text, 'attach_storage_store_calls_total', { store: 'local', operation: 'put' })).toBeGreaterThanOrEqual(1)
    expect(text).toContain('# TYPE attach_storage_sweep_removed_total counter')
  })

  it('counts named-variant jobs by outcome and shows none waiting once they ran', async () => {
    const other = await makeKit('sqlite', {
      instrumentation: metrics.instrumentation,
      registrar: (registry) => {
        registry.registerCategory('demo', 'gallery', { variants: { thumb: { w: 30, h: 30 }, tiny: { w: 8 } } })
      },
    })
    try {
      await saveFile(other, await png(100, 50), 'a.png', '2', 'gallery')
      await saveFile(other, await png(6, 6), 'b.png', '2', 'gallery')
      await other.storage.variantJobsIdle()
      const text = await (await metrics.answer()).text()
      // a.png: thumb and tiny made; b.png: within both boxes, its original serves.
      expect(sample(text, 'attach_storage_variant_jobs_total', { outcome: 'made' })).toBe(2)
      expect(sample(text, 'attach_storage_variant_jobs_total', { outcome: 'original' })).toBe(2)
      expect(sample(text, 'attach_storage_variant_jobs_waiting')).toBe(0)
    } finally {
      await other.cleanup()
    }
  })
})

describe('OpenTelemetry spans, when the host has registered an SDK', () => {
  const exporter = new InMemorySpanExporter()
  const provider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(exporter)] })
  let kit: Kit
  beforeAll(async () => {
    context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable())
    trace.setGlobalTracerProvider(provider)
    kit = await makeKit('sqlite')
  })
  afterAll(async () => {
    await kit.cleanup()
    trace.disable()
    context.disable()
  })

  it('makes a span per request, named by its route, with the store calls inside it', async () => {
    const rec = await saveFile(kit, new Blob(['traced bytes']), 't.txt', '5')
    exporter.reset()
    expect(await (await kit.call(`/assets/storage/attach/view/${rec.id}`)).text()).toBe('traced bytes')
    const spans = exporter.getFinishedSpans()
    const request = spans.find((s) => s.name === 'GET assets attach/:action/:id')
    expect(request?.attributes['http.response.status_code']).toBe(200)
    const reads = spans.filter((s) => s.name.startsWith('store.'))
    expect(reads.length).toBeGreaterThan(0)
    expect(reads.every((s) => s.parentSpanContext?.spanId === request!.spanContext().spanId)).toBe(true)
    expect(reads[0]!.attributes['attach_storage.store']).toBe('local')
  })

  it('makes none when tracing is switched off', async () => {
    const quiet = await makeKit('sqlite', { tracing: false })
    try {
      const rec = await saveFile(quiet, new Blob(['x']), 'q.txt', '6')
      exporter.reset()
      await (await quiet.call(`/assets/storage/attach/view/${rec.id}`)).arrayBuffer()
      expect(exporter.getFinishedSpans()).toEqual([])
    } finally {
      await quiet.cleanup()
    }
  })
})
