import { createHash } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { join } from 'node:path'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAttachConfig } from '../config/schema.js'
import { type Kit, makeKit, saveFile, tusInOnePatch } from '../testing/handler-kit.js'

const XMP = '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"/></x:xmpmeta>'
const GPS = { IFD0: { Copyright: 'someone' }, IFD3: { GPSLatitudeRef: 'N', GPSLatitude: '48/1 51/1 0/1' } }
const canvas = (width: number, height: number) =>
  sharp({ create: { width, height, channels: 3, background: { r: 10, g: 120, b: 200 } } }).composite([
    { input: { create: { width: 8, height: 8, channels: 3, background: { r: 250, g: 0, b: 0 } } }, left: 0, top: 0 },
  ])
const blob = (buf: Buffer, type = 'image/jpeg') => new Blob([new Uint8Array(buf)], { type })
const pixels = async (buf: Buffer) => (await sharp(buf).raw().toBuffer({ resolveWithObject: true })).data

describe('metadata stripping through the HTTP handler', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      config: {
        resumable: { enabled: true },
        domains: {
          demo: { categories: { default: {}, image: { filters: ['image'] }, keep: { stripMetadata: false } } },
        },
      },
    })
  })
  afterAll(() => kit.cleanup())

  /** The stored bytes of a saved record, checked against its size and the view's ETag (its sha256). */
  async function stored(record: any): Promise<Buffer> {
    const path = (await kit.files()).find((f) => f.endsWith(record.savedName))!
    const bytes = await readFile(join(kit.baseDir, path))
    expect(record.fileSize).toBe(bytes.length)
    const view = await kit.handler.fetch(new Request(`http://x/assets/storage/attach/view/${record.id}`))
    expect(view.headers.get('etag')).toContain(createHash('sha256').update(bytes).digest('hex'))
    expect(Buffer.from(await view.arrayBuffer()).equals(bytes)).toBe(true)
    return bytes
  }

  it('a JPEG with GPS EXIF, XMP and ICC is stored without EXIF and XMP, ICC kept, pixels as uploaded (no re-encode)', async () => {
    const original = await canvas(64, 32).jpeg().withExif(GPS).withXmp(XMP).withIccProfile('p3').toBuffer()
    const bytes = await stored(await saveFile(kit, blob(original), 'gps.jpg', '1', 'image'))
    expect(bytes.length).toBeLessThan(original.length)
    const meta = await sharp(bytes).metadata()
    expect([meta.exif, meta.xmp, meta.iptc]).toEqual([undefined, undefined, undefined])
    expect(meta.icc).toBeDefined()
    expect((await pixels(bytes)).equals(await pixels(original))).toBe(true)
  })

  it('orientation 6: stored upright (width and height swapped), no orientation tag', async () => {
    const original = await canvas(64, 32).jpeg().withMetadata({ orientation: 6 }).toBuffer()
    const bytes = await stored(await saveFile(kit, blob(original), 'portrait.jpg', '2', 'image'))
    const meta = await sharp(bytes).metadata()
    expect([meta.width, meta.height, meta.orientation, meta.exif]).toEqual([32, 64, undefined, undefined])
  })

  it('a PNG with tEXt and eXIf loses them; a file without metadata is stored as uploaded', async () => {
    const original = await canvas(16, 16).png().withExif(GPS).withIccProfile('p3').toBuffer()
    const meta = await sharp(await stored(await saveFile(kit, blob(original, 'image/png'), 'a.png', '3', 'image'))).metadata()
    expect([meta.exif, meta.icc === undefined]).toEqual([undefined, false])
    const plain = await canvas(16, 16).jpeg().toBuffer()
    expect((await stored(await saveFile(kit, blob(plain), 'plain.jpg', '3', 'image'))).equals(plain)).toBe(true)
  })

  it('strip-metadata false keeps the bytes as uploaded; a resized view of them still carries no EXIF or XMP', async () => {
    const original = await canvas(64, 32).jpeg().withExif(GPS).withXmp(XMP).toBuffer()
    const record = await saveFile(kit, blob(original), 'kept.jpg', '4', 'keep')
    expect((await stored(record)).equals(original)).toBe(true)
    const resized = await kit.handler.fetch(new Request(`http://x/assets/storage/attach/view/${record.id}?w=16`))
    expect(resized.status).toBe(200)
    const meta = await sharp(Buffer.from(await resized.arrayBuffer())).metadata()
    expect([meta.width, meta.exif, meta.xmp, meta.iptc]).toEqual([16, undefined, undefined, undefined])
  })

  it('a direct upload is stripped too (its size is the stored bytes)', async () => {
    const original = await canvas(64, 32).jpeg().withExif(GPS).withXmp(XMP).toBuffer()
    const res = await kit.upload('/api/storage/attach/direct', [
      ['refDomain', 'demo'],
      ['refCategory', 'image'],
      ['file', blob(original), 'direct.jpg'],
    ])
    const item = (await res.json()).files[0]
    const path = (await kit.files()).find((f) => f.endsWith(item.name))!
    const bytes = await readFile(join(kit.baseDir, path))
    expect(item.size).toBe(bytes.length)
    expect(bytes.length).toBeLessThan(original.length)
    const meta = await sharp(bytes).metadata()
    expect([meta.exif, meta.xmp]).toEqual([undefined, undefined])
    expect((await pixels(bytes)).equals(await pixels(original))).toBe(true)
  })

  it('a tus upload is stripped when it completes; the committed record is the stored bytes', async () => {
    const original = await canvas(64, 32).jpeg().withExif(GPS).withXmp(XMP).toBuffer()
    const { location, patched } = await tusInOnePatch(kit, new Uint8Array(original), 'tus.jpg', 'image')
    expect(patched.status).toBe(204)
    const saved = await kit.call('/api/storage/attach/demo/6', {
      method: 'POST',
      body: JSON.stringify({ image: [{ savedName: location.split('/').pop() }] }),
    })
    expect(saved.status).toBe(200)
    const bytes = await stored((await saved.json()).attachList[0])
    const meta = await sharp(bytes).metadata()
    expect([meta.exif, meta.xmp]).toEqual([undefined, undefined])
    expect((await pixels(bytes)).equals(await pixels(original))).toBe(true)
  })

  it('a JPEG whose segment runs past the end: the item fails with code corrupt, nothing is kept', async () => {
    const plain = await canvas(16, 16).jpeg().toBuffer()
    const broken = Buffer.concat([plain.subarray(0, 2), Buffer.from([0xff, 0xe1, 0xff, 0xff]), Buffer.from('Exif\0\0MM\0\x2a')])
    const started = Date.now()
    const res = await kit.upload('/api/storage/attach/tmp', [
      ['refDomain', 'demo'],
      ['file', blob(broken), 'broken.jpg'],
    ])
    expect(Date.now() - started).toBeLessThan(5000)
    const item = (await res.json()).files[0]
    expect(item.error.code).toBe('corrupt')
    expect(item.error.message).toMatch(/broken\.jpg: its metadata could not be removed/)
    expect((await kit.files(kit.tmpDir)).filter((f) => !f.includes('tus'))).toEqual([])
  })
})

describe('strip-metadata in the configuration', () => {
  it('is read from kebab-case (default true); a misspelt key is refused with the nearest name', () => {
    const domains = { demo: { categories: { a: {}, b: { 'strip-metadata': false } } } }
    const parsed = parseAttachConfig({ attach: { domains } })
    expect(parsed.domains.demo!.categories.a!.stripMetadata).toBe(true)
    expect(parsed.domains.demo!.categories.b!.stripMetadata).toBe(false)
    expect(() => parseAttachConfig({ attach: { domains: { demo: { categories: { c: { 'strip-metdata': false } } } } } })).toThrow(
      /strip-metadata/,
    )
  })
})
