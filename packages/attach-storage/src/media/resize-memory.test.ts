/**
 * Memory on request: the decoder is never handed a stream (which it buffers whole), only a file path or
 * a bounded head; a remote original is spooled to a temporary file that is always removed; and every
 * source stream is destroyed on every error path. sharp is wrapped to record what it is given.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { afterEach, beforeAll, beforeEach, describe, expect, it, vi } from 'vitest'
import { imageDimensions, type FileProbe } from '../filters/filters.js'
import type { ByteRange, Store } from '../stores/store.js'
import { Resizer } from './resize.js'
import { METADATA_HEAD_BYTES } from './spool.js'

const { inputs } = vi.hoisted(() => ({ inputs: [] as unknown[] }))
vi.mock('sharp', async (importOriginal) => {
  const real = ((await importOriginal()) as { default: (...args: unknown[]) => unknown }).default
  const wrapped = Object.assign((...args: unknown[]) => {
    inputs.push(args[0])
    return (real as (...a: unknown[]) => unknown)(...args)
  }, real)
  return { default: wrapped }
})
const sharp = (await import('sharp')).default

const CHUNK = 64 * 1024

/** A source that counts what it delivered and whether it was destroyed. */
class Source extends Readable {
  delivered = 0
  #offset: number
  constructor(
    private readonly bytes: Buffer,
    start: number,
    private readonly end: number,
    private readonly failAfter?: number,
  ) {
    super()
    this.#offset = start
  }
  override _read(): void {
    if (this.failAfter !== undefined && this.delivered >= this.failAfter) {
      this.destroy(new Error('connection reset'))
      return
    }
    if (this.#offset > this.end) {
      this.push(null)
      return
    }
    const chunk = this.bytes.subarray(this.#offset, Math.min(this.#offset + CHUNK, this.end + 1))
    this.#offset += chunk.length
    this.delivered += chunk.length
    this.push(chunk)
  }
}

/** An in-memory store without `localPath`: what the resizer sees of S3, Azure, SFTP or FTP. */
function remoteStore(objects: Map<string, Buffer>, options: { failAfter?: number } = {}) {
  const streams: Array<{ range?: ByteRange; source: Source }> = []
  const puts: string[] = []
  const store: Store = {
    name: 'remote',
    type: 'test',
    async put(key, body) {
      objects.set(key, Buffer.from(body as Uint8Array))
      puts.push(key)
      return { size: (body as Uint8Array).length }
    },
    async get(key, range) {
      const bytes = objects.get(key)
      if (!bytes) throw Object.assign(new Error('missing'), { code: 'not-found' })
      const source = new Source(bytes, range?.start ?? 0, Math.min(range?.end ?? Infinity, bytes.length - 1), options.failAfter)
      streams.push({ range, source })
      return source
    },
    async stat(key) {
      const bytes = objects.get(key)
      if (!bytes) throw Object.assign(new Error('missing'), { code: 'not-found' })
      return { size: bytes.length, lastModified: new Date() }
    },
    exists: async (key) => objects.has(key),
    move: async () => {},
    copy: async () => {},
    delete: async (key) => void objects.delete(key),
    async *list(prefix) {
      for (const [key, b] of objects) if (key.startsWith(prefix)) yield { key, size: b.length, lastModified: new Date() }
    },
    close: async () => {},
  }
  return { store, streams, puts }
}

/** Only file paths and buffers no larger than `max` reached the decoder. */
function expectBoundedInputs(max: number) {
  expect(inputs.length).toBeGreaterThan(0)
  for (const input of inputs) {
    if (typeof input === 'string') continue
    expect(Buffer.isBuffer(input), `sharp was given ${Object.prototype.toString.call(input)}`).toBe(true)
    expect((input as Buffer).length).toBeLessThanOrEqual(max)
  }
}

const req = (w: number) => ({ w, h: undefined, format: undefined, negotiated: false })

describe('resize and filters: memory and leaks', () => {
  let spoolDir: string
  let photo: Buffer
  beforeAll(async () => {
    // A noisy 3000×2000 photo: several megabytes, far more than the head the resizer reads first.
    photo = await sharp({
      create: { width: 3000, height: 2000, channels: 3, noise: { type: 'gaussian', mean: 128, sigma: 40 } },
    } as never)
      .jpeg({ quality: 90 })
      .toBuffer()
    expect(photo.length).toBeGreaterThan(4 * METADATA_HEAD_BYTES)
  })
  beforeEach(async () => {
    spoolDir = await mkdtemp(join(tmpdir(), 'attach-spool-test-'))
    inputs.length = 0
  })
  afterEach(async () => {
    await rm(spoolDir, { recursive: true, force: true })
  })

  it('resizes a remote original from a spooled file: the decoder gets a path, never the stream; the spool file goes', async () => {
    const { store, streams, puts } = remoteStore(new Map([['o.jpg', photo]]))
    const r = new Resizer({ maxInputPixels: 1e8, spoolDir })
    const errors: unknown[] = []
    const v = await r.variant(store, 'o.jpg', 'v/300x0', 'image/jpeg', req(300), (e) => errors.push(e))
    expect(errors).toEqual([])
    expect(v?.bytes).toBeDefined()
    const meta = await sharp(v!.bytes!).metadata()
    expect([meta.width, meta.height]).toEqual([300, 200])
    expect(puts).toEqual(['v/300x0'])
    expectBoundedInputs(METADATA_HEAD_BYTES)
    // The head first (a ranged read), then the whole original once, into the spool file.
    expect(streams.map((s) => s.range)).toEqual([{ start: 0, end: METADATA_HEAD_BYTES - 1 }, undefined])
    expect(streams.every((s) => s.source.destroyed)).toBe(true)
    expect(await readdir(spoolDir)).toEqual([])
  })

  it('reads only the head of a remote original that needs no resize', async () => {
    const { store, streams } = remoteStore(new Map([['o.jpg', photo]]))
    const r = new Resizer({ maxInputPixels: 1e8, spoolDir })
    expect(await r.variant(store, 'o.jpg', 'v/4000x0', 'image/jpeg', req(4000), () => {})).toBeUndefined()
    expect(streams).toHaveLength(1)
    expect(streams[0]!.source.delivered).toBeLessThanOrEqual(METADATA_HEAD_BYTES)
    expect(streams[0]!.source.destroyed).toBe(true)
    expectBoundedInputs(METADATA_HEAD_BYTES)
    expect(await readdir(spoolDir)).toEqual([])
  })

  it("with the size as shown known (a record's media), reads a remote original once, whole, and never its head", async () => {
    const { store, streams, puts } = remoteStore(new Map([['o.jpg', photo]]))
    const r = new Resizer({ maxInputPixels: 1e8, spoolDir })
    const v = await r.variant(store, 'o.jpg', 'v/300x0', 'image/jpeg', req(300), () => {}, { size: { width: 3000, height: 2000 } })
    const meta = await sharp(v!.bytes!).metadata()
    expect([meta.width, meta.height]).toEqual([300, 200])
    expect(puts).toEqual(['v/300x0'])
    expect(streams.map((s) => s.range)).toEqual([undefined])
    expect(await readdir(spoolDir)).toEqual([])
  })

  it('with the size as shown known, reads nothing of an original that needs no resize', async () => {
    const { store, streams } = remoteStore(new Map([['o.jpg', photo]]))
    const r = new Resizer({ maxInputPixels: 1e8, spoolDir })
    expect(
      await r.variant(store, 'o.jpg', 'v/4000x0', 'image/jpeg', req(4000), () => {}, { size: { width: 3000, height: 2000 } }),
    ).toBeUndefined()
    expect(streams).toEqual([])
  })

  it('a known size past the pixel bound is refused before anything is read', async () => {
    const { store, streams } = remoteStore(new Map([['o.jpg', photo]]))
    const r = new Resizer({ maxInputPixels: 1e6, spoolDir })
    const errors: unknown[] = []
    expect(
      await r.variant(store, 'o.jpg', 'v/300x0', 'image/jpeg', req(300), (e) => errors.push(e), { size: { width: 3000, height: 2000 } }),
    ).toBeUndefined()
    expect(String(errors[0])).toMatch(/more than 1000000 pixels/)
    expect(streams).toEqual([])
  })

  it('destroys the source and removes the spool file when sharp fails on a corrupt original', async () => {
    // A valid header (3000×2000) followed by 0xFF bytes: the header reads, the decode fails. In the coded
    // data 0xFF starts a marker and further 0xFF bytes are fill, so the decoder reads on to the end of the
    // file and stops there, truncated, whatever the photo's Huffman tables. (Other garbage is not certain to
    // fail: with some tables a tail of 0x5A bytes decodes whole into a flat grey picture.)
    const corrupt = Buffer.concat([photo.subarray(0, 2000), Buffer.alloc(photo.length - 2000, 0xff)])
    const { store, streams, puts } = remoteStore(new Map([['o.jpg', corrupt]]))
    const r = new Resizer({ maxInputPixels: 1e8, spoolDir })
    const errors: unknown[] = []
    expect(await r.variant(store, 'o.jpg', 'v/300x0', 'image/jpeg', req(300), (e) => errors.push(e))).toBeUndefined()
    expect(errors).toHaveLength(1)
    expect(puts).toEqual([])
    expect(streams.length).toBeGreaterThan(0)
    expect(streams.every((s) => s.source.destroyed)).toBe(true)
    expect(await readdir(spoolDir)).toEqual([])
  })

  it('destroys the source and removes the partial spool file when the store fails mid-stream', async () => {
    const { store, streams, puts } = remoteStore(new Map([['o.jpg', photo]]), { failAfter: METADATA_HEAD_BYTES + 3 * CHUNK })
    const r = new Resizer({ maxInputPixels: 1e8, spoolDir })
    const errors: unknown[] = []
    expect(await r.variant(store, 'o.jpg', 'v/300x0', 'image/jpeg', req(300), (e) => errors.push(e))).toBeUndefined()
    expect(String(errors[0])).toContain('connection reset')
    expect(puts).toEqual([])
    expect(streams.every((s) => s.source.destroyed)).toBe(true)
    expect(await readdir(spoolDir)).toEqual([])
  })

  it('destroys the source, unread, when the spool file cannot be written', async () => {
    const { store, streams } = remoteStore(new Map([['o.jpg', photo]]))
    const r = new Resizer({ maxInputPixels: 1e8, spoolDir: join(spoolDir, 'missing') })
    const errors: unknown[] = []
    expect(await r.variant(store, 'o.jpg', 'v/300x0', 'image/jpeg', req(300), (e) => errors.push(e))).toBeUndefined()
    expect(errors).toHaveLength(1)
    const whole = streams.find((s) => s.range === undefined)!
    expect(whole.source.destroyed).toBe(true)
    expect(whole.source.delivered).toBeLessThan(photo.length)
  })

  describe('filters: imageDimensions', () => {
    const probe = (bytes: Buffer, opened: Source[]): FileProbe => ({
      displayName: 'x.jpg',
      extension: 'jpg',
      size: bytes.length,
      type: 'image/jpeg',
      sha256: '',
      head: new Uint8Array(bytes.subarray(0, CHUNK)),
      async open() {
        const s = new Source(bytes, 0, bytes.length - 1)
        opened.push(s)
        return s
      },
    })
    let previousTmp: string | undefined
    beforeEach(() => {
      previousTmp = process.env.TMPDIR
      process.env.TMPDIR = spoolDir
    })
    afterEach(() => {
      if (previousTmp === undefined) delete process.env.TMPDIR
      else process.env.TMPDIR = previousTmp
    })

    it('reads a header past the head from a spooled file, not from a stream handed to sharp', async () => {
      // 2.6 MB of APP15 segments between SOI and the rest: the frame header is far past the 64 KiB head.
      const segment = Buffer.alloc(65535 + 2, 0x20)
      segment.set([0xff, 0xef, 0xff, 0xff])
      const padded = Buffer.concat([photo.subarray(0, 2), ...Array.from({ length: 40 }, () => segment), photo.subarray(2)])
      const opened: Source[] = []
      inputs.length = 0
      expect(await imageDimensions(probe(padded, opened))).toEqual({ width: 3000, height: 2000 })
      expectBoundedInputs(CHUNK)
      expect(opened).toHaveLength(1)
      expect(opened[0]!.destroyed).toBe(true)
      expect(await readdir(spoolDir)).toEqual([])
    })

    it('destroys the source and removes the spool file when sharp fails', async () => {
      const garbage = Buffer.alloc(3 * 1024 * 1024, 0x5a)
      garbage.set([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00])
      const opened: Source[] = []
      inputs.length = 0
      expect(await imageDimensions(probe(garbage, opened))).toBeUndefined()
      expectBoundedInputs(CHUNK)
      expect(opened).toHaveLength(1)
      expect(opened[0]!.destroyed).toBe(true)
      expect(await readdir(spoolDir)).toEqual([])
    })

    it('does not open the content when the head is the whole file', async () => {
      const small = photo.subarray(0, 1000)
      const opened: Source[] = []
      const p = probe(small, opened)
      expect(await imageDimensions({ ...p, size: small.length })).toEqual({ width: 3000, height: 2000 })
      expect(opened).toEqual([])
    })
  })
})
