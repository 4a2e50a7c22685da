import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AttachStorageError } from '../errors.js'
import { LocalStore } from '../stores/local-store.js'
import type { Store } from '../stores/store.js'
import { createHealthHandlers } from './health.js'
import { type Kit, makeKit } from '../testing/handler-kit.js'

/** A local store whose `exists` fails (`down`) or never answers (`hung`) while its mode says so. */
function flakyStore(dir: string, mode: { now: 'up' | 'down' | 'hung' }): Store {
  const local = new LocalStore('archive', { baseDir: dir })
  return Object.assign(Object.create(local) as Store, {
    name: 'archive',
    type: 'flaky',
    exists: (key: string) => {
      if (mode.now === 'down') return Promise.reject(new AttachStorageError('store-failure', 'connect ECONNREFUSED 127.0.0.1:9'))
      if (mode.now === 'hung') return new Promise<boolean>(() => {})
      return local.exists(key)
    },
  })
}

describe('health answers', () => {
  let kit: Kit
  let dir: string
  const mode: { now: 'up' | 'down' | 'hung' } = { now: 'up' }
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-health-'))
    kit = await makeKit('sqlite', { stores: { archive: flakyStore(dir, mode) } })
  })
  afterAll(async () => {
    await kit.cleanup()
    await rm(dir, { recursive: true, force: true })
  })

  it('healthz answers 200 JSON, never cached', async () => {
    const res = createHealthHandlers(kit.storage).healthz()
    expect([res.status, res.headers.get('cache-control'), await res.json()]).toEqual([200, 'no-store', { status: 'ok' }])
  })

  it('readyz answers 200 while the database and every store answer, 503 naming the store that does not, 200 again after', async () => {
    // maxAgeMs 0: each answer below is a fresh check (the default reuses one for a second).
    const health = createHealthHandlers(kit.storage, { timeoutMs: 300, maxAgeMs: 0 })
    const up = await health.readyz()
    const body = await up.json()
    expect([up.status, body.status, body.database.ok]).toEqual([200, 'ready', true])
    expect(Object.keys(body.stores).sort()).toEqual(['archive', 'local', 'tmp'])
    expect(Object.values(body.stores).every((s) => (s as { ok: boolean }).ok)).toBe(true)

    mode.now = 'down'
    const down = await health.readyz()
    const failed = await down.json()
    expect([down.status, failed.status, failed.stores.archive.ok, failed.stores.local.ok]).toEqual([503, 'not-ready', false, true])
    expect(failed.stores.archive.error).toContain('ECONNREFUSED')

    // A store that never answers fails the check within the time limit, not after it.
    mode.now = 'hung'
    const started = Date.now()
    const hung = await health.readyz()
    expect(hung.status).toBe(503)
    expect(Date.now() - started).toBeLessThan(2000)
    expect((await hung.json()).stores.archive.error).toMatch(/no answer within 300 ms/)

    mode.now = 'up'
    expect((await health.readyz()).status).toBe(200)
    expect(kit.warnings.some((w) => w.includes('not ready: archive'))).toBe(true)
  })

  it('readyz shares one check: 50 probes at once ask each store and the database once, and again only after maxAgeMs', async () => {
    const other = await makeKit('sqlite', { stores: { archive: flakyStore(dir, { now: 'up' }) } })
    try {
      const calls: Record<string, number> = {}
      const count = <T extends object>(name: string, target: T, method: keyof T) => {
        const original = (target[method] as (...a: unknown[]) => unknown).bind(target)
        calls[name] = 0
        Object.assign(target, {
          [method]: (...a: unknown[]) => {
            calls[name]!++
            return original(...a)
          },
        })
      }
      count('archive', other.storage.store('archive'), 'exists')
      count('local', other.storage.store('local'), 'exists')
      count('tmp', other.storage.tmpStore, 'exists')
      count('database', other.storage.repository, 'ping')
      const health = createHealthHandlers(other.storage, { maxAgeMs: 300 })
      const answers = await Promise.all(Array.from({ length: 50 }, () => health.readyz()))
      expect(answers.map((r) => r.status)).toEqual(Array(50).fill(200))
      expect(calls).toEqual({ archive: 1, local: 1, tmp: 1, database: 1 })
      // Within maxAgeMs the answer is reused; after it, asked again (once).
      expect((await health.readyz()).status).toBe(200)
      expect(calls.archive).toBe(1)
      await new Promise((r) => setTimeout(r, 350))
      await Promise.all(Array.from({ length: 10 }, () => health.readyz()))
      expect(calls).toEqual({ archive: 2, local: 2, tmp: 2, database: 2 })
    } finally {
      await other.cleanup()
    }
  })

  it('readyz answers 503 once the service is closed (its database gone)', async () => {
    const other = await makeKit('sqlite')
    await other.storage.close()
    const res = await createHealthHandlers(other.storage).readyz()
    expect(res.status).toBe(503)
    expect((await res.json()).status).toBe('not-ready')
    await other.cleanup().catch(() => undefined)
  })
})
