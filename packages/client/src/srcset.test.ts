import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { srcsetOf, type VariantBox } from './index.js'
import { startTestServer, type TestServer } from './test-kit.js'

// The category's named variants: two inside boxes narrower than the picture, one wider (it would be the
// original), a cover crop of the picture's aspect (5:4) and one square.
const BOXES = {
  small: { w: 40 },
  thumb: { w: 30, h: 30 },
  huge: { w: 400 },
  frame: { w: 50, h: 40, fit: 'cover' },
  square: { w: 30, h: 30, fit: 'cover' },
} satisfies Record<string, VariantBox>

// Records as a real save and lookup answer them (the handlers in-process, the variants made).
describe('srcsetOf() of saved records', () => {
  let srv: TestServer
  beforeAll(async () => {
    srv = await startTestServer({ default: {}, photo: { filters: ['image'], variants: BOXES } })
  })
  afterAll(() => srv?.close())
  const saved = (file: File, refKey: string, category: string) => srv.save(file, refKey, category)

  it('lists the made variants at the widths the server makes, narrowest first, the original widest', async () => {
    const png = await sharp({ create: { width: 100, height: 80, channels: 3, background: '#c33' } })
      .png()
      .toBuffer()
    const record = await saved(new File([png], 'photo.png', { type: 'image/png' }), 'p1', 'photo')
    expect(record.media).toMatchObject({ width: 100, height: 80 })
    expect(Object.keys(record.variants!).sort()).toEqual(['frame', 'huge', 'small', 'square', 'thumb'])
    const v = record.variants!
    // thumb: 100×80 into 30×30 is 30×24; small 40 wide; frame is the picture's aspect; square and huge are left out.
    expect(srcsetOf(record, { boxes: BOXES })).toBe(`${v.thumb} 30w, ${v.small} 40w, ${v.frame} 50w, ${record.url} 100w`)
    expect(srcsetOf(record, { boxes: BOXES, withoutOriginal: true })).toBe(`${v.thumb} 30w, ${v.small} 40w, ${v.frame} 50w`)
    // The lookup answers the made variants' boxes with the record: srcsetOf(record) needs nothing else.
    expect(record.variantBoxes).toEqual(BOXES)
    expect(srcsetOf(record)).toBe(`${v.thumb} 30w, ${v.small} 40w, ${v.frame} 50w, ${record.url} 100w`)
    // Without any boxes, the record's own address at its width is all that is known.
    expect(srcsetOf({ ...record, variantBoxes: undefined })).toBe(`${record.url} 100w`)

    // The widths are those of the files served.
    for (const [name, width] of [
      ['thumb', 30],
      ['small', 40],
      ['frame', 50],
    ] as const) {
      const answer = await srv.handler.fetch(new Request(`http://app.test${v[name]}`))
      expect(answer.status).toBe(200)
      expect((await sharp(Buffer.from(await answer.arrayBuffer())).metadata()).width).toBe(width)
    }
  })

  it('a portrait picture: its boxes bound its height', async () => {
    const png = await sharp({ create: { width: 60, height: 120, channels: 3, background: '#33c' } })
      .png()
      .toBuffer()
    const record = await saved(new File([png], 'tall.png', { type: 'image/png' }), 'p2', 'photo')
    const v = record.variants!
    // thumb 30×30: 15×30; small 40: 40×80; frame (5:4) is not the picture's aspect.
    expect(srcsetOf(record, { boxes: BOXES })).toBe(`${v.thumb} 15w, ${v.small} 40w, ${record.url} 60w`)
  })

  it('answers nothing for a file that is not an image', async () => {
    const record = await saved(new File(['just text'], 'a.txt', { type: 'text/plain' }), 't1', 'default')
    expect(record.media).toBeNull()
    expect(srcsetOf(record, { boxes: BOXES })).toBe('')
  })
})

describe('srcsetOf() of record shapes', () => {
  const record = {
    url: '/assets/storage/attach/view/post/1/image/0',
    fileType: 'image/jpeg',
    media: { width: 4000, height: 3000, placeholder: 'HBkSHYSIeHiPiHh8eJd4eTN0EEQG' },
    variants: { thumb: '/assets/storage/attach/view/9?variant=thumb', large: '/assets/storage/attach/view/9?variant=large' },
  }
  const boxes = { thumb: { w: 320, h: 320 }, large: { w: 1600, format: 'webp' }, missing: { w: 800 } }

  it('only variants that are made and whose box is given', () => {
    expect(srcsetOf(record, { boxes })).toBe(
      '/assets/storage/attach/view/9?variant=thumb 320w, /assets/storage/attach/view/9?variant=large 1600w, /assets/storage/attach/view/post/1/image/0 4000w',
    )
    expect(srcsetOf({ ...record, variants: {} }, { boxes })).toBe('/assets/storage/attach/view/post/1/image/0 4000w')
    expect(srcsetOf(record, { boxes: { thumb: {} } })).toBe('/assets/storage/attach/view/post/1/image/0 4000w')
  })

  it('without media: width-only boxes at their width, no original', () => {
    expect(srcsetOf({ ...record, media: null }, { boxes })).toBe('/assets/storage/attach/view/9?variant=large 1600w')
    expect(srcsetOf({ ...record, media: null })).toBe('')
  })

  it('nothing for SVG, non-images, no record; commas and spaces in addresses encoded', () => {
    expect(srcsetOf({ ...record, fileType: 'image/svg+xml' }, { boxes })).toBe('')
    expect(srcsetOf({ ...record, fileType: 'application/pdf' }, { boxes })).toBe('')
    expect(srcsetOf(undefined)).toBe('')
    expect(srcsetOf(null, { boxes })).toBe('')
    expect(srcsetOf({ url: 'https://cdn.test/a,b c.jpg', media: { width: 10, height: 10 } })).toBe('https://cdn.test/a%2Cb%20c.jpg 10w')
  })
})
