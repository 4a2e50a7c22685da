import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { type Kit, makeKit } from '../testing/handler-kit.js'
import { analysing, forgetAnalysis } from './media-kept.js'

// The post-pass walk, counted: a JPEG stripped as it is received is never read again for stripping.
const walks = vi.hoisted(() => ({ count: 0 }))
vi.mock('../media/strip.js', async (importOriginal) => {
  const real = await importOriginal<typeof import('../media/strip.js')>()
  return {
    ...real,
    planStrip: (...args: Parameters<typeof real.planStrip>) => {
      walks.count++
      return real.planStrip(...args)
    },
  }
})

const GPS = { IFD0: { Copyright: 'someone' }, IFD3: { GPSLatitudeRef: 'N', GPSLatitude: '48/1 51/1 0/1' } }
const photo = (orientation = 1) =>
  sharp({ create: { width: 64, height: 32, channels: 3, background: '#808080', noise: { type: 'gaussian', mean: 128, sigma: 40 } } })
    .jpeg()
    .withMetadata({ orientation })
    .withExif(GPS)
    .toBuffer()
const blob = (buf: Buffer) => new Blob([new Uint8Array(buf)], { type: 'image/jpeg' })
const pixels = async (buf: Buffer) => (await sharp(buf).raw().toBuffer({ resolveWithObject: true })).data
const sidecar = async (kit: Kit, name: string) => JSON.parse(await readFile(join(kit.tmpDir, '_tmp', `${name}.meta.json`), 'utf8'))

describe('stripping as a JPEG is received, and its media learnt in the background', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      config: { domains: { demo: { categories: { default: {}, keep: { stripMetadata: false } } } } },
    })
  })
  afterAll(() => kit.cleanup())

  async function upload(parts: Array<[string, string | Blob, string?]>) {
    const res = await kit.upload('/api/storage/attach/tmp', parts)
    expect(res.status).toBe(200)
    const item = (await res.json()).files[0]
    expect(item.error).toBeUndefined()
    return { item, bytes: await readFile(join(kit.tmpDir, '_tmp', item.name)) }
  }

  it('fields first: stored without EXIF, same pixels, never walked again (one write of the file)', async () => {
    const original = await photo()
    walks.count = 0
    const { item, bytes } = await upload([
      ['refDomain', 'demo'],
      ['refCategory', 'default'],
      ['file', blob(original), 'gps.jpg'],
    ])
    expect(walks.count).toBe(0)
    expect(item.size).toBe(bytes.length)
    expect(bytes.length).toBeLessThan(original.length)
    expect((await sharp(bytes).metadata()).exif).toBeUndefined()
    expect((await pixels(bytes)).equals(await pixels(original))).toBe(true)
  })

  it('fields after the file: stripped by the post-pass, the same stored bytes', async () => {
    const original = await photo()
    walks.count = 0
    const first = await upload([
      ['refDomain', 'demo'],
      ['file', blob(original), 'gps.jpg'],
    ])
    const late = await upload([
      ['file', blob(original), 'gps.jpg'],
      ['refDomain', 'demo'],
    ])
    expect(walks.count).toBe(1)
    expect(late.bytes.equals(first.bytes)).toBe(true)
  })

  it('a category that keeps metadata: the bytes as uploaded, fields first or not', async () => {
    const original = await photo()
    const { bytes } = await upload([
      ['refDomain', 'demo'],
      ['refCategory', 'keep'],
      ['file', blob(original), 'gps.jpg'],
    ])
    expect(bytes.equals(original)).toBe(true)
  })

  it('orientation 6 with fields first: turned upright by the post-pass', async () => {
    const { bytes } = await upload([
      ['refDomain', 'demo'],
      ['file', blob(await photo(6)), 'portrait.jpg'],
    ])
    const meta = await sharp(bytes).metadata()
    expect([meta.width, meta.height, meta.orientation, meta.exif]).toEqual([32, 64, undefined, undefined])
  })

  it('the answer does not wait for the media; the sidecar has none, and a save right away records it', async () => {
    const { item } = await upload([
      ['refDomain', 'demo'],
      ['file', blob(await photo()), 'a.jpg'],
    ])
    expect(analysing(item.name)).toBe(true)
    expect((await sidecar(kit, item.name)).media).toBeUndefined()
    const res = await kit.call('/api/storage/attach/demo/k1', {
      method: 'POST',
      body: JSON.stringify({ default: [{ savedName: item.name, displayName: 'a.jpg' }] }),
    })
    expect(res.status).toBe(200)
    const saved = (await res.json()).attachList[0]
    expect(saved.media).toMatchObject({ width: 64, height: 32 })
    expect(saved.media.placeholder).toMatch(/^[A-Za-z0-9+/=]{10,48}$/)
    expect(analysing(item.name)).toBe(false)
  })

  it('kept by another process (no analysis here): the commit analyses the file, orientation applied', async () => {
    const { item } = await upload([
      ['refDomain', 'demo'],
      ['file', blob(await photo(6)), 'b.jpg'],
    ])
    expect(forgetAnalysis(item.name)).toBe(true)
    const res = await kit.call('/api/storage/attach/demo/k2', {
      method: 'POST',
      body: JSON.stringify({ default: [{ savedName: item.name, displayName: 'b.jpg' }] }),
    })
    expect(res.status).toBe(200)
    expect((await res.json()).attachList[0].media).toMatchObject({ width: 32, height: 64 })
  })

  it('a file that is no image gets media null in its sidecar at once', async () => {
    const { item } = await upload([
      ['refDomain', 'demo'],
      ['file', new Blob(['hello']), 'a.txt'],
    ])
    expect((await sidecar(kit, item.name)).media).toBeNull()
    expect(analysing(item.name)).toBe(false)
  })
})
