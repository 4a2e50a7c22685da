import { inflateSync } from 'node:zlib'
import { rgbaToThumbHash } from 'thumbhash'
import { describe, expect, it } from 'vitest'
import { placeholderDataUrl } from './index.js'

/** A ThumbHash of a `w`×`h` picture, left half red and right half blue, as the server stores it (base64). */
function placeholderOf(w: number, h: number): string {
  const rgba = new Uint8Array(w * h * 4)
  for (let i = 0; i < w * h; i++) rgba.set(i % w < w / 2 ? [220, 20, 20, 255] : [20, 20, 220, 255], i * 4)
  return Buffer.from(rgbaToThumbHash(w, h, rgba)).toString('base64')
}

/** The width and height of a PNG, and its first decoded pixel row's first RGB(A). */
function readPng(dataUrl: string): { width: number; height: number } {
  const png = Buffer.from(dataUrl.slice(dataUrl.indexOf(',') + 1), 'base64')
  expect(png.subarray(1, 4).toString('latin1')).toBe('PNG')
  // The IDAT data inflates (the PNG is well formed).
  const idat = png.indexOf('IDAT')
  expect(inflateSync(png.subarray(idat + 4, idat + 4 + png.readUInt32BE(idat - 4))).length).toBeGreaterThan(0)
  return { width: png.readUInt32BE(16), height: png.readUInt32BE(20) }
}

describe('placeholderDataUrl()', () => {
  it('decodes a record’s ThumbHash into a PNG data: URL of its aspect ratio', () => {
    const record = { id: 1, media: { width: 300, height: 200, placeholder: placeholderOf(100, 67) } }
    const landscape = placeholderDataUrl(record)
    expect(landscape).toMatch(/^data:image\/png;base64,/)
    const { width, height } = readPng(landscape!)
    expect(width).toBeGreaterThan(height)
    const portrait = readPng(placeholderDataUrl({ media: { placeholder: placeholderOf(50, 100) } })!)
    expect(portrait.height).toBeGreaterThan(portrait.width)
  })

  it('undefined without a placeholder: media null or absent, no record, not a ThumbHash', () => {
    expect(placeholderDataUrl({ media: null })).toBeUndefined()
    expect(placeholderDataUrl({})).toBeUndefined()
    expect(placeholderDataUrl(undefined)).toBeUndefined()
    expect(placeholderDataUrl({ media: { placeholder: '' } })).toBeUndefined()
    expect(placeholderDataUrl({ media: { placeholder: '***not base64***' } })).toBeUndefined()
    expect(placeholderDataUrl({ media: { placeholder: 'A'.repeat(60) } })).toBeUndefined()
  })
})
