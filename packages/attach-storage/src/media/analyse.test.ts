/**
 * `media` on records: an image's displayed size and ThumbHash placeholder, learnt from the temporary file
 * when it is kept, stored with the blob and the record (migration 0005), answered by save answers,
 * lookups and lists without reading the file. SQLite, PostgreSQL and MySQL (MariaDB).
 */
import { rm } from 'node:fs/promises'
import { join } from 'node:path'
import sharp from 'sharp'
import { thumbHashToRGBA } from 'thumbhash'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS } from '../../../../test/databases.js'
import { jpeg, type Kit, makeKit, png, saveFile } from '../testing/handler-kit.js'
import { analyseImage, explainImage, MAX_PLACEHOLDER_CHARS } from './analyse.js'

const API = '/api/storage'

/** The placeholder decodes as a ThumbHash into a small picture of the same shape. */
function expectPlaceholder(placeholder: string, landscape: boolean): void {
  expect(placeholder.length).toBeGreaterThan(0)
  expect(placeholder.length).toBeLessThanOrEqual(MAX_PLACEHOLDER_CHARS)
  const { w, h, rgba } = thumbHashToRGBA(Buffer.from(placeholder, 'base64'))
  expect(rgba.length).toBe(w * h * 4)
  expect(w > h).toBe(landscape)
}

describe('analyseImage()', () => {
  const options = { maxInputPixels: 100_000_000 }

  it('a JPEG with EXIF orientation 6: the size as shown (sides swapped) and a portrait placeholder', async () => {
    const bytes = Buffer.from(await (await jpeg(300, 200, 6)).arrayBuffer())
    const media = await analyseImage(bytes, 'image/jpeg', options)
    expect(media).toMatchObject({ width: 200, height: 300 })
    expectPlaceholder(media!.placeholder, false)
  })

  it('PNG, WebP and GIF', async () => {
    const base = sharp({ create: { width: 120, height: 60, channels: 4, background: { r: 0, g: 200, b: 0, alpha: 0.5 } } })
    for (const [type, bytes] of [
      ['image/png', await base.clone().png().toBuffer()],
      ['image/webp', await base.clone().webp().toBuffer()],
      ['image/gif', await base.clone().gif().toBuffer()],
    ] as const) {
      const media = await analyseImage(bytes, type, options)
      expect(media, type).toMatchObject({ width: 120, height: 60 })
      expectPlaceholder(media!.placeholder, true)
    }
  })

  it('null for text, a truncated JPEG, and an image over the pixel limit', async () => {
    expect(await analyseImage(Buffer.from('hello'), 'text/plain', options)).toBeNull()
    const whole = Buffer.from(await (await jpeg(400, 300)).arrayBuffer())
    expect(await analyseImage(whole.subarray(0, whole.length >> 1), 'image/jpeg', options)).toBeNull()
    expect(await analyseImage(Buffer.from('not a jpeg at all'), 'image/jpeg', options)).toBeNull()
    expect(await analyseImage(whole, 'image/jpeg', { maxInputPixels: 1000 })).toBeNull()
  })

  it('truncated JPEGs decoded side by side are each named as truncated (libvips shares one error buffer)', async () => {
    // Six at a time, 240 in all: before decodes whose message was lost were tried again, about one in six
    // failed with "Unknown error" and was taken as not analysed (no problem), so the image filter let it in.
    const whole = await sharp({ create: { width: 300, height: 200, channels: 3, background: '#3a6' } })
      .jpeg()
      .toBuffer()
    const cut = whole.subarray(0, whole.length >> 1)
    const problems = new Map<string, number>()
    for (let round = 0; round < 40; round++) {
      const out = await Promise.all(Array.from({ length: 6 }, () => explainImage(Buffer.from(cut), 'image/jpeg', options)))
      for (const o of out) problems.set(String(o.problem), (problems.get(String(o.problem)) ?? 0) + 1)
    }
    // Every one is refused. A message may carry another decode's line too (the buffer is shared both ways),
    // and when three decodes in a row lost theirs, the refusal says the decoder gave no reason.
    for (const problem of problems.keys())
      expect(problem).toMatch(
        /^(VipsJpeg: premature end of JPEG image(\n|$)|the image could not be decoded \(the decoder gave no reason\)$)/,
      )
    expect([...problems.values()].reduce((a, b) => a + b)).toBe(240)
  })

  it('beyond its queue a file is not analysed (null) rather than waited for', async () => {
    const bytes = Buffer.from(await (await png(50, 50)).arrayBuffer())
    const bounded = { maxInputPixels: 100_000_000, concurrency: 1, queue: 0 }
    const all = await Promise.all([1, 2, 3].map(() => analyseImage(bytes, 'image/png', bounded)))
    expect(all[0]).toMatchObject({ width: 50, height: 50 })
    expect(all.slice(1)).toEqual([null, null])
  })
})

for (const dialect of DIALECTS) {
  describe(`media on records (${dialect})`, () => {
    let kit: Kit
    beforeAll(async () => {
      kit = await makeKit(dialect)
    })
    afterAll(() => kit?.cleanup())

    it('save answers, lookups and lists carry media; a lookup reads no file', async () => {
      const photo = await saveFile(kit, await jpeg(300, 200, 6), 'portrait.jpg', 'm1')
      expect(photo.media).toMatchObject({ width: 200, height: 300 })
      expectPlaceholder(photo.media.placeholder, false)
      const picture = await saveFile(kit, await png(40, 30), 'pic.png', 'm1')
      expect(picture.media).toMatchObject({ width: 40, height: 30 })
      const text = await saveFile(kit, new Blob(['plain words'], { type: 'text/plain' }), 'notes.txt', 'm1')
      expect(text.media).toBeNull()

      // The stored files go: the lookup still knows what they were (it reads the database only).
      for (const r of [photo, picture, text]) await rm(join(kit.baseDir, r.savedDir, r.savedName))
      const res = await kit.call(`${API}/attach/demo/m1/default`)
      expect(res.status).toBe(200)
      const listed = (await res.json()).default as Array<{ displayName: string; media: unknown }>
      expect(listed.map((r) => [r.displayName, r.media])).toEqual([
        ['portrait.jpg', photo.media],
        ['pic.png', picture.media],
        ['notes.txt', null],
      ])
      const looked = await kit.storage.lookup('demo', 'm1', { category: 'default' })
      expect(looked.default?.map((r) => r.media)).toEqual([photo.media, picture.media, null])
    })

    it('a truncated JPEG is kept without media where no filter refuses it, and refused by the image filter', async () => {
      const whole = Buffer.from(await (await jpeg(400, 300)).arrayBuffer())
      const cut = new Blob([new Uint8Array(whole.subarray(0, whole.length >> 1))], { type: 'image/jpeg' })
      const kept = await saveFile(kit, cut, 'cut.jpg', 'm2')
      expect(kept.fileType).toBe('image/jpeg')
      expect(kept.media).toBeNull()
      const up = await kit.upload(`${API}/attach/tmp`, [
        ['refDomain', 'demo'],
        ['refCategory', 'image'],
        ['file', cut, 'cut.jpg'],
      ])
      // The image filter takes only pictures that decode: refused, naming the problem.
      expect(up.status).toBe(200)
      const item = (await up.json()).files[0]
      expect(item.error).toEqual({ code: 'corrupt', message: expect.stringMatching(/^cut\.jpg: .*(premature end|truncated)/i) })
    })
  })
}
