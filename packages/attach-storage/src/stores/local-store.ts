import { close as fsClose, constants, createReadStream, fstat, read as fsRead, type Stats } from 'node:fs'
import { copyFile, lstat, open, realpath, rename, rmdir, unlink } from 'node:fs/promises'
import { dirname, join, resolve } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { LRUCache } from 'lru-cache'
import { AttachStorageError, configError } from '../errors.js'
import { notFoundError } from '../store-kit/errors.js'
import { isValidKeySegment, MAX_KEY_LENGTH, normalizeKey, normalizePrefix } from './key.js'
import {
  errnoOf,
  fileSink,
  isFile,
  isMissing,
  isNoStoredFile,
  mkdirDurable,
  PARTIAL_NAME,
  openStoredFile,
  readDirOrNone,
  syncDir,
  tempPathFor,
  withSep,
  writeAll,
} from './local-fs.js'
import { resolveRange } from './range.js'
import type { ByteRange, PutOptions, Store, StoreListEntry, StoreStat } from './store.js'

export { mkdirDurable, syncDir } from './local-fs.js'

/** Options of {@link LocalStore}. */
export interface LocalStoreOptions {
  /**
   * The directory that holds the objects; a key `a/b.png` is the file `<baseDir>/a/b.png`. Relative
   * paths are resolved against the working directory once, at construction. Created on the first write.
   */
  baseDir: string
}

/** `get` opens with O_NOFOLLOW: a symbolic link at a key is never followed (where the OS has the flag). */
/** Copies reflink where the file system can (btrfs, XFS, APFS), and never onto an existing file. */
const COPY_FLAGS = constants.COPYFILE_EXCL | constants.COPYFILE_FICLONE
/** How often an operation is retried when a concurrent `delete` removed its (then empty) directory. */
const DIR_RETRIES = 4
/** Most read descriptors one local store keeps open (see `LocalStore#open`). */
const OPEN_FILES = 128

/** A kept read descriptor: reads using it now, and whether it is dropped (closed once they end). */
interface OpenFile {
  fd: number
  users: number
  dropped: boolean
}

/**
 * A {@link Store} on the local file system, under one base directory.
 *
 * - Every key goes through {@link normalizeKey}, is joined under `baseDir`, and the result is checked to
 *   stay inside `baseDir`.
 * - Symbolic links: a link at a key is never an object (`get` opens with `O_NOFOLLOW`, `stat`/`exists`
 *   use `lstat`, `list` skips links, `copy`/`move` refuse them as sources). Links to directories are
 *   checked with `realpath` on every operation that writes, moves, copies or lists: one that leads
 *   outside `baseDir` makes the operation fail with `bad-key` before anything is created, changed or read.
 *   `get`, `stat` and `exists` do not pay for that check (they stay `open` + `fstat`, or one `lstat`),
 *   so a directory link placed inside `baseDir` by someone with file-system access is followed by
 *   them. The store itself never creates links.
 * - `put` and `copy` write `.<name>.<random>.partial` in the target directory, fsync it, and rename it
 *   into place (then fsync the directory, best effort), so readers see the old file or the whole new one.
 * - Durability: every rename is followed by an fsync of the directories it changed (`move`: the target's
 *   and the source's), and every directory created on the way is fsynced into its parent, so what a
 *   call resolved survives a power loss. {@link sweepPartials} removes the partial files a crash left.
 * - `delete` (and `move`) remove directories left empty, up to but not including `baseDir`.
 * - `readBytes` (small views) keeps the descriptors of up to 128 files it read lately, so a view costs
 *   one `read`. `put`, `copy`, `move`, `delete` and {@link renameAcross} drop the descriptor of every
 *   path they change, so the store never answers bytes it replaced; files changed in place are read as
 *   they are now. attach-storage writes each stored file once under a new name, so a change made by
 *   another process (a record's file deleted by another instance) concerns a record that is gone.
 *
 * @example
 * const store = new LocalStore('files', { baseDir: '/var/lib/app/files' })
 * await store.put('demo/2026/11/42/abc.png', bytes)
 */
export class LocalStore implements Store {
  readonly type = 'local'
  readonly name: string
  /** The absolute base directory. */
  readonly baseDir: string
  readonly #baseWithSep: string
  #realBase: Promise<string> | undefined
  /**
   * Descriptors of files {@link readBytes} read lately, by path, least recently used first: a view of a
   * small file then costs one `read`, no `open` and `close`. Stored files are written once under new
   * names; every change this store makes to a path drops its descriptor.
   */
  readonly #open = new LRUCache<string, OpenFile>({
    max: OPEN_FILES,
    // Evicted or deleted: closed now, or by the last read using it.
    dispose: (open) => {
      open.dropped = true
      if (open.users === 0) fsClose(open.fd, () => {})
    },
  })
  /** Counts this store's changes: a descriptor opened while one happened is used once, not kept. */
  #changes = 0

  constructor(name: string, options: LocalStoreOptions) {
    if (typeof options?.baseDir !== 'string' || options.baseDir === '') {
      throw configError(`Local store "${name}" needs a baseDir`)
    }
    this.name = name
    this.baseDir = resolve(options.baseDir)
    this.#baseWithSep = withSep(this.baseDir)
  }

  async put(key: string, body: Readable | Uint8Array, options: PutOptions = {}): Promise<{ size: number }> {
    const file = this.#pathOf(key)
    return this.#change([file], async () => {
      const { signal } = options
      signal?.throwIfAborted()
      const dir = dirname(file)
      await this.#prepareDir(dir)
      const temp = tempPathFor(file)
      const handle = await this.#inDir(dir, () => open(temp, 'wx'))
      let handleOpen = true
      let size: number
      try {
        if (body instanceof Uint8Array) {
          size = await writeAll(handle, body, signal)
        } else {
          const sink = fileSink(handle)
          await pipeline(body, sink, signal ? { signal } : {})
          size = sink.bytesWritten
        }
        await handle.sync()
        handleOpen = false
        await handle.close()
        signal?.throwIfAborted()
        await rename(temp, file)
      } catch (err) {
        if (handleOpen) await handle.close().catch(() => {})
        await unlink(temp).catch(() => {})
        throw err
      }
      await syncDir(dir)
      return { size }
    })
  }

  /** Opens a stored file for reading (never through a symbolic link); a missing one is `not-found`. */
  async #openForRead(file: string, key: string): Promise<number> {
    try {
      return await openStoredFile(file)
    } catch (err) {
      if (isNoStoredFile(err)) throw this.#notFound(key)
      throw err
    }
  }

  async get(key: string, range?: ByteRange): Promise<Readable> {
    const file = this.#pathOf(key)
    const fd = await this.#openForRead(file, key)
    try {
      const stats = await new Promise<Stats>((resolve, reject) => fstat(fd, (err, st) => (err ? reject(err) : resolve(st))))
      if (!stats.isFile()) throw this.#notFound(key)
      const { start, end } = range === undefined ? { start: 0, end: undefined } : resolveRange(range, stats.size, key)
      // Large reads in large chunks: fewer syscalls and fewer stream turns per byte.
      const highWaterMark = stats.size > 4 * 1024 * 1024 ? 1024 * 1024 : 64 * 1024
      return createReadStream(file, { fd, start, end, highWaterMark, autoClose: true })
    } catch (err) {
      fsClose(fd, () => {})
      throw err
    }
  }

  /**
   * Reads `length` bytes from `start` in one `read` (looping only on a short read), with no stream and
   * no stat: for small answers whose size the record knows. Fewer bytes when the file is shorter. Into
   * `into` when it is given and large enough.
   */
  async readBytes(key: string, start: number, length: number, into?: Uint8Array): Promise<Uint8Array> {
    const file = this.#pathOf(key)
    const open = await this.#acquire(file, key)
    try {
      const buffer = into && into.byteLength >= length ? into.subarray(0, length) : Buffer.allocUnsafe(length)
      let filled = 0
      while (filled < length) {
        const n = await new Promise<number>((resolve, reject) =>
          fsRead(open.fd, buffer, filled, length - filled, start + filled, (err, bytes) => (err ? reject(err) : resolve(bytes))),
        )
        if (n === 0) break
        filled += n
      }
      return filled === length ? buffer : buffer.subarray(0, filled)
    } catch (err) {
      this.#drop(file)
      if (errnoOf(err) === 'EISDIR') throw this.#notFound(key)
      throw err
    } finally {
      this.#release(open)
    }
  }

  /** A descriptor of `file` for reading: kept from an earlier read, else opened (and kept). */
  async #acquire(file: string, key: string): Promise<OpenFile> {
    // A kept one becomes the most recently used without being moved in a Map: re-inserting it on every
    // view made V8 rebuild the Map's table now and then, in the old generation.
    const kept = this.#open.get(file)
    if (kept) {
      kept.users++
      return kept
    }
    const changes = this.#changes
    const fd = await this.#openForRead(file, key)
    const entry: OpenFile = { fd, users: 1, dropped: false }
    if (changes !== this.#changes || this.#open.has(file)) {
      // The store changed while this one opened (or another read kept one): use it once.
      entry.dropped = true
      return entry
    }
    this.#open.set(file, entry)
    return entry
  }

  #release(open: OpenFile): void {
    if (--open.users === 0 && open.dropped) fsClose(open.fd, () => {})
  }

  /** Forgets the kept descriptor of `file` (closed once its reads end). */
  #drop(file: string): void {
    this.#open.delete(file)
  }

  /**
   * Runs a change to `files`: their kept descriptors go before it and once more after it, so a read
   * that opened the old file meanwhile keeps nothing.
   */
  async #change<T>(files: string[], run: () => Promise<T>): Promise<T> {
    this.#changing(...files)
    try {
      return await run()
    } finally {
      this.#changing(...files)
    }
  }

  /** A change to these paths: their kept descriptors go, and reads opening now keep nothing. */
  #changing(...files: string[]): void {
    this.#changes++
    for (const f of files) this.#drop(f)
  }

  async stat(key: string): Promise<StoreStat> {
    const stats = await this.#lstatFile(this.#pathOf(key), key)
    return { size: stats.size, lastModified: stats.mtime }
  }

  async exists(key: string): Promise<boolean> {
    const file = this.#pathOf(key)
    try {
      return (await lstat(file)).isFile()
    } catch (err) {
      if (isMissing(err)) return false
      throw err
    }
  }

  async move(from: string, to: string): Promise<void> {
    const source = this.#pathOf(from)
    const target = this.#pathOf(to)
    return this.#change([source, target], async () => {
      await this.#checkSource(source, from)
      if (source === target) return
      const dir = dirname(target)
      await this.#prepareDir(dir)
      try {
        await this.#inDir(dir, () => rename(source, target), source, from)
        // The rename changed two directories: both entries must reach the disk before the move counts.
        await syncDir(dir)
      } catch (err) {
        if (errnoOf(err) !== 'EXDEV') throw err
        await this.#copyInto(source, target, from)
        await unlink(source).catch((e: unknown) => {
          if (!isMissing(e)) throw e
        })
      }
      if (dirname(source) !== dir) await syncDir(dirname(source))
      await this.#prune(dirname(source))
    })
  }

  async copy(from: string, to: string): Promise<void> {
    const source = this.#pathOf(from)
    const target = this.#pathOf(to)
    return this.#change([target], async () => {
      await this.#checkSource(source, from)
      if (source === target) return
      await this.#prepareDir(dirname(target))
      await this.#copyInto(source, target, from)
    })
  }

  async delete(key: string): Promise<void> {
    const file = this.#pathOf(key)
    return this.#change([file], async () => {
      const dir = dirname(file)
      try {
        this.#assertInside(await realpath(dir), await this.#getRealBase(), key)
      } catch (err) {
        if (isMissing(err)) return
        throw err
      }
      try {
        await unlink(file)
      } catch (err) {
        if (isMissing(err)) return
        // EISDIR (Linux) or EPERM (macOS): a directory at the key is no object, so nothing to delete.
        const isDir = await lstat(file).then(
          (s) => s.isDirectory(),
          () => false,
        )
        if (isDir) return
        throw err
      }
      await this.#prune(dir)
    })
  }

  async *list(prefix: string): AsyncGenerator<StoreListEntry> {
    const normalized = normalizePrefix(prefix)
    const dir = normalized === '' ? this.baseDir : join(this.baseDir, normalized.slice(0, -1))
    try {
      this.#assertInside(await realpath(dir), await this.#getRealBase(), prefix)
    } catch (err) {
      if (isMissing(err)) return
      throw err
    }
    yield* this.#walk(dir, normalized)
  }

  async close(): Promise<void> {
    this.#open.clear()
  }

  /**
   * Forgets what this store keeps of `key` (its read descriptor) before a change made around the
   * store's methods, such as {@link renameAcross}.
   */
  forgetKey(key: string): void {
    this.#changing(this.#pathOf(key))
  }

  /** The absolute path of the file that holds `key` (whether or not it exists). */
  localPath(key: string): string {
    return this.#pathOf(key)
  }

  /**
   * Removes the partial files (`.<name>.<random>.partial`) of writes that never finished (a crash in the
   * middle of a `put` or `copy`) last modified before `olderThan`. Answers how many went.
   */
  async sweepPartials(olderThan: Date): Promise<number> {
    let removed = 0
    const visit = async (dir: string): Promise<void> => {
      const entries = await readDirOrNone(dir)
      if (!entries) return
      let gone = false
      for (const entry of entries) {
        const path = join(dir, entry.name)
        // Links are never followed (a Dirent of a link is neither a file nor a directory).
        if (entry.isDirectory()) await visit(path)
        else if (entry.isFile() && PARTIAL_NAME.test(entry.name)) {
          const stats = await lstat(path).catch(() => undefined)
          if (!stats?.isFile() || stats.mtime >= olderThan) continue
          try {
            await unlink(path)
            removed++
            gone = true
          } catch (err) {
            if (!isMissing(err)) throw err
          }
        }
      }
      if (gone && dir !== this.baseDir) await this.#prune(dir)
    }
    const real = await this.#getRealBase().catch((err: unknown) => {
      if (isMissing(err)) return undefined
      throw err
    })
    if (real !== undefined) await visit(this.baseDir)
    return removed
  }

  // ---------------------------------------------------------------------------------------------

  /** The key normalized and joined under baseDir, checked to stay inside it (no I/O). */
  #pathOf(key: string): string {
    const normalized = normalizeKey(key)
    const file = join(this.baseDir, normalized)
    if (!file.startsWith(this.#baseWithSep)) throw outside(key)
    return file
  }

  #notFound(key: string): AttachStorageError {
    return notFoundError(this.name, key)
  }

  /** The real path of baseDir, computed once (and again after a failure, e.g. while it does not exist). */
  #getRealBase(): Promise<string> {
    if (this.#realBase === undefined) {
      const pending = realpath(this.baseDir)
      this.#realBase = pending
      pending.catch(() => {
        if (this.#realBase === pending) this.#realBase = undefined
      })
    }
    return this.#realBase
  }

  #assertInside(real: string, realBase: string, key: string): void {
    if (real !== realBase && !real.startsWith(withSep(realBase))) throw outside(key)
  }

  /** Makes sure `dir` exists and really is inside baseDir, creating nothing outside it. */
  async #prepareDir(dir: string): Promise<void> {
    for (let attempt = 0; ; attempt++) {
      try {
        const real = await realpath(dir)
        this.#assertInside(real, await this.#getRealBase(), dir.slice(this.#baseWithSep.length))
        return
      } catch (err) {
        if (errnoOf(err) !== 'ENOENT' || attempt >= DIR_RETRIES) throw err
      }
      // Check the nearest existing ancestor before creating anything below it.
      await mkdirDurable(this.baseDir)
      const realBase = await this.#getRealBase()
      this.#assertInside(await this.#nearestExistingReal(dir), realBase, dir.slice(this.#baseWithSep.length))
      try {
        await mkdirDurable(dir)
      } catch (err) {
        if (errnoOf(err) !== 'ENOENT') throw err
      }
    }
  }

  async #nearestExistingReal(dir: string): Promise<string> {
    for (let d = dir; ; d = dirname(d)) {
      try {
        return await realpath(d)
      } catch (err) {
        if (errnoOf(err) !== 'ENOENT' || d === this.baseDir || !d.startsWith(this.#baseWithSep)) throw err
      }
    }
  }

  /**
   * Runs `op`, which creates something in `dir`; when it fails with ENOENT because a concurrent
   * `delete` pruned the directory, recreates it and retries. With `source`, ENOENT while the source is
   * gone is `not-found`.
   */
  async #inDir<T>(dir: string, op: () => Promise<T>, source?: string, sourceKey?: string): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await op()
      } catch (err) {
        if (errnoOf(err) !== 'ENOENT') throw err
        if (source !== undefined && !(await isFile(source))) throw this.#notFound(sourceKey ?? source)
        if (attempt >= DIR_RETRIES) throw err
      }
      await this.#prepareDir(dir)
    }
  }

  async #lstatFile(file: string, key: string): Promise<Stats> {
    let stats: Stats
    try {
      stats = await lstat(file)
    } catch (err) {
      if (isMissing(err)) throw this.#notFound(key)
      throw err
    }
    if (!stats.isFile()) throw this.#notFound(key)
    return stats
  }

  /** A move or copy source: a regular file (no link) in a directory really inside baseDir. */
  async #checkSource(file: string, key: string): Promise<void> {
    let real: string
    try {
      real = await realpath(dirname(file))
    } catch (err) {
      if (isMissing(err)) throw this.#notFound(key)
      throw err
    }
    this.#assertInside(real, await this.#getRealBase(), key)
    await this.#lstatFile(file, key)
  }

  /** Copies to a partial file in the target directory, fsyncs it, renames it into place. */
  async #copyInto(source: string, target: string, sourceKey: string): Promise<void> {
    const dir = dirname(target)
    const temp = tempPathFor(target)
    try {
      await this.#inDir(dir, () => copyFile(source, temp, COPY_FLAGS), source, sourceKey)
      const handle = await open(temp, 'r+')
      try {
        await handle.sync()
      } finally {
        await handle.close()
      }
      await rename(temp, target)
    } catch (err) {
      await unlink(temp).catch(() => {})
      throw err
    }
    await syncDir(dir)
  }

  /** Removes `dir` and its parents while they are empty, stopping below baseDir. */
  async #prune(dir: string): Promise<void> {
    for (let d = dir; d !== this.baseDir && d.startsWith(this.#baseWithSep); d = dirname(d)) {
      try {
        await rmdir(d)
      } catch (err) {
        // ENOTEMPTY / EEXIST: still in use (maybe by a concurrent put); anything else: leave it be.
        if (errnoOf(err) !== 'ENOENT') return
      }
    }
  }

  async *#walk(dir: string, keyPrefix: string): AsyncGenerator<StoreListEntry> {
    const entries = await readDirOrNone(dir)
    if (!entries) return
    for (const entry of entries) {
      const name = entry.name
      // Dot-files (among them every `.x.y.partial` temporary file) and names no key can have are skipped;
      // so are symbolic links (neither isFile nor isDirectory on a Dirent).
      if (!isValidKeySegment(name)) continue
      const key = keyPrefix + name
      if (entry.isDirectory()) {
        yield* this.#walk(join(dir, name), `${key}/`)
      } else if (entry.isFile() && key.length <= MAX_KEY_LENGTH) {
        let stats: Stats
        try {
          stats = await lstat(join(dir, name))
        } catch (err) {
          if (isMissing(err)) continue
          throw err
        }
        if (stats.isFile()) yield { key, size: stats.size, lastModified: stats.mtime }
      }
    }
  }
}
const outside = (key: string): AttachStorageError =>
  new AttachStorageError('bad-key', `Storage key ${JSON.stringify(key)} resolves outside the store's directory`, {
    status: 400,
  })

/**
 * Moves a file between two local stores by a rename, durable once it resolves (both directories are
 * fsynced). False when the two lie on different file systems (`EXDEV`): the caller copies instead.
 * A missing source is a 404 `not-found`.
 */
export async function renameAcross(from: Store, fromKey: string, to: Store, toKey: string): Promise<boolean> {
  if (!from.localPath || !to.localPath || from.type !== 'local' || to.type !== 'local') return false
  const src = from.localPath(fromKey)
  const dst = to.localPath(toKey)
  // Before and after the rename, as the stores' own changes do (see LocalStore#change).
  const forget = () => {
    if (from instanceof LocalStore) from.forgetKey(fromKey)
    if (to instanceof LocalStore) to.forgetKey(toKey)
  }
  forget()
  try {
    await mkdirDurable(dirname(dst))
    await rename(src, dst)
    await syncDir(dirname(dst))
    await syncDir(dirname(src))
    return true
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code
    if (code === 'ENOENT') throw notFoundError(from.name, fromKey, err)
    if (code === 'EXDEV') return false
    throw err
  } finally {
    forget()
  }
}
