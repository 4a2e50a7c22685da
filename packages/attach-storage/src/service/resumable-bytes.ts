/**
 * How a resumable upload's bytes are kept (service/resumable.ts is the protocol): the keys of its
 * folder `_tus/{name}/` in the temporary store, its part objects on any store, the one appended file on
 * a local temporary store with the running sha256 kept while one process sees every byte, and a PATCH's
 * write with the checksum extension's all-or-nothing rule.
 */
import { close as fsClose, open as fsOpen, writev as fsWritev, fsync, ftruncate } from 'node:fs'
import { createHash, type Hash } from 'node:crypto'
import { Readable, Transform, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { promisify as fsp } from 'node:util'
import { AttachStorageError, badRequest } from '../errors.js'
import type { Store } from '../stores/store.js'
import type { ServiceContext } from './context.js'

/** The folder of unfinished resumable uploads in the temporary store. */
export const TUS_PREFIX = '_tus/'

export const folder = (name: string) => `${TUS_PREFIX}${name}/`
export const infoKey = (name: string) => `${folder(name)}info.json`
export const dataKey = (name: string) => `${folder(name)}data`
const partKey = (name: string, offset: number) => `${folder(name)}${String(offset).padStart(15, '0')}.part`
const PART = /\/(\d{15})\.part$/

/** A request's `Upload-Checksum` (tus's checksum extension): the digest its bytes must have. */
export interface Checksum {
  algorithm: 'sha1' | 'sha256' | 'md5'
  digest: Buffer
}

/** 460, as tus's checksum extension answers bytes whose digest is not the declared one (they are not kept). */
export const checksumMismatch = (algorithm: string) =>
  new AttachStorageError('checksum-mismatch', `The bytes do not have the ${algorithm} of Upload-Checksum; they were not kept`, {
    status: 460,
  })

/** The running sha256 of local uploads whose every byte went through this process, by name (bounded). */
export const hashes = new Map<string, { offset: number; hash: Hash }>()
const MAX_HASHES = 1000
function remember(name: string, offset: number, hash: Hash): void {
  hashes.set(name, { offset, hash })
  if (hashes.size > MAX_HASHES) hashes.delete(hashes.keys().next().value!)
}

/** The local file of a key when the temporary store is a local disk (the append path), else undefined. */
export function localFile(ctx: ServiceContext, key: string): string | undefined {
  const tmp = ctx.stores.tmpStore
  return tmp.type === 'local' && tmp.localPath ? tmp.localPath(key) : undefined
}

/** The part objects of an upload in order, and the offset their unbroken run from 0 reaches. */
export async function partsOf(
  tmp: Store,
  name: string,
): Promise<{ parts: Array<{ key: string; start: number; size: number }>; offset: number }> {
  const parts: Array<{ key: string; start: number; size: number }> = []
  for await (const e of tmp.list(folder(name))) {
    const m = PART.exec(e.key)
    if (m) parts.push({ key: e.key, start: Number(m[1]), size: e.size })
  }
  parts.sort((a, b) => a.start - b.start)
  let offset = 0
  const run: typeof parts = []
  for (const p of parts) {
    if (p.start !== offset) break
    run.push(p)
    offset += p.size
  }
  return { parts: run, offset }
}

/**
 * A writable appending to an open descriptor (`O_APPEND`), never closing it: what waits while a write
 * runs goes in one `writev`; a short write goes on with the rest.
 */
function appender(fd: number): Writable {
  const writeAll = (chunks: Buffer[], done: (err?: Error | null) => void) => {
    fsWritev(fd, chunks, null, (err, n) => {
      if (err) return done(err)
      let rest = chunks
      while (rest.length && n >= rest[0]!.length) {
        n -= rest[0]!.length
        rest = rest.slice(1)
      }
      if (!rest.length) return done()
      writeAll([rest[0]!.subarray(n), ...rest.slice(1)], done)
    })
  }
  return new Writable({
    highWaterMark: 1024 * 1024,
    write: (chunk: Buffer, _encoding, done) => writeAll([chunk], done),
    writev: (chunks, done) =>
      writeAll(
        chunks.map((c) => c.chunk as Buffer),
        done,
      ),
  })
}

/** A pass-through failing with `over()` once more than `room` bytes have flowed. */
async function* bounded(source: AsyncIterable<Uint8Array>, room: number, over: () => Error): AsyncGenerator<Uint8Array> {
  let n = 0
  for await (const chunk of source) {
    n += chunk.length
    if (n > room) throw over()
    yield chunk
  }
}

/**
 * Stores a PATCH's bytes after `offset`; resolves with the new offset. With a `checksum`, the bytes are
 * kept only whole and with that digest: a mismatch (460) or a dropped connection takes them all back.
 */
export async function write(
  ctx: ServiceContext,
  name: string,
  offset: number,
  body: AsyncIterable<Uint8Array>,
  room: number,
  over: () => Error,
  checksum?: Checksum,
  signal?: AbortSignal,
): Promise<number> {
  const digest = checksum ? createHash(checksum.algorithm) : undefined
  const matches = () => digest!.digest().equals(checksum!.digest)
  const file = localFile(ctx, dataKey(name))
  if (file) {
    // The local path: append to one file. What arrived before a dropped connection stays (the offset).
    // The running sha256 is kept in memory while every byte so far went through it; the completion
    // then need not read the file again (after a restart, it does).
    const known = hashes.get(name)
    hashes.delete(name)
    const hash = known && known.offset === offset ? known.hash : offset === 0 ? createHash('sha256') : undefined
    let seen = 0
    const meter = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        seen += chunk.length
        if (seen > room) return cb(over())
        hash?.update(chunk)
        digest?.update(chunk)
        cb(null, chunk)
      },
    })
    // One descriptor for the appends, the cut of a refused checksum and the fsync, closed here only
    // (an fs.WriteStream would close it itself when the pipeline fails).
    const fd = await fsp(fsOpen)(file, 'a')
    let refused: boolean
    let dropped: unknown
    try {
      const out = appender(fd)
      // A body that fails (the client went away) ends the file normally, so every byte that arrived is kept.
      async function* arrived(): AsyncGenerator<Buffer> {
        try {
          for await (const chunk of body) yield chunk as Buffer
        } catch (err) {
          dropped = err
        }
      }
      await pipeline(arrived(), meter, out)
      // With a checksum, only whole bytes of that digest stay: anything else is cut off again.
      refused = checksum !== undefined && (dropped !== undefined || !matches())
      if (refused) await fsp(ftruncate)(fd, offset)
      await fsp(fsync)(fd)
    } finally {
      await fsp(fsClose)(fd)
    }
    if (refused) {
      // The running hash took bytes the file no longer holds: the completion reads the file instead.
      if (dropped) throw dropped
      throw checksumMismatch(checksum!.algorithm)
    }
    // Every byte seen is in the file (the pipeline ended normally): the running hash stays valid.
    if (hash) remember(name, offset + seen, hash)
    // The client went away: the route logs it (one line, not an error).
    if (dropped) throw dropped
    return offset + seen
  }
  const source = digested(bounded(body, room, over), digest)
  // Any store: part objects of at most partSize; a dropped connection loses only the part being written.
  const { partSize, maxParts } = ctx.config.resumable
  const tmp = ctx.stores.tmpStore
  const { parts } = await partsOf(tmp, name)
  let count = parts.length
  /** The parts this request wrote (taken back when its checksum fails). */
  const written: string[] = []
  const it = source[Symbol.asyncIterator]()
  let pending: Uint8Array | undefined
  let ended = false
  const next = async (): Promise<Uint8Array | undefined> => {
    if (pending) {
      const p = pending
      pending = undefined
      return p
    }
    if (ended) return undefined
    const r = await it.next()
    if (r.done) {
      ended = true
      return undefined
    }
    return r.value
  }
  for (;;) {
    const first = await next()
    if (!first) break
    if (first.length === 0) continue
    if (count >= maxParts) throw badRequest(`An upload holds at most ${maxParts} chunks; send larger chunks`)
    pending = first
    let size = 0
    async function* part(): AsyncGenerator<Uint8Array> {
      while (size < partSize) {
        const chunk = await next()
        if (!chunk) return
        const take = Math.min(chunk.length, partSize - size)
        if (take < chunk.length) pending = chunk.subarray(take)
        size += take
        yield chunk.subarray(0, take)
      }
    }
    const key = partKey(name, offset)
    try {
      await tmp.put(key, Readable.from(part(), { objectMode: false }), { signal })
    } catch (err) {
      if (checksum) await Promise.all(written.map((k) => tmp.delete(k)))
      throw err
    }
    written.push(key)
    offset += size
    count++
  }
  if (checksum && !matches()) {
    await Promise.all(written.map((k) => tmp.delete(k)))
    throw checksumMismatch(checksum.algorithm)
  }
  return offset
}

/** A pass-through feeding `digest` (when there is one) with every chunk. */
async function* digested(source: AsyncIterable<Uint8Array>, digest: Hash | undefined): AsyncGenerator<Uint8Array> {
  for await (const chunk of source) {
    digest?.update(chunk)
    yield chunk
  }
}
