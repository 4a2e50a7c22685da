/**
 * `attach-storage copy-store --domain D --to STORE`: copies the files of a domain's live records to
 * another store under the same keys, checking the sha256 of every byte sent against the record. Each
 * verified copy is appended to a journal (`.attach-copy-store.{domain}.{store}.jsonl` next to the
 * configuration file, else in the data directory), so a rerun after a kill skips it.
 *
 * The records keep their store until the host's configuration names STORE as the domain's store: run
 * with that configuration, the command points the copied records at STORE (and with `--delete-source`
 * then removes the old copies).
 */
import { createHash } from 'node:crypto'
import { closeSync, existsSync, fdatasyncSync, openSync, readFileSync, writeSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { Transform } from 'node:stream'
import type { BlobRecord } from '../model.js'
import type { ServiceContext } from '../service/context.js'
import { storeKey } from '../service/layout.js'
import { startProgress } from './progress.js'
import { type CliIo, EXIT, forEachConcurrent, type GlobalOptions, openService, report, UsageError } from './runtime.js'
import { liveBlobs } from './walk.js'

export interface CopyStoreOptions extends GlobalOptions {
  domain?: string
  to?: string
  /** Files copied at once. @default 8 */
  concurrency?: number
  /** Remove the source copies of records already pointed at the target. */
  deleteSource?: boolean
  /** The journal file; default next to the configuration. */
  journal?: string
}

/** One line of the journal: a blob whose copy in the target store was verified. */
interface JournalEntry {
  id: number
  from: string
  key: string
  sha256: string
}

/** Files up to this size are read whole from a store that can (the local store), then sent. */
const IN_MEMORY = 1024 * 1024

/** Lines appended between two fdatasync calls. */
const SYNC_EVERY = 64

/** The journal: what is already verified, and an append-only file for what gets verified now. */
class Journal {
  readonly done = new Map<number, JournalEntry>()
  readonly #fd: number
  #unsynced = 0

  constructor(readonly path: string) {
    if (existsSync(path)) {
      for (const line of readFileSync(path, 'utf8').split('\n')) {
        try {
          const e = JSON.parse(line) as JournalEntry
          if (Number.isSafeInteger(e.id)) this.done.set(e.id, e)
        } catch {
          // The last line of a killed run may be cut; its copy is simply made again.
        }
      }
    }
    this.#fd = openSync(path, 'a')
  }

  /** Appends an entry; a kill after this returns keeps it (it is in the kernel), a power cut keeps all but the last few. */
  add(e: JournalEntry): void {
    writeSync(this.#fd, `${JSON.stringify(e)}\n`)
    this.done.set(e.id, e)
    if (++this.#unsynced >= SYNC_EVERY) this.sync()
  }

  sync(): void {
    fdatasyncSync(this.#fd)
    this.#unsynced = 0
  }

  close(): void {
    this.sync()
    closeSync(this.#fd)
  }
}

/** Copies one blob's file to `target`, hashing what is sent; true when size and sha256 match the row. */
async function copyBlob(ctx: ServiceContext, b: BlobRecord, targetName: string): Promise<{ ok: boolean; sha256: string; size: number }> {
  const key = storeKey(b.savedDir, b.savedName)
  const source = ctx.store(b.store)
  const target = ctx.store(targetName)
  if (source.readBytes && b.fileSize <= IN_MEMORY) {
    // A small file is read whole (one byte more shows a longer file) and checked before it is sent.
    const bytes = await source.readBytes(key, 0, b.fileSize + 1)
    const sha256 = createHash('sha256').update(bytes).digest('hex')
    if (sha256 !== b.sha256 || bytes.length !== b.fileSize) return { ok: false, sha256, size: bytes.length }
    const put = await target.put(key, bytes, { size: bytes.length, contentType: b.fileType })
    return { ok: put.size === b.fileSize, sha256, size: put.size }
  }
  const hash = createHash('sha256')
  let size = 0
  const hashing = new Transform({
    transform(chunk: Buffer, _encoding, callback) {
      hash.update(chunk)
      size += chunk.length
      callback(null, chunk)
    },
  })
  const stream = await source.get(key)
  stream.on('error', (err) => hashing.destroy(err))
  const put = await target.put(key, stream.pipe(hashing), { size: b.fileSize, contentType: b.fileType })
  const sha256 = hash.digest('hex')
  return { ok: sha256 === b.sha256 && size === b.fileSize && put.size === b.fileSize, sha256, size }
}

export async function copyStoreCommand(options: CopyStoreOptions, io: CliIo): Promise<number> {
  const domain = options.domain
  const to = options.to
  if (!domain || !to) throw new UsageError('copy-store needs --domain and --to')
  const concurrency = options.concurrency ?? 8
  if (!Number.isSafeInteger(concurrency) || concurrency < 1) throw new UsageError('--concurrency must be a positive integer')
  const { ctx, stateDir, close } = await openService(options, io)
  let journal: Journal | undefined
  try {
    if (!ctx.stores.stores.has(to)) throw new UsageError(`copy-store: store "${to}" is not declared (attach.stores.${to})`)
    const configured = ctx.config.domains[domain]?.store ?? ctx.config.defaultStore
    journal = new Journal(resolve(io.cwd, options.journal ?? join(stateDir, `.attach-copy-store.${domain}.${to}.jsonl`)))
    const total = (await ctx.repo.stats()).records.filter((r) => r.refDomain === domain && r.store !== to).reduce((n, r) => n + r.count, 0)
    const progress = startProgress('copy-store', total, io.stderr)
    const started = performance.now()
    let copied = 0
    let skipped = 0
    let bytes = 0
    const problems: Array<{ blobId: number; key: string; store: string; reason: string }> = []
    const verified: JournalEntry[] = []
    const j = journal
    try {
      await forEachConcurrent(liveBlobs(ctx.repo, { refDomain: domain }), concurrency, io.signal, async (b) => {
        if (b.store === to) return
        const key = storeKey(b.savedDir, b.savedName)
        const known = j.done.get(b.id)
        if (known && known.sha256 === b.sha256 && known.key === key) {
          skipped++
          verified.push(known)
          progress.tick(0)
          return
        }
        try {
          const r = await copyBlob(ctx, b, to)
          if (!r.ok) {
            problems.push({
              blobId: b.id,
              key,
              store: b.store,
              reason: `sent ${r.size} bytes of sha256 ${r.sha256}; the record says ${b.fileSize}, ${b.sha256}`,
            })
          } else {
            const entry = { id: b.id, from: b.store, key, sha256: b.sha256 }
            j.add(entry)
            verified.push(entry)
            copied++
            bytes += b.fileSize
          }
        } catch (err) {
          problems.push({ blobId: b.id, key, store: b.store, reason: (err as Error).message })
        }
        progress.tick(b.fileSize)
      })
    } finally {
      progress.stop()
      j.sync()
    }
    const seconds = (performance.now() - started) / 1000
    const interrupted = io.signal.aborted
    let switched = 0
    let deleted = 0
    const flip = configured === to
    if (flip && !interrupted && !problems.length) {
      const byStore = new Map<string, number[]>()
      for (const e of verified) byStore.set(e.from, [...(byStore.get(e.from) ?? []), e.id])
      for (const [from, ids] of byStore) switched += await ctx.repo.switchBlobStore(ids, from, to)
      if (options.deleteSource) {
        const dirs = new Set<string>()
        for (const e of j.done.values()) {
          const now = await ctx.repo.findBlobById(e.id)
          // Only copies no row points at any more: the blob is in the target now (or gone).
          if (now && now.store !== to) continue
          const source = ctx.stores.stores.get(e.from)
          if (!source) continue
          await source.delete(e.key)
          dirs.add(`${e.from}\n${e.key.slice(0, e.key.lastIndexOf('/') + 1)}`)
          deleted++
        }
        // The resize variants made in the old store (`{dir}_v/...`): the target makes its own on the next view.
        for (const d of dirs) {
          const [from, dir] = d.split('\n') as [string, string]
          const source = ctx.store(from)
          for await (const v of source.list(`${dir}_v/`)) await source.delete(v.key)
        }
      }
    } else if (options.deleteSource && !flip) {
      io.stderr.write(`--delete-source: nothing deleted while domain ${domain} is configured on store "${configured}"\n`)
    }
    const next = flip
      ? interrupted || problems.length
        ? 'run again to finish'
        : `records of domain ${domain} now point at ${to}`
      : `when every file is copied, set attach.domains.${domain}.store to ${to}, restart the server, and run this command again with that configuration`
    report(
      io,
      options,
      {
        domain,
        to,
        copied,
        skipped,
        bytes,
        seconds,
        switched,
        deletedSource: deleted,
        problems,
        interrupted,
        journal: j.path,
        configuredStore: configured,
      },
      [
        `copied ${copied} file(s) (${bytes} bytes) to ${to}, skipped ${skipped} already verified`,
        ...(flip ? [`pointed ${switched} file(s) at ${to}${options.deleteSource ? `, deleted ${deleted} source copies` : ''}`] : []),
        ...problems.map((p) => `problem\t${p.store}\t${p.key}\t${p.reason}`),
        interrupted ? 'interrupted: run again to go on' : next,
      ],
    )
    if (problems.length) return EXIT.problems
    return interrupted ? EXIT.interrupted : EXIT.ok
  } finally {
    journal?.close()
    await close()
  }
}
