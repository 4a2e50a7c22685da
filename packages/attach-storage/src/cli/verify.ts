/**
 * `attach-storage verify`: every live file's bytes are in its store with the recorded size and sha256,
 * and every file of the stores has a row. Exit 1 on any problem.
 */
import { createHash, type Hash } from 'node:crypto'
import { close as fsClose, read as fsRead } from 'node:fs'
import type { Readable } from 'node:stream'
import { AttachStorageError } from '../errors.js'
import type { BlobRecord } from '../model.js'
import type { ServiceContext } from '../service/context.js'
import { storeKey } from '../service/layout.js'
import { isNoStoredFile, openStoredFile } from '../stores/local-fs.js'
import { escapeControls } from './escape.js'
import { startProgress } from './progress.js'
import { type CliIo, distinctStores, EXIT, forEachConcurrent, type GlobalOptions, openService, report } from './runtime.js'
import { batches, isFileKey, liveBlobs } from './walk.js'

/** One thing wrong. */
export interface VerifyProblem {
  kind: 'missing' | 'size' | 'sha256' | 'unknown-store' | 'unreadable' | 'orphan'
  store: string
  key: string
  /** The blob's id (not for orphans). */
  blobId?: number
  expected?: string | number
  actual?: string | number
}

/** Files of a store that is not local read in one call instead of streamed (`readBytes`). */
const SMALL = 256 * 1024

export interface VerifyOptions extends GlobalOptions {
  concurrency?: number
  /** Skip the search for files no row points to. */
  orphans?: boolean
}

/** Block size of {@link hashFile}, and of each of {@link scratchBuffers}. */
const BLOCK = 1024 * 1024

/**
 * One buffer per worker of a {@link forEachConcurrent} walk, made at its first use, for the worker's
 * {@link checkBlob} calls to read into instead of allocating for each file: 100,000 small files
 * otherwise make 1 GB of short-lived buffers, which the collector then chases.
 */
export function scratchBuffers(): (worker: number) => Buffer {
  const buffers: Buffer[] = []
  return (worker) => {
    buffers[worker] ??= Buffer.allocUnsafe(BLOCK)
    return buffers[worker]
  }
}

/**
 * Reads and hashes one stored file against its blob row, in the blob's store or in `storeName` (a copy
 * under the same key); a problem or undefined. `scratch` (used by one call at a time: a worker's, from
 * {@link scratchBuffers}) takes the bytes read.
 */
export async function checkBlob(
  ctx: ServiceContext,
  b: BlobRecord,
  storeName = b.store,
  scratch?: Buffer,
): Promise<VerifyProblem | undefined> {
  const key = storeKey(b.savedDir, b.savedName)
  const base = { store: storeName, key, blobId: b.id }
  const store = ctx.stores.stores.get(storeName)
  if (!store) return { kind: 'unknown-store', ...base }
  const hash = createHash('sha256')
  let size = 0
  try {
    const path = store.localPath?.(key)
    if (path) {
      // A local file is read straight into the worker's buffer: one open, a read or two, one close.
      size = await hashFile(path, hash, scratch ?? Buffer.allocUnsafe(BLOCK))
    } else if (store.readBytes && b.fileSize < SMALL) {
      // One byte more than recorded: a longer file shows.
      const bytes = await store.readBytes(key, 0, b.fileSize + 1, scratch)
      size = bytes.length
      hash.update(bytes)
    } else {
      const stream: Readable = await store.get(key)
      for await (const chunk of stream) {
        size += (chunk as Buffer).length
        hash.update(chunk as Buffer)
      }
    }
  } catch (err) {
    if (err instanceof AttachStorageError && err.code === 'not-found') return { kind: 'missing', ...base }
    if (isNoStoredFile(err)) return { kind: 'missing', ...base }
    return { kind: 'unreadable', ...base, actual: (err as Error).message }
  }
  if (size !== b.fileSize) return { kind: 'size', ...base, expected: b.fileSize, actual: size }
  const sha256 = hash.digest('hex')
  if (sha256 !== b.sha256) return { kind: 'sha256', ...base, expected: b.sha256, actual: sha256 }
  return undefined
}

/** Hashes a local file (not through a symbolic link) in reads filling `buffer`; answers its length. */
async function hashFile(path: string, hash: Hash, buffer: Buffer): Promise<number> {
  const fd = await openStoredFile(path)
  try {
    let size = 0
    for (;;) {
      const n = await new Promise<number>((resolve, reject) =>
        fsRead(fd, buffer, 0, buffer.length, size, (err, n) => (err ? reject(err) : resolve(n))),
      )
      if (n === 0) return size
      hash.update(buffer.subarray(0, n))
      size += n
    }
  } finally {
    fsClose(fd, () => {})
  }
}

export async function verifyCommand(options: VerifyOptions, io: CliIo): Promise<number> {
  const { ctx, close } = await openService(options, io)
  try {
    const problems: VerifyProblem[] = []
    const stats = await ctx.repo.operations.stats()
    const total = stats.blobs.reduce((n, s) => n + s.count - s.pending, 0)
    const progress = startProgress('verify', total, io.stderr)
    const started = performance.now()
    let files = 0
    let bytes = 0
    try {
      const scratch = scratchBuffers()
      await forEachConcurrent(liveBlobs(ctx.repo), options.concurrency ?? 16, io.signal, async (b, worker) => {
        const problem = await checkBlob(ctx, b, b.store, scratch(worker))
        if (problem) problems.push(problem)
        files++
        bytes += b.fileSize
        progress.tick(b.fileSize)
      })
    } finally {
      progress.stop()
    }
    let scanned = 0
    if (options.orphans !== false && !io.signal.aborted) {
      for (const store of distinctStores(ctx)) {
        for await (const batch of batches(store, '')) {
          if (io.signal.aborted) break
          const keys = batch.filter(isFileKey)
          scanned += keys.length
          const known = await ctx.repo.operations.knownKeys(store.name, keys)
          for (const key of keys) if (!known.has(key)) problems.push({ kind: 'orphan', store: store.name, key })
        }
      }
    }
    const interrupted = io.signal.aborted
    const seconds = (performance.now() - started) / 1000
    report(io, options, { files, bytes, storeFilesScanned: scanned, seconds, problems, interrupted }, [
      `verified ${files} file(s), ${bytes} bytes; ${scanned} stored file(s) scanned for orphans`,
      ...problems.map(
        (p) =>
          `${p.kind}\t${escapeControls(p.store)}\t${escapeControls(p.key)}${p.expected !== undefined ? `\texpected ${escapeControls(String(p.expected))}, found ${escapeControls(String(p.actual))}` : ''}`,
      ),
      problems.length
        ? `${problems.length} problem(s)${interrupted ? ' (interrupted: not every file was checked)' : ''}`
        : interrupted
          ? 'interrupted: no problem so far'
          : 'no problem',
    ])
    if (problems.length) return EXIT.problems
    return interrupted ? EXIT.interrupted : EXIT.ok
  } finally {
    await close()
  }
}
