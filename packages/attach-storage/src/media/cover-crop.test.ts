/**
 * Cover crops and the focal point: `fit=cover` answers the exact box, cropped around the record's
 * `focus` (set through PUT, `null` clears it), a changed focus makes and serves a new crop, named
 * variants take `fit`, and bad input answers 400 naming the field. Through the Web handlers, on a real
 * database (the focus round trip on SQLite, PostgreSQL and MySQL) and a real local store.
 */
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS } from '../../../../test/databases.js'
import { type Kit, makeKit, saveFile } from '../testing/handler-kit.js'

const API = '/api/storage'
const ASSETS = '/assets/storage'
const RED = [255, 0, 0]
const GREEN = [0, 255, 0]
const BLUE = [0, 0, 255]

/** A 300×200 PNG in three vertical stripes, 100 pixels each: red, green, blue. */
async function stripes(): Promise<Blob> {
  const stripe = (c: number[]) =>
    sharp({ create: { width: 100, height: 200, channels: 3, background: { r: c[0]!, g: c[1]!, b: c[2]! } } })
      .png()
      .toBuffer()
  const buf = await sharp({ create: { width: 300, height: 200, channels: 3, background: { r: 255, g: 0, b: 0 } } })
    .composite([
      { input: await stripe(GREEN), left: 100, top: 0 },
      { input: await stripe(BLUE), left: 200, top: 0 },
    ])
    .png()
    .toBuffer()
  return new Blob([new Uint8Array(buf)], { type: 'image/png' })
}

/** The answer's image: its size and the colour of one pixel. */
async function picture(res: Response): Promise<{ width: number; height: number; at(x: number, y: number): number[] }> {
  const { data, info } = await sharp(Buffer.from(await res.arrayBuffer()))
    .removeAlpha()
    .raw()
    .toBuffer({ resolveWithObject: true })
  return {
    width: info.width,
    height: info.height,
    at: (x, y) => [...data.subarray((y * info.width + x) * 3, (y * info.width + x) * 3 + 3)],
  }
}

const CONFIG = {
  domains: {
    demo: {
      categories: {
        default: {},
        image: { filters: ['image'], variants: { square: { w: 100, h: 100, fit: 'cover' }, wide: { w: 100 } } },
      },
    },
  },
}

describe('cover crops and the focal point (sqlite)', () => {
  let kit: Kit
  let rec: { id: number; refKey: string }
  const view = (query: string, init: RequestInit = {}) =>
    kit.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${rec.id}?${query}`, init))
  const put = (items: unknown) => kit.call(`${API}/attach/`, { method: 'PUT', body: JSON.stringify(items) })
  const lookup = async (refKey = '900') => (await (await kit.call(`${API}/attach/demo/${refKey}/image`)).json()).image as any[]

  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: CONFIG })
    rec = await saveFile(kit, await stripes(), 'stripes.png', '900', 'image')
  })
  afterAll(async () => {
    await kit?.cleanup()
  })

  it('fit=cover with w and h answers the exact box; without fit the box is fitted inside as before', async () => {
    const cover = await view('w=100&h=100&fit=cover')
    expect(cover.status).toBe(200)
    const p = await picture(cover)
    expect([p.width, p.height]).toEqual([100, 100])
    // crop=attention is the default without a focus: the same box.
    const attention = await picture(await view('w=100&h=100&fit=cover&crop=attention'))
    expect([attention.width, attention.height]).toEqual([100, 100])

    const inside = await view('w=100&h=100')
    expect(inside.headers.get('etag')).toMatch(/-100x100"$/)
    const q = await picture(inside)
    expect([q.width, q.height]).toEqual([100, 67])
    expect(cover.headers.get('etag')).not.toBe(inside.headers.get('etag'))
  })

  it('keeps the focus inside the box, and a changed focus makes a new crop (the old one is not served)', async () => {
    const set = await put([{ id: rec.id, focus: { x: 0.9, y: 0.5 } }])
    expect(set.status).toBe(200)
    expect(await set.json()).toEqual({ success: true, count: 1 })
    expect((await lookup())[0].focus).toEqual({ x: 0.9, y: 0.5 })

    // Resized to 150×100 to cover the box; the focus at x = 135 puts the box at its right edge: green, blue.
    const right = await view('w=100&h=100&fit=cover')
    expect(right.headers.get('cache-control')).not.toMatch(/immutable/)
    const etagRight = right.headers.get('etag')
    const a = await picture(right)
    expect([a.width, a.height]).toEqual([100, 100])
    expect(a.at(10, 50)).toEqual(GREEN)
    expect(a.at(90, 50)).toEqual(BLUE)

    const crops = async () => (await kit.files()).filter((f) => f.includes(`_v/${rec.id}/`) && /\/\d+x\d+c/.test(f))
    expect(await crops()).toEqual([expect.stringMatching(/\/100x100c@0\.9,0\.5$/)])
    await put([{ id: rec.id, focus: { x: 0.1, y: 0.5 } }])
    // The crop of the old focus is deleted with the change; the inside-the-box size stays.
    expect(await crops()).toEqual([])
    expect((await kit.files()).some((f) => f.endsWith(`_v/${rec.id}/100x100`))).toBe(true)
    const left = await view('w=100&h=100&fit=cover')
    expect(left.headers.get('etag')).not.toBe(etagRight)
    const b = await picture(left)
    expect(b.at(10, 50)).toEqual(RED)
    expect(b.at(90, 50)).toEqual(GREEN)
    // The old crop's ETag is not the current one: a client holding it gets the new crop, not a 304.
    const cond = await view('w=100&h=100&fit=cover', { headers: { 'if-none-match': etagRight! } })
    expect(cond.status).toBe(200)
    expect((await picture(cond)).at(10, 50)).toEqual(RED)

    // A named cover variant: the exact box, around the focus too; a named variant without fit stays inside.
    const square = await picture(await view('variant=square'))
    expect([square.width, square.height]).toEqual([100, 100])
    expect(square.at(10, 50)).toEqual(RED)
    const wide = await picture(await view('variant=wide'))
    expect([wide.width, wide.height]).toEqual([100, 67])

    // null clears it.
    expect((await put([{ id: rec.id, focus: null }])).status).toBe(200)
    expect((await lookup())[0].focus ?? null).toBeNull()
  })

  it('answers 400 naming the field for a bad focus, and for a focus on a non-image', async () => {
    for (const focus of [
      { x: 1.5, y: 0.5 },
      { x: -0.1, y: 0 },
      { x: '0.5', y: 0.5 },
      { x: 0.5 },
      { x: 0.5, y: 0.5, z: 1 },
      'centre',
      [0.5, 0.5],
    ]) {
      const res = await put([{ id: rec.id, focus }])
      expect(res.status, JSON.stringify(focus)).toBe(400)
      const body = await res.json()
      expect(body.code).toBeTypeOf('string')
      expect(body.message, JSON.stringify(focus)).toMatch(/focus/)
    }
    const text = await saveFile(kit, new Blob(['plain text'], { type: 'text/plain' }), 'notes.txt', '901')
    const res = await put([{ id: text.id, focus: { x: 0.5, y: 0.5 } }])
    expect(res.status).toBe(400)
    expect((await res.json()).message).toMatch(/^focus: attachment \d+ is not an image/)
    // Nothing was written: all or nothing.
    expect((await lookup())[0].focus ?? null).toBeNull()
  })

  it('answers 400 for fit=cover with one side only, and for an unknown fit or crop', async () => {
    for (const [query, field] of [
      ['w=100&fit=cover', 'query.h'],
      ['h=100&fit=cover', 'query.w'],
      ['w=100&h=100&fit=fill', 'fit'],
      ['w=100&h=100&fit=cover&crop=entropy', 'crop'],
      ['w=100&crop=attention', 'query.crop'],
      ['variant=square&fit=cover', 'query.variant'],
    ]) {
      const res = await view(query!)
      expect(res.status, query).toBe(400)
      const body = await res.json()
      expect(body.code).toBeTypeOf('string')
      expect(body.message, query).toContain(field)
    }
  })

  it('refuses a named cover variant without both sides at start', async () => {
    await expect(
      makeKit('sqlite', { config: { domains: { demo: { categories: { image: { variants: { bad: { w: 100, fit: 'cover' } } } } } } } }),
    ).rejects.toThrow(/cover variant needs both w and h/)
  })
})

for (const dialect of DIALECTS.filter((d) => d !== 'sqlite')) {
  describe(`the focus round trip (${dialect})`, () => {
    let kit: Kit
    beforeAll(async () => {
      kit = await makeKit(dialect, { config: CONFIG })
    })
    afterAll(async () => {
      await kit?.cleanup()
    })

    it('is stored by PUT, answered by the lookup, cleared by null, and crops from it', async () => {
      const rec = await saveFile(kit, await stripes(), 'stripes.png', '902', 'image')
      expect(
        (await kit.call(`${API}/attach/`, { method: 'PUT', body: JSON.stringify([{ id: rec.id, focus: { x: 0.9, y: 0.25 } }]) })).status,
      ).toBe(200)
      const list = async () => (await (await kit.call(`${API}/attach/demo/902/image`)).json()).image as any[]
      expect((await list())[0].focus).toEqual({ x: 0.9, y: 0.25 })
      const p = await picture(await kit.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${rec.id}?w=100&h=100&fit=cover`)))
      expect(p.at(90, 50)).toEqual(BLUE)
      expect((await kit.call(`${API}/attach/`, { method: 'PUT', body: JSON.stringify([{ id: rec.id, focus: null }]) })).status).toBe(200)
      expect((await list())[0].focus ?? null).toBeNull()
    })
  })
}
