/**
 * The confirmed save of a temporary file, interrupted at each of its steps (the test-only pause point
 * throws, as a crash would stop it: nothing after that step runs), then retried; who may commit a
 * temporary file; the target category's filters on a `savedDir` reuse; the sweep of partial files.
 */
import { readFile, utimes, writeFile, mkdir } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeKit, png, type Kit } from '../testing/handler-kit.js'

const API = '/api/storage'
const text = (s: string, type = 'text/plain') => new Blob([s], { type })
type Step = 'reserved' | 'moved' | 'recorded' | 'done'

describe('confirmed save: a crash at any step, then the retry of the same request', () => {
  let kit: Kit
  /** The step at which the next save "crashes" (once). */
  let crashAt: Step | undefined
  let clock = new Date('2026-11-30T23:59:00Z')
  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      now: () => clock,
      testPause: (step) => {
        if (step !== crashAt) return
        crashAt = undefined
        throw new Error(`killed at ${step}`)
      },
    })
  })
  afterAll(async () => {
    await kit?.cleanup()
  })

  async function tmpUpload(blob: Blob, name: string, user?: string, refCategory = 'default') {
    const res = await kit.upload(
      `${API}/attach/tmp`,
      [
        ['refDomain', 'demo'],
        ['refCategory', refCategory],
        ['file', blob, name],
      ],
      user,
    )
    expect(res.status).toBe(200)
    return ((await res.json()) as { files: Array<Record<string, any>> }).files[0]!
  }
  const save = (refKey: string, bag: unknown, user?: string) =>
    kit.call(`${API}/attach/demo/${refKey}`, { method: 'POST', body: JSON.stringify(bag), user })
  /** Blobs at ref_count 0 or below, whatever their age (pending, retired or orphaned). */
  const pendingRows = () => kit.storage.repository.listDeadBlobs(new Date(Date.now() + 86_400_000).toISOString(), 100)

  for (const step of ['reserved', 'moved', 'recorded', 'done'] as const) {
    it(`completes the save on retry after a crash once ${step}, with one record and nothing left over`, async () => {
      clock = new Date('2026-11-30T23:59:00Z')
      const t = await tmpUpload(text(`bytes of ${step}`), `${step}.txt`)
      const refKey = `crash-${step}`
      const bag = { default: [{ savedName: t.name, displayName: `${step}.txt` }] }
      crashAt = step
      const first = await save(refKey, bag)
      expect(first.status).toBe(500)
      expect(crashAt).toBeUndefined()

      // The retry runs in the next month: the pending blob keeps its place.
      clock = new Date('2026-12-01T00:01:00Z')
      const retry = await save(refKey, bag)
      const body = await retry.json()
      expect(retry.status, JSON.stringify(body)).toBe(200)
      expect(body.attachList).toHaveLength(1)
      const rec = body.attachList[0]
      expect(rec).toMatchObject({ savedName: t.name, savedDir: `/demo/2026/11/${refKey}/`, createdBy: 7 })
      expect(await readFile(join(kit.baseDir, 'demo', '2026', '11', refKey, t.name), 'utf8')).toBe(`bytes of ${step}`)
      // A third send of the same request answers the same record, never a second one.
      const again = await save(refKey, bag)
      expect(again.status).toBe(200)
      expect((await again.json()).attachList.map((r: { id: number }) => r.id)).toEqual([rec.id])
      expect(await kit.storage.repository.listByReference('demo', refKey)).toHaveLength(1)
      expect(await kit.files(kit.tmpDir)).toEqual([])
      expect((await kit.files()).filter((f) => f.includes(t.name))).toEqual([join('demo', '2026', '11', refKey, t.name)])
      expect(await pendingRows()).toEqual([])
    })
  }

  it('gives up the pending blob of a crashed save when the retry names another reference', async () => {
    clock = new Date('2026-11-15T12:00:00Z')
    const t = await tmpUpload(text('moved once'), 'm.txt')
    crashAt = 'moved'
    expect((await save('first-try', { default: [{ savedName: t.name }] })).status).toBe(500)
    expect(await kit.files()).toContain(join('demo', '2026', '11', 'first-try', t.name))
    const res = await save('second-try', { default: [{ savedName: t.name }] })
    expect(res.status).toBe(200)
    const files = (await kit.files()).filter((f) => f.includes(t.name))
    expect(files).toEqual([join('demo', '2026', '11', 'second-try', t.name)])
    expect(await kit.storage.repository.listByReference('demo', 'first-try')).toEqual([])
    const rows = await kit.storage.repository.findBlobsByTmpName(t.name)
    expect(rows.map((b) => [b.savedDir, b.refCount])).toEqual([['/demo/2026/11/second-try/', 1]])
  })

  it('refuses a second reference once the first has its record, without a duplicate', async () => {
    clock = new Date('2026-11-15T12:00:00Z')
    const t = await tmpUpload(text('recorded once'), 'r.txt')
    crashAt = 'recorded'
    expect((await save('owner', { default: [{ savedName: t.name }] })).status).toBe(500)
    const res = await save('thief', { default: [{ savedName: t.name }] })
    expect(res.status).toBe(500)
    const body = await res.json()
    expect(body.failures[0]).toMatchObject({ code: 'saved-already', reason: expect.stringMatching(/saved already/) })
    expect(await kit.storage.repository.listByReference('demo', 'thief')).toEqual([])
    expect(await kit.storage.repository.listByReference('demo', 'owner')).toHaveLength(1)
  })

  it('binds a temporary file to its uploader: another user can neither commit it nor move it', async () => {
    clock = new Date('2026-11-15T12:00:00Z')
    const t = await tmpUpload(text('mine'), 'mine.txt', '1')
    const res = await save('taken', { default: [{ savedName: t.name }] }, '2')
    expect(res.status).toBe(500)
    const body = await res.json()
    expect(body.failures).toMatchObject([{ index: 0, code: 'forbidden', reason: expect.stringMatching(/another user/) }])
    expect(await kit.files(kit.tmpDir)).toContain(join('_tmp', t.name))
    expect(await kit.storage.repository.findBlobsByTmpName(t.name)).toEqual([])
    await expect(
      kit.storage.commitAttachContainer({
        refDomain: 'demo',
        refKey: 'taken',
        attachContainer: { default: [{ savedName: t.name }] },
        user: { id: 2 },
      }),
    ).rejects.toMatchObject({ code: 'attach-save-failure' })
    // The uploader commits it, and stays its creator.
    const mine = await save('taken', { default: [{ savedName: t.name }] }, '1')
    expect(mine.status).toBe(200)
    expect((await mine.json()).attachList[0]).toMatchObject({ savedName: t.name, createdBy: 1 })
  })

  it('runs the target category filters when a saved file is reused through savedDir', async () => {
    clock = new Date('2026-11-15T12:00:00Z')
    const html = await tmpUpload(text('<html><script>alert(1)</script></html>', 'text/html'), 'x.html')
    const saved = await save('source', { default: [{ savedName: html.name }] })
    expect(saved.status).toBe(200)
    const src = (await saved.json()).attachList[0]
    const res = await save('target', { image: [{ savedName: src.savedName, savedDir: src.savedDir, displayName: 'x.png' }] })
    expect(res.status).toBe(500)
    expect((await res.json()).failures).toMatchObject([
      { refCategory: 'image', index: 0, code: 'type', reason: expect.stringMatching(/^type: /) },
    ])
    expect(await kit.storage.repository.listByReference('demo', 'target')).toEqual([])
    // An image passes the image category's filters when reused there.
    const img = await tmpUpload(await png(), 'p.png')
    const ok = await save('source2', { default: [{ savedName: img.name }] })
    const p = (await ok.json()).attachList[0]
    const reuse = await save('target2', { image: [{ savedName: p.savedName, savedDir: p.savedDir }] })
    expect(reuse.status).toBe(200)
    expect((await reuse.json()).attachList).toMatchObject([{ refCategory: 'image', savedName: p.savedName }])
  })

  it('sweeps partial files of interrupted writes older than tmp-ttl, in every local store', async () => {
    clock = new Date()
    const dir = join(kit.baseDir, 'demo', '2026', '11', 'partial')
    await mkdir(dir, { recursive: true })
    const old = join(dir, '.f.bin.0123456789abcdef.partial')
    const oldTmp = join(kit.tmpDir, '_tmp', '.u.txt.fedcba9876543210.partial')
    const fresh = join(kit.tmpDir, '_tmp', '.v.txt.00112233445566ff.partial')
    await mkdir(join(kit.tmpDir, '_tmp'), { recursive: true })
    for (const f of [old, oldTmp, fresh]) await writeFile(f, 'half')
    const past = new Date(Date.now() - 25 * 3600 * 1000)
    await utimes(old, past, past)
    await utimes(oldTmp, past, past)
    const result = await kit.storage.sweep()
    expect(result.partialFiles).toBe(2)
    const left = [...(await kit.files()), ...(await kit.files(kit.tmpDir))].filter((f) => f.endsWith('.partial'))
    expect(left).toEqual([join('_tmp', '.v.txt.00112233445566ff.partial')])
  })
})
