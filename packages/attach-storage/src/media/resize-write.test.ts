/**
 * A made variant is answered from its bytes while it is written to its store: the write holds no resize
 * slot and delays no answer, yet it is bounded (it counts against the queue), shared (an identical view
 * or a HEAD meanwhile gets the same variant, made once), waited for by whatever deletes the record's
 * variants and by `close()`, and a store that refuses it costs a warning and a new resize next time.
 * Real SQLite and the real local store; its `put` is held or made to fail for variant keys only.
 */
import { readdir } from 'node:fs/promises'
import { join, relative } from 'node:path'
import sharp, { type Sharp } from 'sharp'
import { afterAll, afterEach, beforeAll, describe, expect, it, vi } from 'vitest'
import { LocalStore } from '../stores/local-store.js'
import { jpeg, type Kit, makeKit, saveFile } from '../testing/handler-kit.js'

const API = '/api/storage'
const ASSETS = '/assets/storage'

/** Held variant writes: each waits until released, or fails with `fail`. */
const gate = { held: false, fail: undefined as Error | undefined, waiting: [] as Array<() => void>, started: 0 }
const release = () => {
  gate.held = false
  for (const go of gate.waiting.splice(0)) go()
}
const realPut = LocalStore.prototype.put
vi.spyOn(LocalStore.prototype, 'put').mockImplementation(async function (this: LocalStore, key, body, options) {
  if (key.includes('/_v/')) {
    gate.started++
    if (gate.fail) throw gate.fail
    if (gate.held) await new Promise<void>((go) => gate.waiting.push(go))
  }
  return realPut.call(this, key, body, options)
})

/** Files under a directory as they are now (not waiting for writes in flight, as `kit.files()` does). */
async function filesNow(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true }).catch(() => [])
  return entries.filter((e) => e.isFile()).map((e) => relative(dir, join(e.parentPath, e.name)))
}

const width = async (res: Response) => (await sharp(Buffer.from(await res.arrayBuffer())).metadata()).width

describe('a variant is answered before it is written', () => {
  let kit: Kit
  const get = (path: string, init: RequestInit = {}) => kit.handler.fetch(new Request(`http://x${ASSETS}${path}`, init))
  const variantsNow = async (rec: { savedDir: string; id: number }) =>
    (await filesNow(kit.baseDir)).filter((f) => f.startsWith(`${rec.savedDir.slice(1)}_v/${rec.id}/`))

  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: { resize: { concurrency: 1, queue: 2 } } })
  })
  afterEach(async () => {
    gate.fail = undefined
    release()
    await kit.storage.resizer.settled()
  })
  afterAll(async () => {
    await kit?.cleanup()
  })

  it('answers the first view while its write is held; an identical view and a HEAD meanwhile share it; the file lands after', async () => {
    const rec = await saveFile(kit, await jpeg(600, 400), 'held.jpg', '950', 'image')
    const generated = kit.storage.resizer.generated
    gate.held = true
    const first = await get(`/attach/view/${rec.id}?w=120`)
    expect(first.status).toBe(200)
    const bytes = Buffer.from(await first.arrayBuffer())
    expect((await sharp(bytes).metadata()).width).toBe(120)
    expect(gate.waiting).toHaveLength(1)
    expect(await variantsNow(rec)).toEqual([])

    const again = await get(`/attach/view/${rec.id}?w=120`)
    expect(Buffer.from(await again.arrayBuffer())).toEqual(bytes)
    const head = await get(`/attach/view/${rec.id}?w=120`, { method: 'HEAD' })
    expect(head.headers.get('content-length')).toBe(String(bytes.length))
    expect(head.headers.get('etag')).toBe(first.headers.get('etag'))
    expect(kit.storage.resizer.generated).toBe(generated + 1)

    release()
    await kit.storage.resizer.settled()
    expect(await variantsNow(rec)).toEqual([expect.stringMatching(/\/120x0$/)])
    // Found in its store from now on: nothing made again.
    expect(Buffer.from(await (await get(`/attach/view/${rec.id}?w=120`)).arrayBuffer())).toEqual(bytes)
    expect(kit.storage.resizer.generated).toBe(generated + 1)
  })

  it('a HEAD while the variant is still being made does not wait for it: the original’s headers', async () => {
    const rec = await saveFile(kit, await jpeg(600, 400), 'making.jpg', '957', 'image')
    let go: () => void = () => {}
    const making = new Promise<void>((r) => {
      go = r
    })
    const realToBuffer = sharp.prototype.toBuffer
    const held = vi.spyOn(sharp.prototype, 'toBuffer').mockImplementation(async function (this: Sharp, ...args: unknown[]) {
      await making
      return (realToBuffer as (...a: unknown[]) => Promise<Buffer>).apply(this, args)
    } as typeof realToBuffer)
    try {
      const view = get(`/attach/view/${rec.id}?w=170`)
      await vi.waitFor(() => expect(kit.storage.resizer.load.active).toBe(1))
      const head = await get(`/attach/view/${rec.id}?w=170`, { method: 'HEAD' })
      expect(head.headers.get('content-length')).toBe(String(rec.fileSize))
      go()
      const made = await view
      const bytes = Buffer.from(await made.arrayBuffer())
      expect((await sharp(bytes).metadata()).width).toBe(170)
      expect((await get(`/attach/view/${rec.id}?w=170`, { method: 'HEAD' })).headers.get('content-length')).toBe(String(bytes.length))
    } finally {
      go()
      held.mockRestore()
    }
  })

  it('gives the resize slot back before the write: with every write held, other sizes are still made', async () => {
    const rec = await saveFile(kit, await jpeg(600, 400), 'slots.jpg', '951', 'image')
    gate.held = true
    // concurrency 1: were the slot held through the write, the second size would wait for the first.
    for (const w of [100, 110]) {
      const res = await get(`/attach/view/${rec.id}?w=${w}`)
      expect(res.status).toBe(200)
      expect(await width(res)).toBe(w)
    }
    expect(kit.storage.resizer.load).toEqual({ active: 0, waiting: 0 })
    expect(gate.waiting).toHaveLength(2)
    release()
    await kit.storage.resizer.settled()
    expect((await variantsNow(rec)).map((f) => f.slice(f.lastIndexOf('/') + 1)).sort()).toEqual(['100x0', '110x0'])
  })

  it('counts writes in flight against the queue: past concurrency + queue (3), 503 busy with Retry-After', async () => {
    const rec = await saveFile(kit, await jpeg(600, 400), 'queue.jpg', '952', 'image')
    gate.held = true
    for (const w of [200, 210, 220]) expect((await get(`/attach/view/${rec.id}?w=${w}`)).status).toBe(200)
    const refused = await get(`/attach/view/${rec.id}?w=230`)
    expect(refused.status).toBe(503)
    expect(refused.headers.get('retry-after')).toBe('2')
    expect(await refused.json()).toEqual({ code: 'busy', message: expect.stringMatching(/resized/) })
    release()
    await kit.storage.resizer.settled()
    expect(await width(await get(`/attach/view/${rec.id}?w=230`))).toBe(230)
    expect(await variantsNow(rec)).toHaveLength(4)
  })

  it('a record deleted while its variant is written keeps no variant file: the delete waits for the write', async () => {
    const rec = await saveFile(kit, await jpeg(600, 400), 'deleted.jpg', '953', 'image')
    gate.held = true
    expect((await get(`/attach/view/${rec.id}?w=140`)).status).toBe(200)
    const del = kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id: rec.id }]) })
    // The delete is under way (the record is gone for readers) while the write is held.
    await vi.waitFor(async () => expect((await get(`/attach/view/${rec.id}`)).status).toBe(404))
    release()
    expect((await del).status).toBe(200)
    expect(await variantsNow(rec)).toEqual([])
  })

  it('a write the store refuses: the view is still answered, a warning names it, and the next view makes and stores it', async () => {
    const rec = await saveFile(kit, await jpeg(600, 400), 'refused.jpg', '954', 'image')
    const generated = kit.storage.resizer.generated
    gate.fail = new Error('disk full')
    const res = await get(`/attach/view/${rec.id}?w=150`)
    expect(res.status).toBe(200)
    expect(await width(res)).toBe(150)
    await kit.storage.resizer.settled()
    expect(kit.warnings.some((w) => /variant .*_v\/\d+\/150x0 was served but could not be stored/.test(w))).toBe(true)
    expect(await variantsNow(rec)).toEqual([])

    gate.fail = undefined
    const again = await get(`/attach/view/${rec.id}?w=150`)
    expect(await width(again)).toBe(150)
    expect(kit.storage.resizer.generated).toBe(generated + 2)
    await kit.storage.resizer.settled()
    expect(await variantsNow(rec)).toEqual([expect.stringMatching(/\/150x0$/)])
  })

  it('a named variant is written before it is answered (it is recorded as made): a view meanwhile waits for the write', async () => {
    const named = await makeKit('sqlite', {
      config: { domains: { demo: { categories: { image: { filters: ['image'], variants: { small: { w: 90 } } } } } } },
    })
    try {
      gate.held = true
      // The save queues the variant's job; its write is held.
      const rec = await saveFile(named, await jpeg(600, 400), 'named.jpg', '955', 'image')
      await vi.waitFor(() => expect(gate.waiting).toHaveLength(1))
      let answered = false
      const view = named.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${rec.id}?variant=small`)).finally(() => {
        answered = true
      })
      await new Promise((r) => setTimeout(r, 150))
      expect(answered).toBe(false)
      release()
      const res = await view
      expect(res.status).toBe(200)
      expect(await width(res)).toBe(90)
      await named.storage.variantJobsIdle()
      expect((await named.files()).filter((f) => f.includes(`_v/${rec.id}/`))).toEqual([expect.stringMatching(/\/90x0$/)])
    } finally {
      release()
      await named.cleanup()
    }
  })

  it('close() waits for the variants still being written before closing the stores', async () => {
    const own = await makeKit('sqlite')
    try {
      const rec = await saveFile(own, await jpeg(600, 400), 'closing.jpg', '956', 'image')
      gate.held = true
      const res = await own.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${rec.id}?w=160`))
      expect(res.status).toBe(200)
      let closed = false
      const closing = own.storage.close().then(() => {
        closed = true
      })
      await new Promise((r) => setTimeout(r, 150))
      expect(closed).toBe(false)
      release()
      await closing
      expect((await filesNow(own.baseDir)).filter((f) => f.includes(`_v/${rec.id}/`))).toEqual([expect.stringMatching(/\/160x0$/)])
    } finally {
      release()
      await own.cleanup()
    }
  })
})
