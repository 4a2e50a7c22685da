/**
 * The bounds on the work a caller can make the resizer do: stored variants per attachment, resizes at
 * once with a bounded queue (503 + Retry-After past it), per-category allowed sizes, and HEAD making
 * nothing. Through the Web handlers, on a real database and a real local store.
 */
import { PassThrough, type Readable } from 'node:stream'
import sharp from 'sharp'
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { makeKit, saveFile, type Kit, jpeg } from '../testing/handler-kit.js'
import type { Store } from '../stores/store.js'
import { Resizer } from './resize.js'

const ASSETS = '/assets/storage'

const dims = async (res: Response) => {
  const m = await sharp(Buffer.from(await res.arrayBuffer())).metadata()
  return [m.width, m.height, m.format]
}

/** A store whose reads wait until `release()`: holds resizes in flight for as long as a test needs. */
function blockingStore(): Store & { release(): void } {
  const waiting: Array<() => void> = []
  let released = false
  const missing = async () => {
    throw Object.assign(new Error('missing'), { code: 'not-found' })
  }
  return {
    name: 'blocking',
    type: 'test',
    put: async () => ({ size: 0 }),
    get: async (): Promise<Readable> => {
      if (!released) await new Promise<void>((resolve) => waiting.push(resolve))
      const s = new PassThrough()
      s.end(Buffer.from('not an image'))
      return s
    },
    stat: missing,
    exists: async () => false,
    move: missing,
    copy: missing,
    delete: async () => {},
    list: async function* () {},
    close: async () => {},
    release() {
      released = true
      for (const w of waiting.splice(0)) w()
    },
  }
}

describe('resize bounds', () => {
  let kit: Kit
  const get = (path: string, init: RequestInit = {}) => kit.handler.fetch(new Request(`http://x${ASSETS}${path}`, init))
  const variantsOf = async (rec: { savedDir: string; id: number }) => {
    const prefix = `${rec.savedDir.slice(1)}_v/${rec.id}/`
    return (await kit.files()).filter((f) => f.startsWith(prefix))
  }

  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      config: { resize: { concurrency: 2, queue: 16 } },
      registrar: async (registry) => {
        registry.registerCategory('demo', 'thumbs', { filters: ['image'], sizes: [{ w: 100, h: 100 }, { w: 300 }] })
      },
    })
  })
  afterAll(async () => {
    await kit?.cleanup()
  })

  it('stores at most resize.max-variants (16) variants per attachment; further sizes are made and served, not stored', async () => {
    const rec = await saveFile(kit, await jpeg(400, 400), 'many.jpg', '900', 'image')
    const before = kit.storage.resizer.transient
    const widths = Array.from({ length: 120 }, (_, i) => 100 + i)
    // Sixteen distinct first requests at a time: within concurrency + queue, so none is refused, and the
    // first batch races for the sixteen slots.
    for (let i = 0; i < widths.length; i += 16) {
      const batch = widths.slice(i, i + 16)
      const answers = await Promise.all(batch.map((w) => get(`/attach/view/${rec.id}?w=${w}`)))
      for (const [j, res] of answers.entries()) {
        expect(res.status).toBe(200)
        const w = batch[j]!
        expect(await dims(res)).toEqual([w, w, 'jpeg'])
      }
    }
    expect(await variantsOf(rec)).toHaveLength(16)
    expect(kit.storage.resizer.transient - before).toBe(104)
    // A stored size is served from the store, an unstored one made lately from memory (within
    // resize.memory-ttl, see resize-repeat.test.ts); both are the right image, and neither is made again.
    const generated = kit.storage.resizer.generated
    expect(await dims(await get(`/attach/view/${rec.id}?w=100`))).toEqual([100, 100, 'jpeg'])
    expect(kit.storage.resizer.generated).toBe(generated)
    expect(await dims(await get(`/attach/view/${rec.id}?w=219`))).toEqual([219, 219, 'jpeg'])
    expect(kit.storage.resizer.generated).toBe(generated)
    expect(await variantsOf(rec)).toHaveLength(16)
  })

  it('holds the limit when every first request arrives at once', async () => {
    const k = await makeKit('sqlite', { config: { resize: { maxVariants: 3, concurrency: 4, queue: 40 } } })
    try {
      const rec = await saveFile(k, await jpeg(300, 300), 'race.jpg', '1', 'image')
      const answers = await Promise.all(
        Array.from({ length: 30 }, (_, i) => k.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${rec.id}?w=${50 + i}`))),
      )
      for (const [i, res] of answers.entries()) expect(await dims(res)).toEqual([50 + i, 50 + i, 'jpeg'])
      const prefix = `${rec.savedDir.slice(1)}_v/${rec.id}/`
      expect((await k.files()).filter((f) => f.startsWith(prefix))).toHaveLength(3)
    } finally {
      await k.cleanup()
    }
  })

  it('answers 503 busy with Retry-After past resize.concurrency + resize.queue, and resizes again once there is room', async () => {
    const rec = await saveFile(kit, await jpeg(300, 200), 'busy.jpg', '901', 'image')
    const store = blockingStore()
    // Two resizes run and sixteen wait: the queue is full.
    const held = Array.from({ length: 18 }, (_, i) =>
      kit.storage.resizer.variant(
        store,
        'orig',
        `v/${i}`,
        'image/jpeg',
        { w: 10 + i, h: undefined, format: undefined, negotiated: false },
        () => {},
      ),
    )
    await new Promise((r) => setTimeout(r, 0))
    expect(kit.storage.resizer.load).toEqual({ active: 2, waiting: 16 })
    const res = await get(`/attach/view/${rec.id}?w=50`)
    expect(res.status).toBe(503)
    expect(res.headers.get('retry-after')).toMatch(/^\d+$/)
    expect(res.headers.get('content-type')).toContain('application/json')
    const body = await res.json()
    expect(body.code).toBe('busy')
    expect(typeof body.message).toBe('string')
    // A view of a variant that exists, and a view without resize, need no slot.
    expect((await get(`/attach/view/${rec.id}`)).status).toBe(200)
    store.release()
    await Promise.all(held)
    expect(kit.storage.resizer.load).toEqual({ active: 0, waiting: 0 })
    expect(await dims(await get(`/attach/view/${rec.id}?w=50`))).toEqual([50, 33, 'jpeg'])
  })

  it('refuses the Resizer past its queue, without caching the refusal', async () => {
    const r = new Resizer({ maxInputPixels: 1e8, concurrency: 1, queue: 1 })
    const store = blockingStore()
    const req = (w: number) => ({ w, h: undefined, format: undefined, negotiated: false })
    const a = r.variant(store, 'o', 'v/1', 'image/jpeg', req(1), () => {})
    const b = r.variant(store, 'o', 'v/2', 'image/jpeg', req(2), () => {})
    // Identical to one in flight: shares it, needs no room.
    const a2 = r.variant(store, 'o', 'v/1', 'image/jpeg', req(1), () => {})
    await expect(r.variant(store, 'o', 'v/3', 'image/jpeg', req(3), () => {})).rejects.toMatchObject({ code: 'busy', status: 503 })
    store.release()
    await Promise.all([a, b, a2])
    // The same size is tried again once there is room (here: the original is not an image).
    const errors: unknown[] = []
    expect(await r.variant(store, 'o', 'v/3', 'image/jpeg', req(3), (e) => errors.push(e))).toBeUndefined()
    expect(errors).toHaveLength(1)
  })

  it("answers 400 size-not-allowed to a size outside the category's sizes", async () => {
    const rec = await saveFile(kit, await jpeg(600, 400), 'thumb.jpg', '902', 'thumbs')
    expect(await dims(await get(`/attach/view/${rec.id}?w=100&h=100`))).toEqual([100, 67, 'jpeg'])
    expect(await dims(await get(`/attach/view/${rec.id}?w=300`))).toEqual([300, 200, 'jpeg'])
    expect(await dims(await get('/attach/view/demo/902/thumbs/0?w=300'))).toEqual([300, 200, 'jpeg'])
    for (const q of ['w=101', 'w=100', 'h=100', 'w=300&h=100', 'w=100&h=99']) {
      const res = await get(`/attach/view/${rec.id}?${q}`)
      expect(res.status, q).toBe(400)
      const body = await res.json()
      expect(body.code).toBe('size-not-allowed')
      expect(body.message).toContain('w=100&h=100')
    }
    expect((await get('/attach/view/demo/902/thumbs/0?w=101')).status).toBe(400)
    // No size asked: the original.
    expect(await dims(await get(`/attach/view/${rec.id}`))).toEqual([600, 400, 'jpeg'])
    expect(await variantsOf(rec)).toHaveLength(2)
    // A category without sizes takes any size within 1..4096.
    const free = await saveFile(kit, await jpeg(600, 400), 'free.jpg', '903', 'image')
    expect(await dims(await get(`/attach/view/${free.id}?w=101`))).toEqual([101, 67, 'jpeg'])
  })

  it('makes no variant on HEAD: the original’s headers until a GET makes it, then the variant’s', async () => {
    const rec = await saveFile(kit, await jpeg(500, 500), 'head.jpg', '904', 'image')
    const generated = kit.storage.resizer.generated
    const head = await get(`/attach/view/${rec.id}?w=120`, { method: 'HEAD' })
    expect(head.status).toBe(200)
    expect(await head.text()).toBe('')
    expect(head.headers.get('content-length')).toBe(String(rec.fileSize))
    expect(head.headers.get('etag')).toBe((await get(`/attach/view/${rec.id}`)).headers.get('etag'))
    expect(await variantsOf(rec)).toEqual([])
    expect(kit.storage.resizer.generated).toBe(generated)
    // Many HEADs of many sizes still make nothing.
    for (let w = 10; w < 40; w++) expect((await get(`/attach/view/${rec.id}?w=${w}`, { method: 'HEAD' })).status).toBe(200)
    expect(await variantsOf(rec)).toEqual([])
    expect(kit.storage.resizer.generated).toBe(generated)

    const made = await get(`/attach/view/${rec.id}?w=120`)
    const bytes = Buffer.from(await made.arrayBuffer())
    expect(await variantsOf(rec)).toHaveLength(1)
    const again = await get(`/attach/view/${rec.id}?w=120`, { method: 'HEAD' })
    expect(again.status).toBe(200)
    expect(again.headers.get('content-length')).toBe(String(bytes.length))
    expect(again.headers.get('etag')).toBe(made.headers.get('etag'))
    expect(again.headers.get('content-type')).toBe('image/jpeg')
  })

  it('looks again for a known variant after 30 s: one removed by another process is made again, not a 404', async () => {
    const rec = await saveFile(kit, await jpeg(1200, 800), 'purged.jpg', '903', 'image')
    const big = `/attach/view/${rec.id}?w=1100&format=png`
    expect((await get(big)).status).toBe(200)
    const [file] = await variantsOf(rec)
    expect(file).toBeDefined()
    const generated = kit.storage.resizer.generated
    // What `attach-storage variants purge` does from its own process.
    await rm(join(kit.baseDir, file!))
    const now = performance.now()
    const clock = vi.spyOn(performance, 'now').mockImplementation(() => now + 31_000)
    try {
      const again = await get(big)
      expect(again.status).toBe(200)
      expect((await dims(again))[0]).toBe(1100)
      expect(kit.storage.resizer.generated).toBe(generated + 1)
      expect(await variantsOf(rec)).toHaveLength(1)
    } finally {
      clock.mockRestore()
    }
  })
})
