import { appendFile, mkdir, mkdtemp, readdir, readFile, rm, stat, symlink, utimes, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, relative, sep } from 'node:path'
import { PassThrough, Readable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { describeStoreConformance } from '../testing.js'
import { LocalStore, renameAcross } from './local-store.js'

// rename() fails with EXDEV for one chosen source path, to exercise move's copy + unlink fallback;
// every fsync of a directory (a handle opened 'r') is recorded in `synced`.
const fsControl = vi.hoisted(() => ({ exdevFrom: undefined as string | undefined, synced: [] as string[] }))
vi.mock('node:fs/promises', async (importOriginal) => {
  const actual = await importOriginal<typeof import('node:fs/promises')>()
  const rename: typeof actual.rename = async (from, to) => {
    if (fsControl.exdevFrom !== undefined && from === fsControl.exdevFrom) {
      fsControl.exdevFrom = undefined
      throw Object.assign(new Error('EXDEV: cross-device link not permitted (simulated)'), { code: 'EXDEV' })
    }
    return actual.rename(from, to)
  }
  const open = (async (path: Parameters<typeof actual.open>[0], flags?: string | number, mode?: number) => {
    const handle = await actual.open(path, flags, mode)
    if (flags === 'r') {
      const sync = handle.sync.bind(handle)
      handle.sync = async () => {
        await sync()
        if ((await handle.stat()).isDirectory()) fsControl.synced.push(String(path))
      }
    }
    return handle
  }) as typeof actual.open
  return { ...actual, rename, open, default: { ...actual, rename, open } }
})

/** Every path under `dir`, relative, `/`-separated, directories with a trailing `/`. */
async function tree(dir: string): Promise<string[]> {
  const entries = await readdir(dir, { recursive: true, withFileTypes: true })
  return entries
    .map((e) => {
      const path = relative(dir, join(e.parentPath ?? e.path, e.name))
        .split(sep)
        .join('/')
      return e.isDirectory() ? `${path}/` : path
    })
    .sort()
}

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const item of items) out.push(item)
  return out
}

async function failure(fn: () => unknown): Promise<unknown> {
  try {
    await fn()
  } catch (err) {
    return err
  }
  return expect.unreachable('expected a failure')
}

const notFound = { name: 'AttachStorageError', code: 'not-found', status: 404 }
const badKey = { name: 'AttachStorageError', code: 'bad-key', status: 400 }

describeStoreConformance('LocalStore', async () => {
  const root = await mkdtemp(join(tmpdir(), 'attach-local-conformance-'))
  const baseDir = join(root, 'base')
  return {
    store: new LocalStore('local', { baseDir }),
    cleanup: async () => {
      try {
        // Nothing was written next to baseDir (traversal), and no temporary file was left inside it.
        expect(await readdir(root)).toEqual(['base'])
        expect((await tree(baseDir)).filter((p) => p.endsWith('.partial'))).toEqual([])
      } finally {
        await rm(root, { recursive: true, force: true })
      }
    },
  }
})

describe('LocalStore (local file system specifics)', () => {
  let root: string
  let n = 0
  /** A store on `<root>/<n>/base` and a sibling directory `<root>/<n>/outside`. */
  const fresh = async (): Promise<{ store: LocalStore; base: string; outside: string }> => {
    const dir = join(root, String(++n))
    const outside = join(dir, 'outside')
    await mkdir(outside, { recursive: true })
    const base = join(dir, 'base')
    return { store: new LocalStore('local', { baseDir: base }), base, outside }
  }

  beforeAll(async () => {
    root = await mkdtemp(join(tmpdir(), 'attach-local-store-'))
  })
  afterAll(async () => {
    await rm(root, { recursive: true, force: true })
  })

  it('creates baseDir on the first write, not on reads', async () => {
    const { store, base } = await fresh()
    expect(await store.exists('a/b')).toBe(false)
    expect(await failure(() => store.get('a/b'))).toMatchObject(notFound)
    expect(await failure(() => store.stat('a/b'))).toMatchObject(notFound)
    expect(await collect(store.list(''))).toEqual([])
    await store.delete('a/b')
    await expect(stat(base)).rejects.toMatchObject({ code: 'ENOENT' })
    await store.put('a/b', Buffer.from('hi'))
    expect(await readFile(join(base, 'a', 'b'), 'utf8')).toBe('hi')
  })

  it('accepts a relative baseDir and resolves it once', () => {
    const store = new LocalStore('local', { baseDir: 'some/dir' })
    expect(store.baseDir).toBe(join(process.cwd(), 'some', 'dir'))
    expect(() => new LocalStore('local', { baseDir: '' })).toThrow(/baseDir/)
  })

  it('leaves no .partial file after a success, a failed source, an abort or a copy', async () => {
    const { store, base } = await fresh()
    await store.put('d/ok.bin', Buffer.alloc(1000, 1))
    await store.put('d/stream.bin', Readable.from([Buffer.alloc(10, 2), Buffer.alloc(10, 3)]))
    const failing = new Readable({
      read() {
        this.destroy(new Error('boom'))
      },
    })
    await expect(store.put('d/failed.bin', failing)).rejects.toThrow('boom')
    const controller = new AbortController()
    const stalled = new Readable({
      read() {
        this.push(Buffer.alloc(100))
        setImmediate(() => controller.abort())
      },
    })
    await expect(store.put('d/aborted.bin', stalled, { signal: controller.signal })).rejects.toThrow()
    await store.copy('d/ok.bin', 'e/copy.bin')
    expect(await tree(base)).toEqual(['d/', 'd/ok.bin', 'd/stream.bin', 'e/', 'e/copy.bin'])
  })

  it('a failed put into a new folder leaves that folder behind but no file in it', async () => {
    const { store, base } = await fresh()
    const failing = new Readable({
      read() {
        this.destroy(new Error('boom'))
      },
    })
    await expect(store.put('new/folder/x.bin', failing)).rejects.toThrow('boom')
    expect((await tree(base)).filter((p) => !p.endsWith('/'))).toEqual([])
  })

  it('puts a key whose last segment is 255 characters long (the temporary name is shortened)', async () => {
    const { store } = await fresh()
    const key = `d/${'n'.repeat(255)}`
    await store.put(key, Buffer.from('x'))
    expect(await store.exists(key)).toBe(true)
  })

  it('delete removes emptied folders up to, not including, baseDir', async () => {
    const { store, base } = await fresh()
    await store.put('a/b/c/x', Buffer.from('x'))
    await store.put('a/y', Buffer.from('y'))
    await store.delete('a/b/c/x')
    expect(await tree(base)).toEqual(['a/', 'a/y'])
    await store.delete('a/y')
    expect(await tree(base)).toEqual([])
    expect((await stat(base)).isDirectory()).toBe(true)
  })

  it('move removes the emptied source folders', async () => {
    const { store, base } = await fresh()
    await store.put('from/deep/x', Buffer.from('x'))
    await store.move('from/deep/x', 'to/x')
    expect(await tree(base)).toEqual(['to/', 'to/x'])
  })

  it('move falls back to copy + unlink when rename crosses devices (EXDEV)', async () => {
    const { store, base } = await fresh()
    await store.put('src/x.bin', Buffer.from('cross-device'))
    fsControl.exdevFrom = store.localPath('src/x.bin')
    await store.move('src/x.bin', 'dst/x.bin')
    expect(fsControl.exdevFrom).toBeUndefined()
    expect(await tree(base)).toEqual(['dst/', 'dst/x.bin'])
    expect(await readFile(join(base, 'dst', 'x.bin'), 'utf8')).toBe('cross-device')
  })

  it('move fsyncs the target and the source directory, and the parents of the directories it creates', async () => {
    const { store, base } = await fresh()
    await store.put('from/deep/x', Buffer.from('x'))
    await store.put('from/deep/keep', Buffer.from('k'))
    fsControl.synced = []
    await store.move('from/deep/x', 'to/new/x')
    expect(fsControl.synced).toEqual(expect.arrayContaining([join(base, 'to', 'new'), join(base, 'from', 'deep'), join(base, 'to'), base]))
  })

  it('put fsyncs its directory and the parents of the directories it creates', async () => {
    const { store, base } = await fresh()
    await store.put('a/keep', Buffer.from('k'))
    fsControl.synced = []
    await store.put('a/b/c/x', Buffer.from('x'))
    expect(fsControl.synced).toEqual(expect.arrayContaining([join(base, 'a', 'b', 'c'), join(base, 'a', 'b'), join(base, 'a')]))
  })

  it('sweepPartials removes partial files older than the cutoff, and nothing else', async () => {
    const { store, base } = await fresh()
    await store.put('d/1/file.bin', Buffer.from('kept'))
    await mkdir(join(base, 'd', '2'), { recursive: true })
    const old = join(base, 'd', '2', '.x.bin.0123456789abcdef.partial')
    const young = join(base, 'd', '1', '.y.bin.fedcba9876543210.partial')
    const dotFile = join(base, 'd', '1', '.not-a-partial')
    for (const f of [old, young, dotFile]) await writeFile(f, 'half')
    const past = new Date(Date.now() - 3600_000)
    await utimes(old, past, past)
    await utimes(dotFile, past, past)
    expect(await store.sweepPartials(new Date(Date.now() - 60_000))).toBe(1)
    // The directory the old partial file left empty goes too.
    expect(await tree(base)).toEqual(['d/', 'd/1/', 'd/1/.not-a-partial', 'd/1/.y.bin.fedcba9876543210.partial', 'd/1/file.bin'])
    expect(await new LocalStore('none', { baseDir: join(base, 'missing') }).sweepPartials(new Date())).toBe(0)
  })

  it('a directory at a key is no object', async () => {
    const { store } = await fresh()
    await store.put('dir/inner.txt', Buffer.from('x'))
    expect(await store.exists('dir')).toBe(false)
    expect(await failure(() => store.get('dir'))).toMatchObject(notFound)
    expect(await failure(() => store.stat('dir'))).toMatchObject(notFound)
    expect(await failure(() => store.copy('dir', 'other'))).toMatchObject(notFound)
    expect(await failure(() => store.move('dir', 'other'))).toMatchObject(notFound)
    await store.delete('dir')
    expect(await store.exists('dir/inner.txt')).toBe(true)
  })

  it('get reads the file it opened, even when it is replaced or deleted afterwards', async () => {
    const { store } = await fresh()
    await store.put('k', Buffer.from('first version'))
    const stream = await store.get('k')
    await store.put('k', Buffer.from('second'))
    expect((await readAll(stream)).toString()).toBe('first version')
    const ranged = await store.get('k', { start: 1, end: 3 })
    await store.delete('k')
    expect((await readAll(ranged)).toString()).toBe('eco')
  })

  it('readBytes keeps a descriptor per file read, and never answers what a change through the store replaced', async () => {
    const { store: a } = await fresh()
    const { store: b } = await fresh()
    const text = async (s: LocalStore, key: string, length = 64) => Buffer.from(await s.readBytes(key, 0, length)).toString()
    await a.put('k/one', Buffer.from('first version'))
    expect(await text(a, 'k/one')).toBe('first version')
    await a.put('k/one', Buffer.from('second'))
    expect(await text(a, 'k/one')).toBe('second')
    await a.copy('k/other', 'k/one').catch(() => undefined)
    await a.put('k/other', Buffer.from('other'))
    await a.copy('k/other', 'k/one')
    expect(await text(a, 'k/one')).toBe('other')
    await a.put('k/two', Buffer.from('two'))
    expect(await text(a, 'k/two')).toBe('two')
    await a.move('k/one', 'k/two')
    expect(await text(a, 'k/two')).toBe('other')
    await expect(a.readBytes('k/one', 0, 4)).rejects.toMatchObject({ code: 'not-found' })
    await a.delete('k/two')
    await expect(a.readBytes('k/two', 0, 4)).rejects.toMatchObject({ code: 'not-found' })
    // A rename between two local stores (the confirmed save's fast path) drops both sides too.
    await a.put('m/x', Buffer.from('moved'))
    await b.put('m/x', Buffer.from('old target'))
    expect(await text(a, 'm/x')).toBe('moved')
    expect(await text(b, 'm/x')).toBe('old target')
    expect(await renameAcross(a, 'm/x', b, 'm/x')).toBe(true)
    expect(await text(b, 'm/x')).toBe('moved')
    await expect(a.readBytes('m/x', 0, 4)).rejects.toMatchObject({ code: 'not-found' })
    // A read while a put replaces the file opens the old one: it is not kept past the put.
    await a.put('r/k', Buffer.from('old'))
    const slow = new PassThrough()
    const replacing = a.put('r/k', slow)
    expect(await text(a, 'r/k')).toBe('old')
    slow.end('new')
    await replacing
    expect(await text(a, 'r/k')).toBe('new')
    // Appended in place (a resumable upload's file): the same inode, so the kept descriptor reads it all.
    await a.put('t/data', Buffer.from('abc'))
    expect(await text(a, 't/data')).toBe('abc')
    await appendFile(a.localPath('t/data'), 'def')
    expect(await text(a, 't/data')).toBe('abcdef')
  })

  it('readBytes keeps at most 128 descriptors, and close() lets them all go', async () => {
    const { store } = await fresh()
    const openFds = async () => (await readdir('/proc/self/fd')).length
    for (let i = 0; i < 300; i++) await store.put(`many/${i}`, Buffer.from(`file ${i}`))
    const before = await openFds()
    const reads = await Promise.all(Array.from({ length: 300 }, (_, i) => store.readBytes(`many/${i}`, 0, 16)))
    expect(reads.map((r) => Buffer.from(r).toString())).toEqual(Array.from({ length: 300 }, (_, i) => `file ${i}`))
    // Closes run on the thread pool: give them a moment.
    await new Promise((r) => setTimeout(r, 50))
    expect(await openFds()).toBeLessThanOrEqual(before + 128)
    expect(await openFds()).toBeGreaterThan(before + 100)
    await store.close()
    await new Promise((r) => setTimeout(r, 50))
    expect(await openFds()).toBeLessThanOrEqual(before)
  })

  it('lists neither dot-files nor names no key can have', async () => {
    const { store, base } = await fresh()
    await store.put('d/ok.txt', Buffer.from('1'))
    await store.put('d/report.partial', Buffer.from('22'))
    await writeFile(join(base, 'd', '.hidden'), 'x')
    await writeFile(join(base, 'd', '.ok.txt.0123abcd.partial'), 'x')
    await writeFile(join(base, 'd', 'bad%name'), 'x')
    await writeFile(join(base, 'd', 'trailing.'), 'x')
    await mkdir(join(base, '.git'))
    await writeFile(join(base, '.git', 'config'), 'x')
    const keys = (await collect(store.list(''))).map((e) => e.key).sort()
    expect(keys).toEqual(['d/ok.txt', 'd/report.partial'])
  })

  it('localPath is the file under baseDir and refuses bad keys', async () => {
    const { store, base } = await fresh()
    expect(store.localPath('demo/2026/a.png')).toBe(join(base, 'demo', '2026', 'a.png'))
    expect(store.localPath('/demo/a.png')).toBe(join(base, 'demo', 'a.png'))
    expect(store.localPath('x').startsWith(base + sep)).toBe(true)
    for (const bad of ['../x', 'a/../../x', '/../x', 'a\\b']) {
      expect(() => store.localPath(bad)).toThrow(expect.objectContaining(badKey))
    }
  })

  it('puts racing with deletes that prune the same folder all succeed', async () => {
    const { store } = await fresh()
    for (let i = 0; i < 200; i++) {
      await store.put(`race/f/${i}-a.bin`, Buffer.alloc(10, 1))
      // The delete empties and removes race/f/ while the put, the copy and the move want it.
      await store.put(`race/g/${i}.bin`, Buffer.alloc(10, 2))
      await Promise.all([
        store.delete(`race/f/${i}-a.bin`),
        store.put(`race/f/${i}-b.bin`, Buffer.alloc(10, 3)),
        store.copy(`race/g/${i}.bin`, `race/f/${i}-c.bin`),
      ])
      await Promise.all([store.delete(`race/f/${i}-b.bin`), store.move(`race/g/${i}.bin`, `race/f/${i}-d.bin`)])
      expect(await store.exists(`race/f/${i}-c.bin`)).toBe(true)
      expect(await store.exists(`race/f/${i}-d.bin`)).toBe(true)
      await Promise.all([store.delete(`race/f/${i}-c.bin`), store.delete(`race/f/${i}-d.bin`)])
    }
  })

  describe('symbolic links', () => {
    it('a link at a key, pointing outside, is no object and is never followed', async () => {
      const { store, base, outside } = await fresh()
      await writeFile(join(outside, 'secret.txt'), 'secret')
      await store.put('d/real.txt', Buffer.from('real'))
      await symlink(join(outside, 'secret.txt'), join(base, 'd', 'link.txt'))

      expect(await failure(() => store.get('d/link.txt'))).toMatchObject(notFound)
      expect(await failure(() => store.get('d/link.txt', { start: 0 }))).toMatchObject(notFound)
      expect(await failure(() => store.stat('d/link.txt'))).toMatchObject(notFound)
      expect(await store.exists('d/link.txt')).toBe(false)
      expect(await failure(() => store.copy('d/link.txt', 'd/copy.txt'))).toMatchObject(notFound)
      expect(await failure(() => store.move('d/link.txt', 'd/moved.txt'))).toMatchObject(notFound)
      expect((await collect(store.list(''))).map((e) => e.key)).toEqual(['d/real.txt'])

      // A put replaces the link itself; the file it pointed to is untouched.
      await store.put('d/link.txt', Buffer.from('new'))
      expect(await readFile(join(outside, 'secret.txt'), 'utf8')).toBe('secret')
      expect((await readAll(await store.get('d/link.txt'))).toString()).toBe('new')

      // A delete removes a link, not its target.
      await symlink(join(outside, 'secret.txt'), join(base, 'd', 'link2.txt'))
      await store.delete('d/link2.txt')
      expect(await readFile(join(outside, 'secret.txt'), 'utf8')).toBe('secret')
      expect(await tree(base)).toEqual(['d/', 'd/link.txt', 'd/real.txt'])
    })

    it('a folder link pointing outside: writes, copies, moves, deletes and lists through it are refused', async () => {
      const { store, base, outside } = await fresh()
      await mkdir(join(outside, 'dir'))
      await writeFile(join(outside, 'dir', 'file.txt'), 'outside')
      await store.put('inside.txt', Buffer.from('inside'))
      await symlink(join(outside, 'dir'), join(base, 'linkdir'))
      const before = await tree(outside)

      expect(await failure(() => store.put('linkdir/new.txt', Buffer.from('x')))).toMatchObject(badKey)
      expect(await failure(() => store.put('linkdir/sub/new.txt', Buffer.from('x')))).toMatchObject(badKey)
      expect(await failure(() => store.put('linkdir/file.txt', Buffer.from('x')))).toMatchObject(badKey)
      expect(await failure(() => store.delete('linkdir/file.txt'))).toMatchObject(badKey)
      expect(await failure(() => store.copy('linkdir/file.txt', 'copied.txt'))).toMatchObject(badKey)
      expect(await failure(() => store.copy('inside.txt', 'linkdir/copied.txt'))).toMatchObject(badKey)
      expect(await failure(() => store.move('linkdir/file.txt', 'moved.txt'))).toMatchObject(badKey)
      expect(await failure(() => store.move('inside.txt', 'linkdir/moved.txt'))).toMatchObject(badKey)
      expect(await failure(() => collect(store.list('linkdir/')))).toMatchObject(badKey)
      // A whole listing does not descend into links.
      expect((await collect(store.list(''))).map((e) => e.key)).toEqual(['inside.txt'])

      expect(await tree(outside)).toEqual(before)
      expect(await readFile(join(outside, 'dir', 'file.txt'), 'utf8')).toBe('outside')
      expect(await store.exists('inside.txt')).toBe(true)
    })

    it('documented: get/stat/exists stay open+fstat (no realpath), so they follow a folder link an operator placed', async () => {
      const { store, base, outside } = await fresh()
      await mkdir(join(outside, 'dir'))
      await writeFile(join(outside, 'dir', 'file.txt'), 'outside')
      await mkdir(base, { recursive: true })
      await symlink(join(outside, 'dir'), join(base, 'linkdir'))
      expect((await readAll(await store.get('linkdir/file.txt'))).toString()).toBe('outside')
      expect(await store.exists('linkdir/file.txt')).toBe(true)
    })
  })
})
