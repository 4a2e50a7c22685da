/**
 * Repeats past the stored variants: a conditional request is answered 304 before any resize runs; a size
 * made and not stored is served from memory within `resize.memory-ttl` (at most `resize.memory-bytes`);
 * `resize.max-variants` counts per stored file, however many records point at it. The resizer's own
 * counters say how often it ran. Through the Web handlers, on a real database and a real local store.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { serveOnNode } from '../testing/front-servers.js'
import { type Kit, makeKit, saveFile, jpeg } from '../testing/handler-kit.js'
import { createFastViews } from '../node/index.js'
import { LocalStore } from '../stores/local-store.js'
import { Resizer } from './resize.js'

const ASSETS = '/assets/storage'
const API = '/api/storage'

describe('resizes past the stored variants', () => {
  let kit: Kit
  const get = (path: string, init: RequestInit = {}) => kit.handler.fetch(new Request(`http://x${ASSETS}${path}`, init))
  const generated = () => kit.storage.resizer.generated
  /** Every stored variant file of these records. */
  const variantsOf = async (...recs: Array<{ savedDir: string; id: number }>) => {
    const prefixes = recs.map((r) => `${r.savedDir.slice(1)}_v/${r.id}/`)
    return (await kit.files()).filter((f) => prefixes.some((p) => f.startsWith(p)))
  }

  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: { resize: { maxVariants: 2, memoryTtl: '10m' } } })
  })
  afterAll(async () => {
    await kit?.cleanup()
  })

  it('answers a conditional request 304 before any resize runs', async () => {
    const rec = await saveFile(kit, await jpeg(1200, 800), 'cond.jpg', '700', 'image')
    // The original's ETag is its sha256.
    const sha256 = JSON.parse((await get(`/attach/view/${rec.id}`)).headers.get('etag')!)
    const made = await get(`/attach/view/${rec.id}?w=300&format=webp`)
    expect(made.status).toBe(200)
    const etag = made.headers.get('etag')!
    expect(etag).toBe(`"${sha256}-300x0webp"`)
    await made.arrayBuffer()

    // A size never made, asked with its ETag: 304, no resize, nothing stored.
    const before = generated()
    const started = performance.now()
    const cond = await get(`/attach/view/${rec.id}?w=301&format=webp`, { headers: { 'if-none-match': `"${sha256}-301x0webp"` } })
    const ms = performance.now() - started
    expect(cond.status).toBe(304)
    expect(cond.headers.get('etag')).toBe(`"${sha256}-301x0webp"`)
    expect(cond.headers.get('content-type')).toBe('image/webp')
    expect(await cond.text()).toBe('')
    // By reference, and with If-Modified-Since by id (an immutable address): the same.
    const byRef = await get('/attach/view/demo/700/image/0?w=302', { headers: { 'if-none-match': `W/"${sha256}-302x0"` } })
    expect(byRef.status).toBe(304)
    const since = await get(`/attach/view/${rec.id}?w=303`, {
      headers: { 'if-modified-since': new Date(Date.now() + 60_000).toUTCString() },
    })
    expect(since.status).toBe(304)
    expect(generated()).toBe(before)
    expect((await variantsOf(rec)).map((f) => f.slice(f.lastIndexOf('/') + 1))).toEqual(['300x0.webp'])
    console.log(`conditional request of an unmade size: 304 in ${ms.toFixed(1)} ms, no resize`)

    // Another ETag is no match: the variant is made and answered.
    const other = await get(`/attach/view/${rec.id}?w=301&format=webp`, { headers: { 'if-none-match': `"${sha256}"` } })
    expect(other.status).toBe(200)
    expect((await sharp(Buffer.from(await other.arrayBuffer())).metadata()).width).toBe(301)
    expect(generated()).toBe(before + 1)
  })

  it('answers the 304 before any resize on the Node fast path too (what the reference server serves views by id with)', async () => {
    const rec = await saveFile(kit, await jpeg(1200, 800), 'fast.jpg', '704', 'image')
    const sha256 = JSON.parse((await get(`/attach/view/${rec.id}`)).headers.get('etag')!)
    const server = await serveOnNode(kit.handler.fetch, { fast: createFastViews(kit.storage) })
    try {
      const before = generated()
      const res = await fetch(`${server.url}${ASSETS}/attach/view/${rec.id}?w=400&format=webp`, {
        headers: { 'if-none-match': `"${sha256}-400x0webp"` },
      })
      expect(res.status).toBe(304)
      expect(res.headers.get('etag')).toBe(`"${sha256}-400x0webp"`)
      expect(generated()).toBe(before)
      const made = await fetch(`${server.url}${ASSETS}/attach/view/${rec.id}?w=400&format=webp`)
      expect(made.status).toBe(200)
      expect(made.headers.get('etag')).toBe(`"${sha256}-400x0webp"`)
      await made.arrayBuffer()
      expect(generated()).toBe(before + 1)
    } finally {
      await server.stop()
    }
  })

  it('serves a size made and not stored from memory within resize.memory-ttl, and makes it again after', async () => {
    const rec = await saveFile(kit, await jpeg(1200, 800), 'repeat.jpg', '701', 'image')
    for (const w of [100, 101]) expect((await get(`/attach/view/${rec.id}?w=${w}`)).status).toBe(200)
    expect(await variantsOf(rec)).toHaveLength(2)
    const before = { generated: generated(), transient: kit.storage.resizer.transient }
    const first = await get(`/attach/view/${rec.id}?w=102&format=webp`)
    const bytes = Buffer.from(await first.arrayBuffer())
    expect(generated()).toBe(before.generated + 1)
    expect(kit.storage.resizer.transient).toBe(before.transient + 1)
    expect(kit.storage.resizer.keptBytes).toBeGreaterThanOrEqual(bytes.length)
    // Repeated: the same bytes, no resize, still not stored.
    for (let i = 0; i < 5; i++) {
      const again = await get(`/attach/view/${rec.id}?w=102&format=webp`)
      expect(again.status).toBe(200)
      expect(again.headers.get('etag')).toBe(first.headers.get('etag'))
      expect(Buffer.from(await again.arrayBuffer()).equals(bytes)).toBe(true)
    }
    expect(generated()).toBe(before.generated + 1)
    expect(await variantsOf(rec)).toHaveLength(2)
    // Eleven minutes later it is made again.
    const now = performance.now()
    const clock = vi.spyOn(performance, 'now').mockImplementation(() => now + 11 * 60_000)
    try {
      expect((await get(`/attach/view/${rec.id}?w=102&format=webp`)).status).toBe(200)
      expect(generated()).toBe(before.generated + 2)
    } finally {
      clock.mockRestore()
    }
  })

  it('stores at most resize.max-variants variants for one file, however many records point at it', async () => {
    const rec = await saveFile(kit, await jpeg(900, 600), 'shared.jpg', '702', 'image')
    const reuse = Array.from({ length: 4 }, (_, i) => ({ savedName: rec.savedName, savedDir: rec.savedDir, displayName: `copy-${i}.jpg` }))
    const res = await kit.call(`${API}/attach/demo/703`, { method: 'POST', body: JSON.stringify({ image: reuse }) })
    expect(res.status).toBe(200)
    const records = [rec, ...(await res.json()).attachList]
    expect(records).toHaveLength(5)
    for (const r of records) {
      for (const w of [150, 151, 152, 153]) {
        const view = await get(`/attach/view/${r.id}?w=${w}`)
        expect(view.status).toBe(200)
        expect((await sharp(Buffer.from(await view.arrayBuffer())).metadata()).width).toBe(w)
      }
    }
    const stored = await variantsOf(...records)
    console.log(`5 records of one file, 4 sizes each: ${stored.length} variants stored`)
    expect(stored).toHaveLength(2)

    // The record holding them is deleted (its variants with it): the file's count is taken again.
    const holder = records.find((r) => stored.some((f) => f.includes(`_v/${r.id}/`)))!
    const del = await kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id: holder.id }]) })
    expect(del.status).toBe(200)
    const rest = records.filter((r) => r.id !== holder.id)
    expect(await variantsOf(...rest)).toHaveLength(stored.filter((f) => !f.includes(`_v/${holder.id}/`)).length)
    for (const w of [160, 161, 162]) expect((await get(`/attach/view/${rest[0].id}?w=${w}`)).status).toBe(200)
    expect(await variantsOf(...rest)).toHaveLength(2)
  })
})

describe('Resizer memory of unstored sizes', () => {
  let dir: string
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-kept-'))
  })
  afterAll(async () => {
    await rm(dir, { recursive: true, force: true })
  })

  it('keeps at most memoryBytes, the least recently served going first', async () => {
    const store = new LocalStore('local', { baseDir: dir })
    await store.put('a/orig.jpg', Buffer.from(await (await jpeg(800, 600)).arrayBuffer()), { contentType: 'image/jpeg' })
    const probe = new Resizer({ maxInputPixels: 1e8, maxVariants: 0 })
    const req = (w: number) => ({ w, h: undefined, format: 'png' as const, negotiated: false })
    const one = await probe.variant(store, 'a/orig.jpg', 'a/_v/1/probe', 'image/jpeg', req(200), () => {})
    // Room for two sizes of about that one's size, not three.
    const resizer = new Resizer({ maxInputPixels: 1e8, maxVariants: 0, memoryBytes: Math.floor(one!.size * 2.5) })
    const view = (w: number) => resizer.variant(store, 'a/orig.jpg', `a/_v/1/${w}x0.png`, 'image/jpeg', req(w), () => {})
    await view(200)
    await view(201)
    expect(resizer.generated).toBe(2)
    await view(200) // served from memory; 200 is now the most recently served
    expect(resizer.generated).toBe(2)
    await view(202) // evicts 201
    expect(resizer.generated).toBe(3)
    expect(resizer.keptBytes).toBeLessThanOrEqual(Math.floor(one!.size * 2.5))
    await view(200)
    await view(202)
    expect(resizer.generated).toBe(3)
    await view(201)
    expect(resizer.generated).toBe(4)
    // memoryBytes 0 keeps nothing.
    const none = new Resizer({ maxInputPixels: 1e8, maxVariants: 0, memoryBytes: 0 })
    for (let i = 0; i < 3; i++) await none.variant(store, 'a/orig.jpg', 'a/_v/1/200x0.png', 'image/jpeg', req(200), () => {})
    expect(none.generated).toBe(3)
    expect(none.keptBytes).toBe(0)
    await store.close()
  })
})
