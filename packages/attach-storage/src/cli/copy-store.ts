/**
 * `attach-storage copy-store --domain D --to STORE`: copies the files of a domain's live records to
 * another store under the same keys, checking the sha256 of every byte sent against the record. Each
 * verified copy is appended to a journal (`.attach-copy-store.{domain}.{store}.jsonl` next to the
 * configuration file, else in the data directory), so a rerun after a kill need not send it again.
 *
 * The records keep their store until the host's configuration names STORE as the domain's store: run
 * with that configuration, the command points the copied records at STORE (and with `--delete-source`
 * then removes the old copies).
 *
 * It trusts nothing it has not just checked. A journal line only says where to look: the copy is
 * skipped when the target holds the key now with the record's size and sha256 (read back and hashed),
 * and made again otherwise. `--delete-source` removes only the source copies of this domain's live
 * records whose target copy this run verified (sent and hashed, or read back and hashed), each after
 * one more look at the target's size, and never a key another row still names in the source store. A
 * journal starts with a header naming its domain and target store; another journal is refused (exit 2).
 */
import { createHash } from 'node:crypto'
import { closeSync, existsSync, fdatasyncSync, openSync, readFileSync, writeSync } from 'node:fs'
import { join, resolve } from 'node:path'
import { Transform } from 'node:stream'
import type { BlobRecord } from '../model.js'
import type { ServiceContext } from '../service/context.js'
import { storeKey } from '../service/layout.js'
import { escapeControls } from './escape.js'
import { startProgress } from './progress.js'
import { type CliIo, EXIT, forEachConcurrent, type GlobalOptions, openService, report, UsageError } from './runtime.js'
import { checkBlob, scratchBuffers, type VerifyProblem } from './verify.js'
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

/** One line of the journal: a blob whose copy in the target store was verified when it was written. */
interface JournalEntry {
  id: number
  from: string
  key: string
  sha256: string
}

/** The first line of a journal: what it was written for. */
interface JournalHeader {
  journal: typeof JOURNAL_KIND
  domain: string
  to: string
}

const JOURNAL_KIND = 'attach-storage copy-store'

/** Files up to this size are read whole from a store that can (the local store), then sent. */
const IN_MEMORY = 1024 * 1024

/** Lines appended between two fdatasync calls. */
const SYNC_EVERY = 64

/**
 * The journal: where earlier runs sent copies (a hint, checked against the target before it counts),
 * and an append-only file for what gets verified now. Refuses a file written for another domain or
 * target store, or one without its header.
 */
class Journal {
  readonly done = new Map<number, JournalEntry>()
  readonly #fd: number
  #unsynced = 0

  constructor(
    readonly path: string,
    domain: string,
    to: string,
  ) {
    const text = existsSync(path) ? readFileSync(path, 'utf8') : ''
    const lines = text.split('\n')
    const fresh = text.trim() === ''
    if (!fresh) {
      let header: Partial<JournalHeader> | undefined
      try {
        header = JSON.parse(lines[0]!) as Partial<JournalHeader>
      } catch {
        header = undefined
      }
      if (header?.journal !== JOURNAL_KIND) {
        throw new UsageError(`copy-store: ${path} is not a copy-store journal (no header line); remove it or name another --journal`)
      }
      if (header.domain !== domain || header.to !== to) {
        throw new UsageError(
          `copy-store: the journal ${path} was written for domain ${header.domain} to store "${header.to}", not for domain ${domain} to store "${to}"; name another --journal`,
        )
      }
      for (const line of lines.slice(1)) {
        try {
          const e = JSON.parse(line) as JournalEntry
          if (Number.isSafeInteger(e.id) && typeof e.key === 'string' && typeof e.sha256 === 'string') this.done.set(e.id, e)
        } catch {
          // The last line of a killed run may be cut; its copy is simply made again.
        }
      }
    }
    this.#fd = openSync(path, fresh ? 'w' : 'a')
    if (fresh) {
      writeSync(this.#fd, `${JSON.stringify({ journal: JOURNAL_KIND, domain, to } satisfies JournalHeader)}\n`)
      this.sync()
    }
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

/** A copy this run verified in the target: the blob as read at the start, and the store its source copy is in. */
interface Verified {
  blob: BlobRecord
  from: string
  key: string
}

/**
 * Removes the source copy of one verified blob, when it is still safe right now: the blob row is live,
 * points at `to`, names the same key and bytes; the target answers the record's size; and no row names
 * the key in the source store. Answers whether it deleted.
 */
async function deleteSource(ctx: ServiceContext, v: Verified, to: string): Promise<boolean> {
  const now = await ctx.repo.findBlobById(v.blob.id)
  if (!now || now.refCount <= 0 || now.store !== to || now.sha256 !== v.blob.sha256 || now.fileSize !== v.blob.fileSize) return false
  if (storeKey(now.savedDir, now.savedName) !== v.key || v.from === to) return false
  const source = ctx.stores.stores.get(v.from)
  if (!source) return false
  if (await ctx.repo.findBlob(v.from, now.savedDir, now.savedName)) return false
  const there = await ctx.store(to).stat(v.key)
  if (there.size !== now.fileSize) return false
  await source.delete(v.key)
  return true
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
    const flip = configured === to
    const deleting = flip && !!options.deleteSource
    journal = new Journal(resolve(io.cwd, options.journal ?? join(stateDir, `.attach-copy-store.${domain}.${to}.jsonl`)), domain, to)
    const total = (await ctx.repo.operations.stats()).records
      .filter((r) => r.refDomain === domain && r.store !== to)
      .reduce((n, r) => n + r.count, 0)
    const progress = startProgress('copy-store', total, io.stderr)
    const started = performance.now()
    let copied = 0
    let recopied = 0
    let skipped = 0
    let bytes = 0
    const problems: Array<{ blobId: number; key: string; store: string; reason: string }> = []
    const verified: Verified[] = []
    const j = journal
    try {
      const scratch = scratchBuffers()
      await forEachConcurrent(liveBlobs(ctx.repo, { refDomain: domain }), concurrency, io.signal, async (b, worker) => {
        const key = storeKey(b.savedDir, b.savedName)
        const known = j.done.get(b.id)
        const journaled = known !== undefined && known.sha256 === b.sha256 && known.key === key
        if (b.store === to) {
          // Pointed at the target by an earlier run: its old copy goes only once the target's copy is read back whole.
          if (!deleting || !journaled || known.from === to) return
          const problem = await checkBlob(ctx, b, to, scratch(worker))
          if (problem) problems.push({ blobId: b.id, key, store: to, reason: describe(problem) })
          else verified.push({ blob: b, from: known.from, key })
          progress.tick(0)
          return
        }
        try {
          if (journaled) {
            // The journal says it was sent; it counts only if the target holds it now, byte for byte.
            const problem = await checkBlob(ctx, b, to, scratch(worker))
            if (!problem) {
              skipped++
              verified.push({ blob: b, from: b.store, key })
              progress.tick(0)
              return
            }
            // Missing, different or unreadable: no record uses that copy yet, so it is simply made again.
            recopied++
          }
          const r = await copyBlob(ctx, b, to)
          if (!r.ok) {
            problems.push({
              blobId: b.id,
              key,
              store: b.store,
              reason: `sent ${r.size} bytes of sha256 ${r.sha256}; the record says ${b.fileSize}, ${b.sha256}`,
            })
          } else {
            j.add({ id: b.id, from: b.store, key, sha256: b.sha256 })
            verified.push({ blob: b, from: b.store, key })
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
    if (flip && !interrupted && !problems.length) {
      const byStore = new Map<string, number[]>()
      for (const v of verified) if (v.blob.store !== to) byStore.set(v.blob.store, [...(byStore.get(v.blob.store) ?? []), v.blob.id])
      for (const [from, ids] of byStore) switched += await ctx.repo.operations.switchBlobStore(ids, from, to)
      if (deleting) {
        const dirs = new Set<string>()
        for (const v of verified) {
          if (io.signal.aborted) break
          try {
            if (!(await deleteSource(ctx, v, to))) continue
          } catch (err) {
            problems.push({ blobId: v.blob.id, key: v.key, store: v.from, reason: `source copy not deleted: ${(err as Error).message}` })
            continue
          }
          dirs.add(`${v.from}\n${v.key.slice(0, v.key.lastIndexOf('/') + 1)}`)
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
      io.stderr.write(
        `--delete-source: nothing deleted while domain ${escapeControls(domain)} is configured on store "${escapeControls(configured)}"\n`,
      )
    }
    const stopped = io.signal.aborted
    const next = flip
      ? stopped || problems.length
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
        recopied,
        skipped,
        bytes,
        seconds,
        switched,
        deletedSource: deleted,
        problems,
        interrupted: stopped,
        journal: j.path,
        configuredStore: configured,
      },
      [
        `copied ${copied} file(s) (${bytes} bytes) to ${to}${recopied ? ` (${recopied} journaled before but missing or different there)` : ''}, skipped ${skipped} already verified`,
        ...(flip ? [`pointed ${switched} file(s) at ${to}${options.deleteSource ? `, deleted ${deleted} source copies` : ''}`] : []),
        ...problems.map((p) => `problem\t${escapeControls(p.store)}\t${escapeControls(p.key)}\t${escapeControls(p.reason)}`),
        stopped ? 'interrupted: run again to go on' : next,
      ],
    )
    if (problems.length) return EXIT.problems
    return stopped ? EXIT.interrupted : EXIT.ok
  } finally {
    journal?.close()
    await close()
  }
}

/** A verify problem of a target copy, in words. */
function describe(p: VerifyProblem): string {
  if (p.kind === 'missing') return `the target copy in ${p.store} is missing`
  if (p.kind === 'size' || p.kind === 'sha256')
    return `the target copy in ${p.store} has ${p.kind} ${p.actual}; the record says ${p.expected}`
  return `the target copy in ${p.store} could not be read: ${p.actual ?? p.kind}`
}
