import { Readable } from 'node:stream'
import { crc32 } from 'node:zlib'
import sharp from 'sharp'
import { describe, expect, it } from 'vitest'
import { exifOrientation, JpegStripper, planStrip, reorient, type StreamStrip, StripError, stripStream } from './strip.js'

/** The bytes in chunks of `size` (odd sizes cut every block somewhere). */
async function* chunks(buf: Buffer, size = 7): AsyncGenerator<Buffer> {
  for (let i = 0; i < buf.length; i += size) yield buf.subarray(i, i + size)
}

async function strip(buf: Buffer, type: string): Promise<Buffer> {
  const plan = await planStrip(chunks(buf), type)
  const out: Buffer[] = []
  for await (const part of stripStream(chunks(buf, 13), type, plan)) out.push(part)
  return Buffer.concat(out)
}

/** The markers (and APPn identifiers) of a JPEG's segments before its scan. */
function jpegSegments(buf: Buffer): string[] {
  const out: string[] = []
  let i = 2
  while (i < buf.length) {
    const marker = buf[i + 1]!
    const length = buf.readUInt16BE(i + 2)
    const id = marker >= 0xe0 && marker <= 0xef ? `:${buf.toString('latin1', i + 4, i + 4 + 12).split('\0')[0]}` : ''
    out.push(`${marker.toString(16)}${id}`)
    if (marker === 0xda) break
    i += 2 + length
  }
  return out
}

const XMP = '<x:xmpmeta xmlns:x="adobe:ns:meta/"><rdf:RDF xmlns:rdf="http://www.w3.org/1999/02/22-rdf-syntax-ns#"/></x:xmpmeta>'
const GPS = { IFD0: { Copyright: 'someone' }, IFD3: { GPSLatitudeRef: 'N', GPSLatitude: '48/1 51/1 0/1' } }
const canvas = (width = 64, height = 32) =>
  sharp({ create: { width, height, channels: 3, background: { r: 10, g: 120, b: 200 } } }).composite([
    { input: { create: { width: 8, height: 8, channels: 3, background: { r: 250, g: 0, b: 0 } } }, left: 0, top: 0 },
  ])

/** An APP13 (Photoshop IRB with an IPTC record) spliced in after SOI. */
function withIptc(jpeg: Buffer): Buffer {
  const body = Buffer.concat([Buffer.from('Photoshop 3.0\0'), Buffer.from('8BIM\x04\x04\0\0\0\0\0\x0a\x1c\x02\x5a\0\x05Paris\0', 'latin1')])
  const head = Buffer.from([0xff, 0xed, 0, 0])
  head.writeUInt16BE(body.length + 2, 2)
  return Buffer.concat([jpeg.subarray(0, 2), head, body, jpeg.subarray(2)])
}

const pixels = async (buf: Buffer) => (await sharp(buf).raw().toBuffer({ resolveWithObject: true })).data

describe('strip: JPEG', () => {
  it('drops Exif (GPS), XMP and IPTC, keeps JFIF and ICC, copies the rest byte for byte: same decoded pixels', async () => {
    const original = withIptc(await canvas().jpeg().withExif(GPS).withXmp(XMP).withIccProfile('p3').toBuffer())
    expect(jpegSegments(original)).toEqual(expect.arrayContaining(['e1:Exif', 'e1:http://ns.ad', 'ed:Photoshop 3.', 'e2:ICC_PROFILE']))
    const stripped = await strip(original, 'image/jpeg')
    const segments = jpegSegments(stripped)
    expect(segments.filter((s) => s.startsWith('e1') || s.startsWith('ed'))).toEqual([])
    expect(segments).toContain('e2:ICC_PROFILE')
    const meta = await sharp(stripped).metadata()
    expect([meta.exif, meta.xmp, meta.iptc]).toEqual([undefined, undefined, undefined])
    expect(meta.icc?.length).toBe((await sharp(original).metadata()).icc?.length)
    expect((await pixels(stripped)).equals(await pixels(original))).toBe(true)
    // Everything from the scan on is the original's.
    const sos = (b: Buffer) => b.subarray(b.indexOf(Buffer.from([0xff, 0xda])))
    expect(sos(stripped).equals(sos(original))).toBe(true)
    expect(original.length - stripped.length).toBe((await planStrip(chunks(original), 'image/jpeg')).removed)
  })

  it('a JPEG without metadata: nothing to remove, orientation 1', async () => {
    const plain = await canvas().jpeg().toBuffer()
    expect(await planStrip(chunks(plain), 'image/jpeg')).toEqual({ removed: 0, orientation: 1 })
    expect((await strip(plain, 'image/jpeg')).equals(plain)).toBe(true)
  })

  it('orientation 6: found, and reorient() answers the upright picture without the tag, ICC kept', async () => {
    const rotated = await canvas(64, 32).jpeg().withMetadata({ orientation: 6 }).withIccProfile('p3').toBuffer()
    expect((await planStrip(chunks(rotated), 'image/jpeg')).orientation).toBe(6)
    const out: Buffer[] = []
    for await (const part of reorient(Readable.from([rotated]), 'image/jpeg', 1e8)) out.push(part as Buffer)
    const meta = await sharp(Buffer.concat(out)).metadata()
    expect([meta.width, meta.height, meta.orientation, meta.exif]).toEqual([32, 64, undefined, undefined])
    expect(meta.icc).toBeDefined()
  })
})

function pngChunk(type: string, data: Buffer): Buffer {
  const head = Buffer.alloc(8)
  head.writeUInt32BE(data.length, 0)
  head.write(type, 4, 'latin1')
  const crc = Buffer.alloc(4)
  crc.writeUInt32BE(crc32(Buffer.concat([head.subarray(4), data])), 0)
  return Buffer.concat([head, data, crc])
}

function pngChunkTypes(buf: Buffer): string[] {
  const out: string[] = []
  for (let i = 8; i + 8 <= buf.length; i += 12 + buf.readUInt32BE(i)) out.push(buf.toString('latin1', i + 4, i + 8))
  return out
}

describe('strip: PNG', () => {
  it('drops eXIf, tEXt, iTXt (XMP) and zTXt chunks, keeps iCCP and every other chunk untouched', async () => {
    const base = await canvas().png().withExif(GPS).withXmp(XMP).withIccProfile('p3').toBuffer()
    const iend = base.length - 12
    const original = Buffer.concat([
      base.subarray(0, 33),
      pngChunk('tEXt', Buffer.from('Author\0someone', 'latin1')),
      pngChunk('iTXt', Buffer.from(`XML:com.adobe.xmp\0\0\0\0\0${XMP}`, 'latin1')),
      base.subarray(33, iend),
      pngChunk('zTXt', Buffer.from('Comment\0\0x', 'latin1')),
      base.subarray(iend),
    ])
    expect(pngChunkTypes(original)).toEqual(expect.arrayContaining(['eXIf', 'tEXt', 'iTXt', 'zTXt', 'iCCP']))
    const stripped = await strip(original, 'image/png')
    const types = pngChunkTypes(stripped)
    expect(types.filter((t) => ['eXIf', 'tEXt', 'iTXt', 'zTXt'].includes(t))).toEqual([])
    expect(types).toContain('iCCP')
    expect(types.at(-1)).toBe('IEND')
    const meta = await sharp(stripped).metadata()
    expect([meta.exif, meta.xmp]).toEqual([undefined, undefined])
    expect(meta.icc).toBeDefined()
    expect((await pixels(stripped)).equals(await pixels(original))).toBe(true)
  })

  it('a PNG without metadata is left as it is', async () => {
    const plain = await canvas().png().toBuffer()
    expect((await planStrip(chunks(plain), 'image/png')).removed).toBe(0)
    expect((await strip(plain, 'image/png')).equals(plain)).toBe(true)
  })
})

describe('strip: WebP', () => {
  it('drops the EXIF and XMP chunks, clears their VP8X flags, fixes the RIFF size, keeps ICCP', async () => {
    const original = await canvas().webp({ lossless: true }).withExif(GPS).withXmp(XMP).withIccProfile('p3').toBuffer()
    expect(original.includes(Buffer.from('EXIF'))).toBe(true)
    const stripped = await strip(original, 'image/webp')
    expect(stripped.includes(Buffer.from('EXIF'))).toBe(false)
    expect(stripped.includes(Buffer.from('XMP '))).toBe(false)
    expect(stripped.includes(Buffer.from('ICCP'))).toBe(true)
    expect(stripped.readUInt32LE(4)).toBe(stripped.length - 8)
    expect(stripped[20]! & 0x0c).toBe(0)
    const meta = await sharp(stripped).metadata()
    expect([meta.exif, meta.xmp, meta.width]).toEqual([undefined, undefined, 64])
    expect(meta.icc).toBeDefined()
    expect((await pixels(stripped)).equals(await pixels(original))).toBe(true)
  })

  it('a WebP without metadata is left as it is', async () => {
    const plain = await canvas().webp().toBuffer()
    expect((await planStrip(chunks(plain), 'image/webp')).removed).toBe(0)
    expect((await strip(plain, 'image/webp')).equals(plain)).toBe(true)
  })
})

/** A TIFF block: IFD0 at `ifd` with `count` entries claimed, the given entries, and IFD0's next link. */
function tiff(entries: Array<[number, number, number]>, options: { count?: number; ifd?: number; next?: number } = {}): Buffer {
  const ifd = options.ifd ?? 8
  const t = Buffer.alloc(Math.max(ifd, 8) + 2 + entries.length * 12 + 4)
  t.write('II', 0, 'latin1')
  t.writeUInt16LE(42, 2)
  t.writeUInt32LE(ifd, 4)
  if (ifd + 2 <= t.length) t.writeUInt16LE(options.count ?? entries.length, ifd)
  entries.forEach(([tag, type, value], i) => {
    const e = ifd + 2 + i * 12
    t.writeUInt16LE(tag, e)
    t.writeUInt16LE(type, e + 2)
    t.writeUInt32LE(1, e + 4)
    t.writeUInt16LE(value, e + 8)
  })
  if (ifd + 2 + entries.length * 12 + 4 <= t.length) t.writeUInt32LE(options.next ?? 0, ifd + 2 + entries.length * 12)
  return t
}

function app1Exif(block: Buffer): Buffer {
  const head = Buffer.from([0xff, 0xe1, 0, 0])
  head.writeUInt16BE(block.length + 8, 2)
  return Buffer.concat([head, Buffer.from('Exif\0\0'), block])
}

describe('strip: hostile input', () => {
  it('reads the orientation of IFD0 only: lying counts, offsets past the end and IFD loops answer at once', () => {
    expect(exifOrientation(tiff([[0x0112, 3, 6]]))).toBe(6)
    expect(exifOrientation(tiff([[0x0112, 3, 6]], { next: 8 }))).toBe(6) // IFD0 links to itself
    expect(exifOrientation(tiff([[0x0100, 3, 6]], { count: 65535, next: 8 }))).toBe(1) // claims 65535 entries
    expect(exifOrientation(tiff([], { ifd: 0xfffffff0 }))).toBe(1)
    expect(exifOrientation(tiff([[0x0112, 4, 6]]))).toBe(1) // wrong type
    expect(exifOrientation(tiff([[0x0112, 3, 99]]))).toBe(1)
    expect(exifOrientation(Buffer.from('MM\0\x2a'))).toBe(1)
  })

  it('a JPEG whose EXIF lies or loops is stripped; lengths past the end and truncated files are refused with StripError', async () => {
    const plain = await canvas().jpeg().toBuffer()
    const splice = (seg: Buffer) => Buffer.concat([plain.subarray(0, 2), seg, plain.subarray(2)])
    const started = Date.now()
    const looping = splice(app1Exif(tiff([[0x0100, 3, 1]], { count: 65535, next: 8 })))
    expect((await strip(looping, 'image/jpeg')).equals(plain)).toBe(true)
    // A segment length past the end of the file.
    const past = Buffer.concat([plain.subarray(0, 2), Buffer.from([0xff, 0xe1, 0xff, 0xff]), Buffer.from('Exif\0\0')])
    await expect(planStrip(chunks(past), 'image/jpeg')).rejects.toMatchObject({ code: 'corrupt', metadataSeen: true })
    await expect(planStrip(chunks(plain.subarray(0, 30)), 'image/jpeg')).rejects.toMatchObject({ metadataSeen: false })
    // Truncated before the scan, and garbage where a marker should be.
    await expect(planStrip(chunks(plain.subarray(0, 30)), 'image/jpeg')).rejects.toBeInstanceOf(StripError)
    await expect(planStrip(chunks(Buffer.from([0xff, 0xd8, 0x00, 0x01])), 'image/jpeg')).rejects.toBeInstanceOf(StripError)
    await expect(
      planStrip(chunks(Buffer.concat([Buffer.from([0xff, 0xd8]), Buffer.alloc(5000, 0xff)])), 'image/jpeg'),
    ).rejects.toBeInstanceOf(StripError)
    // A PNG chunk claiming 2 GiB, a WebP chunk past its RIFF size.
    const png = await canvas().png().toBuffer()
    const bigChunk = Buffer.from(png)
    bigChunk.writeUInt32BE(0x7ffffff0, 8)
    await expect(planStrip(chunks(bigChunk, 4096), 'image/png')).rejects.toBeInstanceOf(StripError)
    const webp = Buffer.from(await canvas().webp().toBuffer())
    webp.writeUInt32LE(0x7ffffff0, 16)
    await expect(planStrip(chunks(webp), 'image/webp')).rejects.toBeInstanceOf(StripError)
    expect(Date.now() - started).toBeLessThan(2000)
  })
})

/** The bytes through a {@link JpegStripper} in chunks of `size`: its output and what it did. */
async function stripOnReceipt(buf: Buffer, size: number): Promise<{ out: Buffer; result: StreamStrip }> {
  const stripper = new JpegStripper()
  const out: Buffer[] = []
  stripper.on('data', (c: Buffer) => out.push(c))
  const done = new Promise((resolve, reject) => stripper.on('end', resolve).on('error', reject))
  Readable.from(chunks(buf, size)).pipe(stripper)
  await done
  return { out: Buffer.concat(out), result: stripper.result }
}

describe('strip on receipt (JpegStripper)', () => {
  it('gives the bytes the post-pass gives, whatever the chunking: GPS, XMP, IPTC, ICC, a looping EXIF, nothing to remove', async () => {
    const plain = await canvas().jpeg().toBuffer()
    const inputs = [
      withIptc(await canvas().jpeg().withExif(GPS).withXmp(XMP).withIccProfile('p3').toBuffer()),
      Buffer.concat([plain.subarray(0, 2), app1Exif(tiff([[0x0100, 3, 1]], { count: 65535, next: 8 })), plain.subarray(2)]),
      plain,
    ]
    for (const input of inputs) {
      const expected = await strip(input, 'image/jpeg')
      for (const size of [1, 7, 4096, 1 << 20]) {
        const { out, result } = await stripOnReceipt(input, size)
        expect(out.equals(expected)).toBe(true)
        expect(result).toEqual({ outcome: 'stripped', removed: input.length - expected.length })
      }
    }
    expect((await stripOnReceipt(plain, 5)).out.equals(plain)).toBe(true)
  })

  it('a 64 KiB EXIF block trickled in byte by byte costs no quadratic copying', async () => {
    const plain = await canvas().jpeg().toBuffer()
    const exif = app1Exif(Buffer.concat([tiff([[0x0112, 3, 1]]), Buffer.alloc(65_000)]))
    const input = Buffer.concat([plain.subarray(0, 2), exif, plain.subarray(2)])
    const started = performance.now()
    const { out, result } = await stripOnReceipt(input, 1)
    expect(performance.now() - started).toBeLessThan(1500)
    expect(result).toEqual({ outcome: 'stripped', removed: exif.length })
    expect(out.equals(plain)).toBe(true)
  })

  it('an orientation to apply: the EXIF block stays for the post-pass, which finds it', async () => {
    const input = await canvas().jpeg().withMetadata({ orientation: 6 }).withXmp(XMP).toBuffer()
    const { out, result } = await stripOnReceipt(input, 7)
    expect(result.outcome).toBe('orient')
    expect((await planStrip(chunks(out), 'image/jpeg')).orientation).toBe(6)
    expect((await pixels(out)).equals(await pixels(input))).toBe(true)
  })

  it('not a JPEG, or a walk broken before any removal: every byte through as it was; broken after one: corrupt', async () => {
    const plain = await canvas().jpeg().toBuffer()
    const png = await canvas().png().toBuffer()
    const fill = Buffer.concat([Buffer.from([0xff, 0xd8]), Buffer.alloc(5000, 0xff)])
    for (const input of [png, plain.subarray(0, 30), fill, Buffer.from([0xff, 0xd8, 0x00, 0x01]), Buffer.from([0xff])]) {
      const { out, result } = await stripOnReceipt(input, 7)
      expect(result).toEqual({ outcome: 'not-jpeg', removed: 0 })
      expect(out.equals(input)).toBe(true)
    }
    const exif = app1Exif(tiff([[0x0100, 3, 1]]))
    const truncated = Buffer.concat([plain.subarray(0, 2), exif, plain.subarray(2, 30)])
    const { result } = await stripOnReceipt(truncated, 7)
    expect(result).toMatchObject({ outcome: 'corrupt', removed: exif.length, error: { code: 'corrupt', metadataSeen: true } })
    const garbage = Buffer.concat([plain.subarray(0, 2), exif, Buffer.from([0x00, 0x01]), plain.subarray(2)])
    expect((await stripOnReceipt(garbage, 3)).result.outcome).toBe('corrupt')
  })
})
