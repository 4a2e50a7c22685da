import { randomBytes } from 'node:crypto'
import { posix } from 'node:path'
import { type Readable, Transform, type TransformCallback } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import {
  AttachStorageError,
  isValidKey,
  normalizeKey,
  normalizePrefix,
  notFoundError,
  redact,
  resolveRange,
  storeFailure,
  type ByteRange,
  type PutOptions,
  type Store,
  type StoreFactory,
  type StoreListEntry,
  type StoreStat,
} from 'attach-storage/store-kit'
import { Client, FTPError, type FileInfo, type FTPResponse } from 'basic-ftp'
import { ClientPool } from './pool.js'
import { retrieve, type RetrieveMode } from './retrieve.js'
import { parseFtpSettings, type FtpSettings, type FtpStoreOptions } from './settings.js'

/** Keeps a borrowed client until `done` settles; `done` tells whether it can be reused. */
type Hold = (done: Promise<boolean>) => void

/** How often a put renames over an existing object by deleting it first (servers that refuse to replace). */
const REPLACE_ATTEMPTS = 3
/** Longest server reply quoted in an error message. */
const MAX_REASON = 300
/** Partial files whose removal failed (the server was gone), retried after the next login; at most this many. */
const MAX_ORPHANS = 1000

/**
 * A {@link Store} on an FTP or FTPS server (basic-ftp), under one root directory.
 *
 * - Every key goes through `normalizeKey` and is joined under `root`; every command uses an absolute
 *   path, so the working directory never matters.
 * - A small pool of control connections (`poolSize`) serves the operations; each borrows one (a copy
 *   two) for its duration, a `get` until its stream ends or is destroyed.
 * - `put` (and `copy`) upload to `.<name>.<random>.partial` in the target directory and rename it into
 *   place (`RNFR`/`RNTO`), so readers see the old file or the whole new one. A failed or aborted upload
 *   removes its partial file. On servers that refuse to rename onto an existing file, the target is
 *   deleted first and the rename retried: for that instant there is no object at the key.
 * - `get` with a range uses `SIZE` for the checks and `REST` for the offset, and stops reading after the
 *   range's last byte without losing the connection.
 * - `stat` is `SIZE` + `MDTM` (RFC 3659), which the server must support, in binary mode (`TYPE I`).
 * - `delete` removes directories left empty, up to but not including `root`.
 * - There is no server-side copy in FTP: `copy` streams the bytes down one connection and up another.
 * - Errors are `AttachStorageError`s: `not-found` (404), `range-not-satisfiable` (416), `bad-key` (400),
 *   otherwise `store-failure` (502) naming the operation and key. The password never appears in them.
 *
 * @example
 * const store = new FtpStore('remote', {
 *   host: 'ftp.example.com', user: 'attach', password, secure: true, root: '/attach',
 * })
 * await store.put('demo/2026/11/42/abc.png', bytes)
 */
export class FtpStore implements Store {
  readonly type = 'ftp'
  readonly name: string
  readonly #settings: FtpSettings
  readonly #pool: ClientPool
  /** The absolute root on the server without a trailing `/` (`''` is `/`); known after the first login. */
  #root: string | undefined
  /** Partial files left by uploads that failed with the connection; removed after the next login. */
  readonly #orphans = new Set<string>()

  constructor(name: string, options: FtpStoreOptions | Record<string, unknown>) {
    this.name = name
    this.#settings = parseFtpSettings(name, options)
    const root = this.#settings.root
    if (root?.startsWith('/')) this.#root = root
    else if (root === '') this.#root = ''
    this.#pool = new ClientPool({
      max: this.#settings.poolSize,
      idleTimeout: this.#settings.idleTimeout,
      create: () => new Client(this.#settings.timeout),
      connect: (client) => this.#connect(client),
    })
  }

  async put(key: string, body: Readable | Uint8Array, options: PutOptions = {}): Promise<{ size: number }> {
    const rel = normalizeKey(key)
    const { signal } = options
    signal?.throwIfAborted()
    return this.#run('put', [key], async (client) => this.#upload(client, rel, body, signal))
  }

  async get(key: string, range?: ByteRange): Promise<Readable> {
    const rel = normalizeKey(key)
    return this.#run('get', [key], async (c, hold) => {
      const path = this.#abs(rel)
      let start = 0
      let mode: RetrieveMode = 'all'
      let length: number | undefined
      if (range !== undefined) {
        const size = await this.#sizeOf(c, path, key)
        const r = resolveRange(range, size, key)
        start = r.start
        length = r.end - r.start + 1
        mode = r.end >= size - 1 ? 'exact' : 'slice'
      }
      return this.#open(c, path, key, { start, mode, length }, hold, 'get')
    })
  }

  async stat(key: string): Promise<StoreStat> {
    const rel = normalizeKey(key)
    return this.#run('stat', [key], async (c) => {
      const path = this.#abs(rel)
      const size = await this.#sizeOf(c, path, key)
      let lastModified: Date
      try {
        lastModified = await c.lastMod(path)
      } catch (err) {
        if (isMissing(err)) throw notFoundError(this.name, key)
        throw err
      }
      if (Number.isNaN(lastModified.getTime())) throw new Error('the server answered MDTM with no valid time')
      return { size, lastModified }
    })
  }

  async exists(key: string): Promise<boolean> {
    const rel = normalizeKey(key)
    return this.#run('exists', [key], async (c) => this.#isFile(c, this.#abs(rel)))
  }

  async move(from: string, to: string): Promise<void> {
    const relFrom = normalizeKey(from)
    const relTo = normalizeKey(to)
    await this.#run('move', [from, to], async (c) => {
      const source = this.#abs(relFrom)
      const target = this.#abs(relTo)
      await this.#sizeOf(c, source, from)
      if (source === target) return
      await this.#ensureDir(c, posix.dirname(target))
      await this.#renameReplacing(c, source, target, from)
      await this.#prune(c, posix.dirname(source))
    })
  }

  async copy(from: string, to: string): Promise<void> {
    const relFrom = normalizeKey(from)
    const relTo = normalizeKey(to)
    await this.#runPair('copy', [from, to], async (r, w, hold) => {
      const source = this.#abs(relFrom)
      if (source === this.#abs(relTo)) {
        await this.#sizeOf(r, source, from)
        return
      }
      let finished: Promise<boolean> | undefined
      const track = (done: Promise<boolean>): void => {
        finished = done
        hold(done)
      }
      const stream = await this.#open(r, source, from, { start: 0, mode: 'all' }, track, 'copy')
      try {
        await this.#upload(w, relTo, stream, undefined)
      } finally {
        stream.destroy()
        await finished
      }
    })
  }

  async delete(key: string): Promise<void> {
    const rel = normalizeKey(key)
    await this.#run('delete', [key], async (c) => {
      const path = this.#abs(rel)
      const res = await c.sendIgnoringError(`DELE ${path}`)
      if (res.code >= 200 && res.code < 300) {
        await this.#prune(c, posix.dirname(path))
        return
      }
      if (!(await this.#isFile(c, path))) return
      throw new Error(res.message)
    })
  }

  async *list(prefix: string): AsyncGenerator<StoreListEntry> {
    const normalized = normalizePrefix(prefix)
    const pending: Array<{ rel: string; keyPrefix: string }> = [
      { rel: normalized === '' ? '' : normalized.slice(0, -1), keyPrefix: normalized },
    ]
    while (pending.length > 0) {
      const { rel, keyPrefix } = pending.pop() as { rel: string; keyPrefix: string }
      const { files, dirs } = await this.#run('list', [prefix], async (c) => {
        const dir = rel === '' ? this.#rootDir() : this.#abs(rel)
        let entries: FileInfo[]
        try {
          entries = await c.list(dir)
        } catch (err) {
          // A folder that does not exist (or vanished meanwhile) has no objects.
          if (err instanceof FTPError && !(await this.#isDir(c, dir))) return { files: [], dirs: [] }
          throw err
        }
        const files: StoreListEntry[] = []
        const dirs: string[] = []
        for (const entry of entries.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))) {
          const name = entry.name
          // Dot-files (among them every `.x.y.partial`), `.`/`..`, and names no key can have are skipped.
          if (!isValidKey(keyPrefix + name)) continue
          if (entry.isDirectory) {
            dirs.push(name)
          } else if (entry.isFile) {
            let lastModified = entry.modifiedAt
            if (lastModified === undefined || Number.isNaN(lastModified.getTime())) {
              // LIST dates are in the server's zone and minute-precise at best; MDTM is exact and UTC.
              try {
                lastModified = await c.lastMod(`${dir === '/' ? '' : dir}/${name}`)
              } catch (err) {
                if (isMissing(err)) continue
                throw err
              }
            }
            files.push({ key: keyPrefix + name, size: entry.size, lastModified })
          }
        }
        return { files, dirs }
      })
      // Depth first, in name order: push the sub-folders reversed so the first is listed next.
      for (let i = dirs.length - 1; i >= 0; i--) {
        const name = dirs[i] as string
        pending.push({ rel: rel === '' ? name : `${rel}/${name}`, keyPrefix: `${keyPrefix}${name}/` })
      }
      // The connection is back in the pool while the caller handles the entries.
      yield* files
    }
  }

  async close(): Promise<void> {
    this.#pool.close()
  }

  // ---------------------------------------------------------------------------------------------

  /** Logs a client in; resolves the root from the login directory on the first login. */
  async #connect(client: Client): Promise<void> {
    const { host, port, user, password, secure, secureOptions } = this.#settings
    try {
      // access() writes `host` into the TLS options it is given: hand it a copy.
      await client.access({ host, port, user, password, secure, secureOptions: { ...secureOptions } })
    } catch (err) {
      client.close()
      const reason = reasonOf(err)
      const refused = err instanceof FTPError && (err.code === 530 || err.code === 331 || err.code === 332)
      throw new Error(
        refused
          ? `the server refused the login of user "${user}" at ${host}:${port} (${reason})`
          : `cannot connect to ${host}:${port} as "${user}" (${reason})`,
        { cause: err },
      )
    }
    if (this.#root === undefined) {
      const home = await client.pwd()
      const rel = this.#settings.root
      const joined = posix.normalize(rel === undefined ? home : posix.join(home, rel))
      this.#root = joined === '/' ? '' : joined.replace(/\/+$/, '')
    }
    for (const path of [...this.#orphans]) {
      this.#orphans.delete(path)
      await client.sendIgnoringError(`DELE ${path}`)
    }
  }

  /** The absolute server path of a normalized key. */
  #abs(rel: string): string {
    if (this.#root === undefined) throw new Error('the store root is not known before the first login')
    return `${this.#root}/${rel}`
  }

  #rootDir(): string {
    if (this.#root === undefined) throw new Error('the store root is not known before the first login')
    return this.#root === '' ? '/' : this.#root
  }

  /** Runs `fn` with one borrowed client (see {@link #lease}). */
  #run<T>(operation: string, keys: string[], fn: (client: Client, hold: Hold) => Promise<T>): Promise<T> {
    return this.#lease(operation, keys, 1, (clients, hold) => fn(clients[0] as Client, hold))
  }

  /** Runs `fn` with two clients borrowed at once (see {@link #lease}); `hold` is for the first. */
  #runPair<T>(operation: string, keys: string[], fn: (first: Client, second: Client, hold: Hold) => Promise<T>): Promise<T> {
    return this.#lease(operation, keys, 2, (clients, hold) => fn(clients[0] as Client, clients[1] as Client, hold))
  }

  /**
   * Borrows `n` clients, runs `fn`, gives them back, and wraps every error that is not an
   * AttachStorageError once, as `store-failure`. `hold(done)` keeps the first client borrowed until
   * `done` settles (a stream handed out); `done` tells whether the client can be reused.
   */
  async #lease<T>(operation: string, keys: string[], n: number, fn: (clients: Client[], hold: Hold) => Promise<T>): Promise<T> {
    let clients: Client[]
    try {
      clients = await this.#pool.acquire(n)
    } catch (err) {
      throw this.#failure(operation, keys, err)
    }
    let held: Promise<boolean> | undefined
    const hold: Hold = (done) => {
      held = done
    }
    try {
      return await fn(clients, hold)
    } catch (err) {
      throw this.#failure(operation, keys, err)
    } finally {
      const [first, ...rest] = clients
      for (const c of rest) this.#pool.release(c, !c.closed)
      if (first !== undefined) {
        if (held) void held.then((reusable) => this.#pool.release(first, reusable))
        else this.#pool.release(first, !first.closed)
      }
    }
  }

  /** Opens a RETR; resolves once the transfer started. `hold` receives the retrieval's end. */
  async #open(
    client: Client,
    path: string,
    key: string,
    spec: { start: number; mode: RetrieveMode; length?: number },
    hold: Hold,
    operation: string,
  ): Promise<Readable> {
    const retrieval = retrieve(client, {
      path,
      ...spec,
      timeout: this.#settings.timeout,
      wrap: (err) => this.#failure(operation, [key], err),
    })
    try {
      const stream = await retrieval.started
      hold(retrieval.done)
      return stream
    } catch (err) {
      await retrieval.done
      if (err instanceof FTPError && !client.closed && !(await this.#isFile(client, path))) throw notFoundError(this.name, key)
      throw err
    }
  }

  /** Uploads to a partial file beside the target, then renames it into place. */
  async #upload(client: Client, rel: string, body: Readable | Uint8Array, signal: AbortSignal | undefined): Promise<{ size: number }> {
    const target = this.#abs(rel)
    const dir = posix.dirname(target)
    const partial = `${dir}/.${posix.basename(target).slice(0, 200)}.${randomBytes(8).toString('hex')}.partial`
    const counter = new ByteCounter()
    // basic-ftp listens for errors only during the transfer; failures are reported through `state`.
    counter.on('error', () => {})
    const state: { failure?: { error: unknown } } = {}
    /** Throws what made the source fail (its own error, or the abort reason), if anything did. */
    const check = (): void => {
      if (state.failure) throw state.failure.error
    }
    const fail = (error: unknown): void => {
      state.failure ??= { error }
      counter.destroy(error instanceof Error ? error : new Error(String(error)))
    }
    signal?.throwIfAborted()
    const onAbort = (): void => fail(signal?.reason)
    signal?.addEventListener('abort', onAbort, { once: true })
    if (body instanceof Uint8Array) {
      counter.end(Buffer.from(body.buffer, body.byteOffset, body.byteLength))
    } else {
      pipeline(body, counter).catch((err: unknown) => fail(err))
    }

    try {
      await this.#ensureDir(client, dir)
      check()
      try {
        await client.uploadFrom(counter, partial)
      } catch (err) {
        check()
        throw err
      }
      check()
      signal?.throwIfAborted()
      await this.#renameReplacing(client, partial, target)
      return { size: counter.bytes }
    } catch (err) {
      await this.#removeQuietly(client, partial)
      throw err
    } finally {
      signal?.removeEventListener('abort', onAbort)
      if (!counter.destroyed) counter.destroy()
    }
  }

  /**
   * Removes a partial file after a failure, over a fresh login when the connection broke. When the
   * server cannot be reached now, the removal is done after the store's next login.
   */
  async #removeQuietly(client: Client, path: string): Promise<void> {
    try {
      if (client.closed) await this.#connect(client)
      await client.sendIgnoringError(`DELE ${path}`)
    } catch {
      if (this.#orphans.size < MAX_ORPHANS) this.#orphans.add(path)
    }
  }

  /**
   * Renames `from` onto `to`, replacing `to`. Servers on POSIX file systems replace atomically; others
   * refuse while `to` exists, so then `to` is deleted and the rename retried (a reader may find no
   * object at `to` in between).
   */
  async #renameReplacing(client: Client, from: string, to: string, sourceKey?: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      try {
        await client.rename(from, to)
        return
      } catch (err) {
        if (!(err instanceof FTPError) || client.closed) throw err
        if (!(await this.#isFile(client, from))) {
          if (sourceKey !== undefined) throw notFoundError(this.name, sourceKey)
          throw err
        }
        if (attempt >= REPLACE_ATTEMPTS || !(await this.#isFile(client, to))) throw err
        await client.sendIgnoringError(`DELE ${to}`)
      }
    }
  }

  /** Makes sure the directory exists: one CWD when it does, else MKD of every level (errors ignored). */
  async #ensureDir(client: Client, dir: string): Promise<void> {
    if (await this.#isDir(client, dir)) return
    const parts = dir.split('/').filter((p) => p !== '')
    let path = ''
    for (const part of parts) {
      path += `/${part}`
      await client.sendIgnoringError(`MKD ${path}`)
    }
    if (!(await this.#isDir(client, dir))) throw new Error(`cannot create the directory ${dir}`)
  }

  /** Removes `dir` and its parents while they are empty, stopping below the root. */
  async #prune(client: Client, dir: string): Promise<void> {
    const under = `${this.#root ?? ''}/`
    for (let d = dir; d.startsWith(under) && d.length > under.length; d = posix.dirname(d)) {
      const res = await client.sendIgnoringError(`RMD ${d}`)
      // Not empty (maybe by a concurrent put), or anything else: leave it be.
      if (res.code < 200 || res.code >= 300) return
    }
  }

  async #sizeOf(client: Client, path: string, key: string): Promise<number> {
    let res: FTPResponse
    try {
      res = await client.send(`SIZE ${path}`)
    } catch (err) {
      if (isMissing(err)) throw notFoundError(this.name, key)
      throw err
    }
    const size = /^\d{3}[ -](\d+)\b/.exec(res.message.trim())
    if (size) return Number(size[1])
    // A 213 without a number (ftp-srv answers "213 File status" for an empty file): ask the listing.
    const entry = (await client.list(path)).find((e) => e.isFile)
    if (entry === undefined) throw notFoundError(this.name, key)
    return entry.size
  }

  async #isFile(client: Client, path: string): Promise<boolean> {
    try {
      await client.send(`SIZE ${path}`)
      return true
    } catch (err) {
      if (isMissing(err)) return false
      throw err
    }
  }

  async #isDir(client: Client, path: string): Promise<boolean> {
    const res = await client.sendIgnoringError(`CWD ${path}`)
    return res.code >= 200 && res.code < 300
  }

  /** Wraps an error once as `store-failure`, without the password. */
  #failure(operation: string, keys: string[], err: unknown): AttachStorageError {
    if (err instanceof AttachStorageError) return err
    const what = keys.map((k) => JSON.stringify(k)).join(' → ')
    return storeFailure(`FTP store "${this.name}": ${operation}${what ? ` ${what}` : ''} failed: ${reasonOf(err)}`, {
      cause: this.#scrubbedCause(err),
      secrets: [this.#settings.password],
    })
  }

  #scrub(text: string): string {
    return redact(text, [this.#settings.password])
  }

  /** The cause as given, unless its message (or its cause's) holds the password: then a clean copy. */
  #scrubbedCause(err: unknown): unknown {
    const leaks = (e: unknown, depth = 0): boolean =>
      e instanceof Error &&
      depth < 5 &&
      (this.#scrub(`${e.message}\n${e.stack ?? ''}`) !== `${e.message}\n${e.stack ?? ''}` || leaks(e.cause, depth + 1))
    if (!leaks(err)) return err
    const clean = new Error(this.#scrub((err as Error).message))
    clean.name = (err as Error).name
    const code = (err as { code?: unknown }).code
    if (code !== undefined) Object.assign(clean, { code })
    return clean
  }
}

/** Creates an {@link FtpStore} from the declared settings (camelCase); what the core calls. */
export const createStore: StoreFactory = (name, settings) => new FtpStore(name, settings)

/** Counts the bytes that pass through. */
class ByteCounter extends Transform {
  bytes = 0
  constructor() {
    super({ highWaterMark: 64 * 1024 })
  }
  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    this.bytes += chunk.length
    callback(null, chunk)
  }
}

/** Replies that mean "no such file" to SIZE, MDTM, RETR, RNFR. */
function isMissing(err: unknown): boolean {
  return err instanceof FTPError && (err.code === 550 || err.code === 450)
}

/** A one-line, bounded description of an error (a server reply, a socket error). */
function reasonOf(err: unknown): string {
  let text: string
  if (err instanceof Error) text = err.message
  else if (typeof err === 'string') text = err
  else text = String(err)
  // biome-ignore lint/suspicious/noControlCharactersInRegex: replaces control characters in a server's reply
  text = text.replace(/[\u0000-\u001f\u007f]+/g, ' ').trim()
  return text.length > MAX_REASON ? `${text.slice(0, MAX_REASON)}…` : text || 'unknown error'
}
