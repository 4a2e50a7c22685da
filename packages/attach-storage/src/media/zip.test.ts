import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { mkdtemp, open, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createZipStream, isCompressed, uniqueNames, type ZipSource, zipProgress } from './zip.js'

let dir: string
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'attach-zip64-'))
})
afterAll(async () => {
  await rm(dir, { recursive: true, force: true })
})

const src = (name: string, data: string | Buffer, compress = true): ZipSource => ({
  name,
  size: Buffer.byteLength(data),
  mtime: new Date('2026-11-22T10:20:30Z'),
  compress,
  open: async () => Readable.from([Buffer.from(data)]),
})

/** Checks an archive with Python's zipfile: CRCs, names, flags, sizes, contents of the small members. */
function inspect(file: string, read: string[] = []): any {
  const script = `
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
want = json.loads(sys.argv[2])
out = {"entries": [{"name": i.filename, "utf8": bool(i.flag_bits & 0x800), "method": i.compress_type, "size": i.file_size, "offset": i.header_offset} for i in z.infolist()]}
out["data"] = {n: z.read(n).decode("utf-8") for n in want}
if not want: out["bad"] = z.testzip()
print(json.dumps(out))
`
  return JSON.parse(execFileSync('python3', ['-c', script, file, JSON.stringify(read)], { maxBuffer: 1 << 24 }).toString())
}

/** `size` zero bytes as views of `zeros` (never written to, so every view may share it). */
function* zeroChunks(size: number, zeros: Buffer): Generator<Buffer> {
  for (let left = size; left > 0; left -= zeros.length) yield zeros.subarray(0, Math.min(left, zeros.length))
}

describe('createZipStream', () => {
  it('writes an archive that a standard reader accepts', async () => {
    const file = join(dir, 'small.zip')
    const skipped: string[] = []
    const sources: ZipSource[] = [
      src('hello.txt', 'hello '.repeat(500)),
      src('사진 모음/가.txt', '한국어 내용'),
      { ...src('gone.txt', 'x'), open: () => Promise.reject(new Error('missing')) },
      src('stored.bin', Buffer.alloc(1000, 7), false),
      src('empty.txt', ''),
    ]
    await pipeline(createZipStream(sources, { onSkip: (s) => skipped.push(s.name) }), createWriteStream(file))
    const z = inspect(file)
    expect(z.bad).toBeNull()
    expect(skipped).toEqual(['gone.txt'])
    expect(z.entries.map((e: any) => [e.name, e.utf8, e.method, e.size])).toEqual([
      ['hello.txt', true, 8, 3000],
      ['사진 모음/가.txt', true, 8, Buffer.byteLength('한국어 내용')],
      ['stored.bin', true, 0, 1000],
      ['empty.txt', true, 8, 0],
    ])
    expect(inspect(file, ['사진 모음/가.txt']).data['사진 모음/가.txt']).toBe('한국어 내용')
  })

  it('writes an empty archive for no sources', async () => {
    const chunks: Buffer[] = []
    for await (const c of createZipStream([])) chunks.push(c)
    const buf = Buffer.concat(chunks)
    expect(buf.length).toBe(22)
    expect(buf.readUInt32LE(0)).toBe(0x06054b50)
  })

  it('switches to zip64 past 4 GiB (sizes and offsets), read back by a standard reader', async () => {
    // 4.2 GiB of zeros made in memory, 4 MiB views of one zeroed buffer: reading as many bytes from a
    // sparse file took 16 s of the test's 26 (the kernel zeroes and copies every page); the archive
    // itself is written to disk.
    const size = 4.2 * 1024 ** 3 - ((4.2 * 1024 ** 3) % 4096)
    const zeros = Buffer.alloc(4 << 20)
    const file = join(dir, 'big.zip')
    const sources: ZipSource[] = [
      src('before.txt', 'before'),
      { name: 'big.bin', size, mtime: new Date(), compress: false, open: async () => Readable.from(zeroChunks(size, zeros)) },
      src('after.txt', 'after the 4 GiB mark'),
    ]
    // All-zero chunks become holes, so the 4.2 GiB archive costs no disk and no write time either.
    const out = await open(file, 'w')
    let position = 0
    await pipeline(
      createZipStream(sources),
      new Writable({
        async write(chunk: Buffer, _e, cb) {
          try {
            if (chunk.length > zeros.length || !chunk.equals(zeros.subarray(0, chunk.length))) {
              await out.write(chunk, 0, chunk.length, position)
            }
            position += chunk.length
            cb()
          } catch (err) {
            cb(err as Error)
          }
        },
      }),
    )
    await out.truncate(position)
    await out.close()
    const z = inspect(file, ['before.txt', 'after.txt'])
    expect(z.entries.map((e: any) => [e.name, e.size])).toEqual([
      ['before.txt', 6],
      ['big.bin', size],
      ['after.txt', 20],
    ])
    expect(z.entries[2].offset).toBeGreaterThan(2 ** 32)
    expect(z.data['after.txt']).toBe('after the 4 GiB mark')
    await rm(file)
  }, 180_000)
})

/** A source of `total` bytes of one repeated log line (it deflates about a thousand to one), counting what it delivered. */
class LogSource extends Readable {
  delivered = 0
  static readonly LINE = Buffer.from('2026-11-27 08:30:00 INFO the same line of a very repetitive log file\n'.repeat(950))
  constructor(private readonly total: number) {
    super()
  }
  override _read(): void {
    const left = this.total - this.delivered
    if (left <= 0) return void this.push(null)
    const chunk = LogSource.LINE.subarray(0, Math.min(left, LogSource.LINE.length))
    this.delivered += chunk.length
    this.push(chunk)
  }
}

/** A socket whose peer reads nothing: it takes `capacity` bytes, then never calls back. */
const stalledSocket = (capacity: number) => {
  let taken = 0
  return new Writable({
    highWaterMark: 16 * 1024,
    write(chunk: Buffer, _e, cb) {
      taken += chunk.length
      if (taken <= capacity) cb()
    },
  })
}

const MB = 1024 * 1024
const wait = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe('createZipStream back-pressure', () => {
  it('stops reading when its reader takes nothing, even for a file that deflates a thousand to one', async () => {
    const logs = Array.from({ length: 10 }, () => new LogSource(20 * MB))
    const zip = createZipStream(
      logs.map((l, i) => ({ name: `log-${i}.txt`, size: 20 * MB, mtime: new Date(), compress: true, open: async () => l })),
    )
    // A socket and its kernel buffers holding 4 MB, whose client reads nothing.
    zip.pipe(stalledSocket(4 * MB))
    const delivered = () => logs.reduce((n, l) => n + l.delivered, 0)
    let last = -1
    const started = performance.now()
    while (delivered() !== last && performance.now() - started < 20_000) {
      last = delivered()
      await wait(300)
    }
    const progress = zipProgress(zip)
    console.log(
      `client reads nothing: ${(delivered() / MB).toFixed(1)} MB of 200 MB read, ${((progress?.written ?? 0) / MB).toFixed(2)} MB of archive written`,
    )
    expect(delivered()).toBeLessThan(100 * MB)
    expect(progress!.read).toBeLessThanOrEqual(delivered())
    expect(progress!.read).toBeLessThanOrEqual(16 * progress!.written + 8 * MB + 2 * MB)
    zip.destroy()
  }, 30_000)

  it('writes a valid archive while it switches between deflating and storing', async () => {
    const file = join(dir, 'paced.zip')
    // Mixed data: long runs of one line (deflate far past the ratio) and random bytes.
    const noise = Buffer.from(Array.from({ length: 300_000 }, (_, i) => (i * 2654435761) >>> 24))
    const parts = [LogSource.LINE, noise, LogSource.LINE, LogSource.LINE, noise, LogSource.LINE]
    const body = Buffer.concat(Array.from({ length: 8 }, () => parts).flat())
    const sources: ZipSource[] = [
      { ...src('mixed.txt', body), open: async () => Readable.from(Array.from({ length: 8 }, () => parts).flat()) },
      src('small.txt', 'small'),
    ]
    const zip = createZipStream(sources, { maxRatio: 2, ratioSlack: 0 })
    await pipeline(zip, createWriteStream(file))
    const z = inspect(file)
    expect(z.bad).toBeNull()
    expect(z.entries.map((e: any) => [e.name, e.method, e.size])).toEqual([
      ['mixed.txt', 8, body.length],
      ['small.txt', 8, 5],
    ])
    const script = 'import sys,zipfile,hashlib; print(hashlib.sha256(zipfile.ZipFile(sys.argv[1]).read("mixed.txt")).hexdigest())'
    const data = execFileSync('python3', ['-c', script, file])
    expect(data.toString().trim()).toBe(createHash('sha256').update(body).digest('hex'))
    const p = zipProgress(zip)!
    expect(p.read).toBe(body.length + 5)
    expect(p.read).toBeLessThanOrEqual(2 * p.written + 512 * 1024)
  })

  it('closes cleanly when its reader goes away at any point, also while the deflate level changes', async () => {
    for (let n = 1; n <= 12; n++) {
      const log = new LogSource(8 * MB)
      const zip = createZipStream([{ name: 'a.txt', size: 8 * MB, mtime: new Date(), compress: true, open: async () => log }], {
        maxRatio: 1,
        ratioSlack: 0,
      })
      let chunks = 0
      await new Promise<void>((resolve) => {
        zip.on('data', () => {
          if (++chunks === n) {
            zip.destroy()
            resolve()
          }
        })
        zip.on('end', resolve)
      })
      await wait(20)
      expect(log.destroyed).toBe(true)
    }
  })
})

describe('uniqueNames', () => {
  it('numbers duplicates name_1.ext, name_2.ext and cleans paths', () => {
    const u = uniqueNames()
    expect(['a.txt', 'a.txt', 'A.TXT', 'b', 'b', '../x', 'a_1.txt'].map(u)).toEqual([
      'a.txt',
      'a_1.txt',
      'A_2.TXT',
      'b',
      'b_1',
      '__x',
      'a_1_1.txt',
    ])
  })
})

describe('isCompressed', () => {
  it('stores compressed types and deflates the rest', () => {
    for (const t of ['image/jpeg', 'image/png', 'video/mp4', 'audio/mpeg', 'application/zip', 'application/pdf', 'application/gzip']) {
      expect(isCompressed(t), t).toBe(true)
    }
    for (const t of ['text/plain', 'application/json', 'image/svg+xml', 'application/octet-stream', 'image/bmp']) {
      expect(isCompressed(t), t).toBe(false)
    }
  })
})
