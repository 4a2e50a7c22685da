import { createHash, randomBytes } from 'node:crypto'
import { posix } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import {
  AttachStorageError,
  isNormalKey,
  isValidKey,
  normalizeKey,
  normalizePrefix,
  notFoundError,
  resolveRange,
  storeFailure,
  type ByteRange,
  type PutOptions,
  type Store,
  type StoreFactory,
  type StoreListEntry,
  type StoreStat,
} from 'attach-storage/store-kit'
import { Connection, ConnectionPool, isRemoteError, type PoolStats } from './pool.js'
import { formatFingerprint, resolveSettings, scrub, type ResolvedSettings, type SftpStoreOptions } from './settings.js'
import { HandleWriter, SftpReadStream, streamCopy } from './handle-streams.js'
import { isDirectory, isRegularFile, SftpClient, type AuthMethod, type SftpAttributes, type SftpDirEntry } from './sftp-client.js'
import { closeQuietly, describe, fsync, isNoSuchFile, lstat, noop, open, posixRename, serverCopy } from './sftp-requests.js'

/** How often an operation is retried when a concurrent `delete` removed its (then empty) directory. */
const DIR_RETRIES = 4
/** Keep-alive probes without an answer before the connection counts as dead. */
const KEEPALIVE_COUNT_MAX = 3

/**
 * A {@link Store} on an SFTP server, under one base directory (`root`).
 *
 * - Every key goes through `normalizeKey` and is joined under `root` with POSIX paths; nothing outside
 *   `root` can be named.
 * - `put` and `copy` write `.<name>.<random>.partial` in the target directory, fsync it
 *   (`fsync@openssh.com`, where offered) and move it into place with `posix-rename@openssh.com`, which
 *   replaces the target atomically: readers see the old object or the whole new one. A failed or aborted
 *   write removes its partial file; when the connection is gone, the removal is retried on the next
 *   connection.
 * - `copy` lets the server copy (`copy-data`, OpenSSH 9.0+) where it can, and streams otherwise.
 * - `delete` (and `move`) remove directories left empty, up to but not including `root`.
 * - Symbolic links on the server are not objects: `stat`, `exists` and `list` do not follow them, and
 *   `get`, `move` and `copy` refuse them as sources (`not-found`).
 * - Connections: a small pool (see {@link SftpStoreOptions.poolSize}), opened lazily, shared by
 *   concurrent operations, replaced when broken. Every SFTP request has a timeout.
 * - Failures of the server or the connection are thrown once, as `AttachStorageError` with code
 *   `store-failure` (status 502), naming the operation and the key, never a password, passphrase or key.
 *
 * @example
 * const store = new SftpStore('remote', { host: 'files.example.com', username: 'app', privateKey: '/etc/app/id_ed25519', root: 'attachments' })
 * await store.put('demo/2026/11/42/abc.png', bytes)
 */
export class SftpStore implements Store {
  readonly type = 'sftp'
  readonly name: string
  readonly #s: ResolvedSettings
  readonly #pool: ConnectionPool
  /** Partial files whose removal failed because the connection was lost; retried on the next connection. */
  readonly #orphans = new Set<string>()
  #flushing = false
  #nextId = 1

  constructor(name: string, options: SftpStoreOptions) {
    this.name = name
    this.#s = resolveSettings(name, options as unknown as Record<string, unknown>)
    this.#pool = new ConnectionPool(this.#s.poolSize, () => this.#connect())
  }

  /** The base directory on the server, as configured (`.` for the login directory). */
  get root(): string {
    return this.#s.root
  }

  /** Connection pool counters. */
  get poolStats(): PoolStats {
    return this.#pool.stats
  }

  async put(key: string, body: Readable | Uint8Array, options: PutOptions = {}): Promise<{ size: number }> {
    const path = this.#pathOf(key)
    const { signal } = options
    signal?.throwIfAborted()
    const dir = posix.dirname(path)
    const temp = tempPathFor(path)
    let conn: Connection
    let handle: Buffer | undefined
    // Opening is retried on a fresh connection when a reused one turns out dead: no byte is read yet.
    for (let attempt = 0; ; attempt++) {
      conn = await this.#acquire('put', key)
      try {
        handle = await this.#inDir(conn, dir, () => open(conn, temp, 'wx'))
        break
      } catch (err) {
        this.#pool.release(conn)
        if (this.#retryable(err, conn, attempt)) continue
        throw this.#wrap('put', key, err)
      }
    }
    let created = true
    try {
      const writer = new HandleWriter(conn, handle)
      let size: number
      if (body instanceof Uint8Array) {
        size = await writer.writeAll(body, signal)
      } else {
        await pipeline(body, writer.sink(), signal ? { signal } : {})
        size = writer.bytesWritten
      }
      await fsync(conn, handle)
      const h = handle
      handle = undefined
      await conn.request((cb) => conn.sftp.close(h, cb))
      signal?.throwIfAborted()
      await posixRename(conn, temp, path) // temp sits in the target's directory
      created = false
      return { size }
    } catch (err) {
      if (handle !== undefined) closeQuietly(conn, handle)
      if (created) await this.#discard(conn, temp)
      if (signal?.aborted) throw err
      if (isRemoteError(err) || err instanceof AttachStorageError) throw this.#wrap('put', key, err)
      throw err // the body stream's own error, as it came
    } finally {
      this.#pool.release(conn)
    }
  }

  async get(key: string, range?: ByteRange): Promise<Readable> {
    const path = this.#pathOf(key)
    for (let attempt = 0; ; attempt++) {
      const conn = await this.#acquire('get', key)
      let handed = false
      try {
        const [attrs, opened] = await Promise.allSettled([lstat(conn, path), open(conn, path, 'r')])
        const handle = opened.status === 'fulfilled' ? opened.value : undefined
        try {
          if (attrs.status === 'rejected') throw attrs.reason
          if (attrs.value === undefined || !isRegularFile(attrs.value)) throw notFoundError(this.name, key)
          if (opened.status === 'rejected') {
            if (isNoSuchFile(opened.reason)) throw notFoundError(this.name, key)
            throw opened.reason
          }
          const stats = await conn.request<SftpAttributes>((cb) => conn.sftp.fstat(handle!, cb))
          if (!isRegularFile(stats)) throw notFoundError(this.name, key)
          const { start, end } = resolveRange(range, stats.size, key)
          const stream = new SftpReadStream(conn, handle!, start, end, {
            onError: (err) => this.#wrap('get', key, err),
            onClose: () => this.#pool.release(conn),
          })
          handed = true
          return stream
        } catch (err) {
          if (handle !== undefined) closeQuietly(conn, handle)
          throw err
        }
      } catch (err) {
        if (this.#retryable(err, conn, attempt)) continue
        throw this.#wrap('get', key, err)
      } finally {
        if (!handed) this.#pool.release(conn)
      }
    }
  }

  async stat(key: string): Promise<StoreStat> {
    const path = this.#pathOf(key)
    return this.#run('stat', key, true, async (conn) => {
      const attrs = await lstat(conn, path)
      if (attrs === undefined || !isRegularFile(attrs)) throw notFoundError(this.name, key)
      return { size: attrs.size, lastModified: new Date(attrs.mtime * 1000) }
    })
  }

  async exists(key: string): Promise<boolean> {
    const path = this.#pathOf(key)
    return this.#run('exists', key, true, async (conn) => {
      const attrs = await lstat(conn, path)
      return attrs !== undefined && isRegularFile(attrs)
    })
  }

  async move(from: string, to: string): Promise<void> {
    const source = this.#pathOf(from)
    const target = this.#pathOf(to)
    // Not retried on a lost connection: the rename may have happened, and a retry would then report
    // the (moved) source as missing.
    await this.#run('move', from, false, async (conn) => {
      await this.#checkSource(conn, source, from)
      if (source === target) return
      await this.#inDir(
        conn,
        posix.dirname(target),
        () => posixRename(conn, source, target),
        () => this.#checkSource(conn, source, from),
      )
      await this.#prune(conn, posix.dirname(source))
    })
  }

  async copy(from: string, to: string): Promise<void> {
    const source = this.#pathOf(from)
    const target = this.#pathOf(to)
    await this.#run('copy', from, true, async (conn) => {
      await this.#checkSource(conn, source, from)
      if (source === target) return
      await this.#copyInto(conn, source, target, from)
    })
  }

  async delete(key: string): Promise<void> {
    const path = this.#pathOf(key)
    await this.#run('delete', key, true, async (conn) => {
      try {
        await conn.request((cb) => conn.sftp.unlink(path, cb))
      } catch (err) {
        if (isNoSuchFile(err)) return
        // A directory at the key is no object, so there is nothing to delete.
        const attrs = await lstat(conn, path).catch(() => undefined)
        if (attrs !== undefined && isDirectory(attrs)) return
        throw err
      }
      await this.#prune(conn, posix.dirname(path))
    })
  }

  async *list(prefix: string): AsyncGenerator<StoreListEntry> {
    const normalized = normalizePrefix(prefix)
    const dir = normalized === '' ? this.#s.root : posix.join(this.#s.root, normalized.slice(0, -1))
    yield* this.#walk(dir, normalized)
  }

  async close(): Promise<void> {
    if (this.#orphans.size > 0) {
      // One last try at removing partial files left by lost connections.
      const conn = await this.#pool.acquire().catch(() => undefined)
      if (conn !== undefined) {
        try {
          await this.#flushOrphans(conn)
        } finally {
          this.#pool.release(conn)
        }
      }
    }
    await this.#pool.close(storeFailure(`SFTP store "${this.name}" is closed`))
  }

  // ---------------------------------------------------------------------------------------------

  /** The key normalized and joined under root (no I/O). */
  #pathOf(key: string): string {
    return posix.join(this.#s.root, normalizeKey(key))
  }

  /** Wraps a failure once as `store-failure` (502); AttachStorageErrors pass unchanged. */
  #wrap(op: string, key: string, err: unknown): AttachStorageError {
    if (err instanceof AttachStorageError) return err
    const raw = describe(err)
    const clean = scrub(raw, this.#s.auth.secrets)
    return storeFailure(`SFTP store "${this.name}": ${op} of ${JSON.stringify(key)} failed: ${clean}`, {
      cause: clean === raw ? err : new Error(clean),
    })
  }

  async #acquire(op: string, key: string): Promise<Connection> {
    try {
      return await this.#pool.acquire()
    } catch (err) {
      throw this.#wrap(op, key, err)
    }
  }

  /** A failure worth one more try: the connection broke under an operation that had reused it. */
  #retryable(err: unknown, conn: Connection, attempt: number): boolean {
    // By the time the failure surfaces, a lost connection is marked broken (its close event runs first).
    return attempt === 0 && conn.broken && conn.uses > 1 && !(err instanceof AttachStorageError && err.status < 500)
  }

  /** Runs `fn` on a pooled connection; retries once on a fresh one when `idempotent` and a reused one broke. */
  async #run<T>(op: string, key: string, idempotent: boolean, fn: (conn: Connection) => Promise<T>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      const conn = await this.#acquire(op, key)
      try {
        return await fn(conn)
      } catch (err) {
        if (idempotent && this.#retryable(err, conn, attempt)) continue
        throw this.#wrap(op, key, err)
      } finally {
        this.#pool.release(conn)
      }
    }
  }

  async #connect(): Promise<Connection> {
    const s = this.#s
    const client = new SftpClient(`attach-storage:${this.name}`, { error: noop, end: noop, close: noop })
    const auth: AuthMethod[] = []
    if (s.auth.key) auth.push({ type: 'publickey', username: s.username, key: s.auth.key })
    if (s.auth.password !== undefined) auth.push({ type: 'password', username: s.username, password: s.auth.password })
    let presented: string | undefined
    const where = `${s.username}@${s.host}:${s.port}`
    try {
      const sftp = await client.connect({
        host: s.host,
        port: s.port,
        username: s.username,
        authHandler: auth,
        readyTimeout: s.connectTimeout,
        keepaliveInterval: s.keepaliveInterval,
        keepaliveCountMax: KEEPALIVE_COUNT_MAX,
        hostVerifier: (hostKey: Buffer) => {
          if (s.hostHashes === undefined) return true
          const digest = createHash('sha256').update(hostKey).digest()
          if (s.hostHashes.some((h) => h.equals(digest))) return true
          presented = formatFingerprint(digest)
          return false
        },
      })
      const conn = new Connection(this.#nextId++, client, sftp, s.timeout)
      if (this.#orphans.size > 0) void this.#flushOrphansOn(conn)
      return conn
    } catch (err) {
      try {
        client.client.destroy()
      } catch {
        // nothing to drop
      }
      if (presented !== undefined) {
        throw storeFailure(
          `SFTP store "${this.name}": the host key of ${s.host}:${s.port} (${presented}) does not match host-hash; refusing to connect`,
        )
      }
      const message = scrub(describe(err).replace(/^getConnection: /, ''), s.auth.secrets)
      throw storeFailure(`SFTP store "${this.name}": cannot connect to ${where}: ${message}`, { cause: new Error(message) })
    }
  }

  /** Lets `op` create something in `dir`, creating `dir` (and its parents) when it is missing. */
  async #inDir<T>(conn: Connection, dir: string, op: () => Promise<T>, onMissing?: () => Promise<void>): Promise<T> {
    for (let attempt = 0; ; attempt++) {
      try {
        return await op()
      } catch (err) {
        if (!isNoSuchFile(err) || attempt >= DIR_RETRIES) throw err
        await onMissing?.()
      }
      await this.#mkdirp(conn, dir)
    }
  }

  async #mkdirp(conn: Connection, dir: string): Promise<void> {
    if (dir === '.' || dir === '/' || dir === '') return
    try {
      await conn.request((cb) => conn.sftp.mkdir(dir, cb))
      return
    } catch (err) {
      let failure: unknown = err
      if (isNoSuchFile(err)) {
        await this.#mkdirp(conn, posix.dirname(dir))
        try {
          await conn.request((cb) => conn.sftp.mkdir(dir, cb))
          return
        } catch (again) {
          failure = again
        }
      }
      // Most often it exists already (SFTP v3 has no EEXIST: OpenSSH answers FAILURE).
      const attrs = await lstat(conn, dir).catch(() => undefined)
      if (attrs !== undefined && isDirectory(attrs)) return
      throw failure
    }
  }

  /** A move or copy source: a regular file (no link, no directory). */
  async #checkSource(conn: Connection, path: string, key: string): Promise<void> {
    const attrs = await lstat(conn, path)
    if (attrs === undefined || !isRegularFile(attrs)) throw notFoundError(this.name, key)
  }

  /** Copies to a partial file in the target directory, fsyncs it, renames it into place. */
  async #copyInto(conn: Connection, source: string, target: string, sourceKey: string): Promise<void> {
    let sourceHandle: Buffer
    try {
      sourceHandle = await open(conn, source, 'r')
    } catch (err) {
      if (isNoSuchFile(err)) throw notFoundError(this.name, sourceKey)
      throw err
    }
    const temp = tempPathFor(target)
    let targetHandle: Buffer | undefined
    let created = false
    try {
      const stats = await conn.request<SftpAttributes>((cb) => conn.sftp.fstat(sourceHandle, cb))
      if (!isRegularFile(stats)) throw notFoundError(this.name, sourceKey)
      targetHandle = await this.#inDir(conn, posix.dirname(target), () => open(conn, temp, 'wx'))
      created = true
      const copied = this.#s.serverCopy && (await serverCopy(conn, sourceHandle, targetHandle, stats.size))
      if (!copied) await streamCopy(conn, sourceHandle, targetHandle)
      await fsync(conn, targetHandle)
      const h = targetHandle
      targetHandle = undefined
      await conn.request((cb) => conn.sftp.close(h, cb))
      await posixRename(conn, temp, target)
      created = false
    } catch (err) {
      if (targetHandle !== undefined) closeQuietly(conn, targetHandle)
      if (created) await this.#discard(conn, temp)
      throw err
    } finally {
      closeQuietly(conn, sourceHandle)
    }
  }

  /** Removes a partial file; when the connection is gone, remembers it for the next connection. */
  async #discard(conn: Connection, temp: string): Promise<void> {
    if (!conn.broken) {
      try {
        await conn.request((cb) => conn.sftp.unlink(temp, cb))
        return
      } catch (err) {
        if (isNoSuchFile(err)) return
        if (!conn.broken) return // refused for another reason: nothing a retry would fix
      }
    }
    this.#orphans.add(temp)
  }

  async #flushOrphansOn(conn: Connection): Promise<void> {
    conn.leases++
    try {
      await this.#flushOrphans(conn)
    } finally {
      this.#pool.release(conn)
    }
  }

  async #flushOrphans(conn: Connection): Promise<void> {
    if (this.#flushing) return
    this.#flushing = true
    try {
      for (const temp of [...this.#orphans]) {
        if (conn.broken) return
        try {
          await conn.request((cb) => conn.sftp.unlink(temp, cb))
          this.#orphans.delete(temp)
        } catch {
          if (!conn.broken) this.#orphans.delete(temp) // gone already, or not ours to remove
        }
      }
    } finally {
      this.#flushing = false
    }
  }

  /** Removes `dir` and its parents while they are empty, stopping below root. */
  async #prune(conn: Connection, dir: string): Promise<void> {
    const root = this.#s.root
    for (let d = dir; d !== root && isInside(d, root); d = posix.dirname(d)) {
      try {
        await conn.request((cb) => conn.sftp.rmdir(d, cb))
      } catch (err) {
        // Not empty (maybe filled by a concurrent put), or anything else: leave it be.
        if (!isNoSuchFile(err)) return
      }
    }
  }

  async *#walk(dir: string, keyPrefix: string): AsyncGenerator<StoreListEntry> {
    const entries = await this.#run('list', keyPrefix || '/', true, async (conn) => {
      try {
        return await conn.request<SftpDirEntry[]>((cb) => conn.sftp.readdir(dir, cb))
      } catch (err) {
        if (isNoSuchFile(err)) return []
        throw err
      }
    })
    entries.sort((a, b) => (a.filename < b.filename ? -1 : a.filename > b.filename ? 1 : 0))
    for (const entry of entries) {
      // Dot files (among them every `.x.y.partial`) and names no key can have are skipped; so are links.
      if (!isNormalKey(entry.filename)) continue
      const key = keyPrefix + entry.filename
      if (isDirectory(entry.attrs)) {
        yield* this.#walk(posix.join(dir, entry.filename), `${key}/`)
      } else if (isRegularFile(entry.attrs) && isValidKey(key)) {
        yield { key, size: entry.attrs.size, lastModified: new Date(entry.attrs.mtime * 1000) }
      }
    }
  }
}

/**
 * The factory the core calls for `attach.stores.<name>` with `type: sftp` (settings in camelCase).
 * Checks the settings (`config-invalid` on a problem); connects on first use.
 */
export const createStore: StoreFactory = (name, settings) => new SftpStore(name, settings as unknown as SftpStoreOptions)

// ----------------------------------------------------------------------------------------------------

const isInside = (path: string, root: string): boolean =>
  root === '.' ? !path.startsWith('/') && path !== '.' && !path.startsWith('../') : path.startsWith(`${root === '/' ? '' : root}/`)

/** `.<name>.<random>.partial` next to `path`; the name is cut so the result fits in 255 bytes. */
function tempPathFor(path: string): string {
  return posix.join(posix.dirname(path), `.${posix.basename(path).slice(0, 200)}.${randomBytes(8).toString('hex')}.partial`)
}
