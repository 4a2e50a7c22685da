/**
 * The file-system steps the local store is built on, none of which holds state: errno readings, the
 * partial file's name, writes of a body onto a descriptor, and the fsyncs that make a directory entry
 * durable (`mkdirDurable`, `syncDir`).
 * @module
 */
import { randomBytes } from 'node:crypto'
import { constants, type Dirent, open as fsOpen, write as fsWrite, writev as fsWritev } from 'node:fs'
import { type FileHandle, lstat, mkdir, open, readdir } from 'node:fs/promises'
import { basename, dirname, join, sep } from 'node:path'
import { Writable } from 'node:stream'

/** Uint8Array bodies are written in slices this big, so that an abort is noticed between them. */
const WRITE_SLICE = 8 * 1024 * 1024

export const errnoOf = (err: unknown): string | undefined => (err as NodeJS.ErrnoException | null)?.code
/** Errors that mean "no file at this path". */
export const isMissing = (err: unknown): boolean => {
  const code = errnoOf(err)
  return code === 'ENOENT' || code === 'ENOTDIR'
}

/** How a stored file is opened for reading: never through a symbolic link in its place (`ELOOP`). */
export const READ_FLAGS = constants.O_RDONLY | (constants.O_NOFOLLOW ?? 0)

/**
 * Opens a stored file for reading with {@link READ_FLAGS} (never through a symbolic link); answers the
 * descriptor. The callback API: on the view hot path it costs much less per call than FileHandle's
 * promises. {@link isNoStoredFile} tells which failures mean no stored file.
 */
export function openStoredFile(path: string): Promise<number> {
  return new Promise<number>((resolve, reject) => fsOpen(path, READ_FLAGS, (err, fd) => (err ? reject(err) : resolve(fd))))
}

/** Errors of opening or reading a stored file that mean "no stored file here": none, a link, a folder. */
export const isNoStoredFile = (err: unknown): boolean => {
  const code = errnoOf(err)
  return isMissing(err) || code === 'ELOOP' || code === 'EISDIR'
}

/** A directory's entries, or undefined when it does not exist (any other failure throws). */
export async function readDirOrNone(dir: string): Promise<Dirent[] | undefined> {
  try {
    return await readdir(dir, { withFileTypes: true })
  } catch (err) {
    if (isMissing(err)) return undefined
    throw err
  }
}

export const withSep = (dir: string): string => (dir.endsWith(sep) ? dir : dir + sep)

/** The name of a partial file ({@link tempPathFor}). */
export const PARTIAL_NAME = /^\..+\.[0-9a-f]{16}\.partial$/

/** `.<name>.<random>.partial` next to `file`; the name is cut so the result fits in 255 bytes. */
export function tempPathFor(file: string): string {
  return join(dirname(file), `.${basename(file).slice(0, 200)}.${randomBytes(8).toString('hex')}.partial`)
}

export async function isFile(file: string): Promise<boolean> {
  return lstat(file).then(
    (s) => s.isFile(),
    () => false,
  )
}

export async function writeAll(handle: FileHandle, bytes: Uint8Array, signal: AbortSignal | undefined): Promise<number> {
  let offset = 0
  while (offset < bytes.byteLength) {
    signal?.throwIfAborted()
    const { bytesWritten } = await handle.write(bytes, offset, Math.min(bytes.byteLength - offset, WRITE_SLICE))
    offset += bytesWritten
  }
  return offset
}

/**
 * A Writable onto a file handle it does not own (an `fs.WriteStream` keeps a reference on the handle
 * until it closes it, so the handle could not be fsynced and closed by us afterwards).
 */
export function fileSink(handle: FileHandle): Writable & { bytesWritten: number } {
  // Callback writes on the descriptor (cheaper per chunk than FileHandle's promises); `writev` lets
  // the stream hand over everything buffered in one system call.
  const fd = handle.fd
  const writeFully = (buffers: Buffer[], callback: (err?: Error | null) => void) => {
    const total = buffers.reduce((n, b) => n + b.byteLength, 0)
    const done = (err: Error | null, written: number) => {
      if (err) return callback(err)
      sink.bytesWritten += written
      if (written === total) return callback()
      // A short write (rare on regular files): carry on with what is left.
      let skip = written
      const rest: Buffer[] = []
      for (const b of buffers) {
        if (skip >= b.byteLength) skip -= b.byteLength
        else {
          rest.push(b.subarray(skip))
          skip = 0
        }
      }
      writeFully(rest, callback)
    }
    if (buffers.length === 1) fsWrite(fd, buffers[0]!, 0, buffers[0]!.byteLength, null, (err, n) => done(err, n))
    else fsWritev(fd, buffers, (err, n) => done(err, n))
  }
  const sink = new Writable({
    highWaterMark: 1024 * 1024,
    write(chunk: Buffer, _encoding, callback) {
      writeFully([chunk], callback)
    },
    writev(chunks, callback) {
      writeFully(
        chunks.map((c) => c.chunk as Buffer),
        callback,
      )
    },
  }) as Writable & { bytesWritten: number }
  sink.bytesWritten = 0
  return sink
}

/**
 * `mkdir -p` whose result survives a power loss: the parent of every directory it created is fsynced
 * (best effort, like {@link syncDir}), so that a file renamed into `dir` later is reachable after a crash.
 */
export async function mkdirDurable(dir: string): Promise<void> {
  const first = await mkdir(dir, { recursive: true })
  if (first === undefined) return
  // Created: `first` and everything below it down to `dir`; each one's entry lives in its parent.
  const stop = dirname(first)
  for (let d = dir; ; d = dirname(d)) {
    await syncDir(dirname(d))
    if (dirname(d) === stop || dirname(d) === d) break
  }
}

/** Makes a rename in `dir` durable. Best effort: some platforms (Windows) cannot open a directory. */
export async function syncDir(dir: string): Promise<void> {
  try {
    const handle = await open(dir, 'r')
    try {
      await handle.sync()
    } finally {
      await handle.close()
    }
  } catch {
    // not supported here; the data itself was fsynced before the rename
  }
}
