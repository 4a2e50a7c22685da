import { createHash, randomBytes } from 'node:crypto'
import { posix } from 'node:path'
import { Readable, Writable } from 'node:stream'
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
import {
  isDirectory,
  isRegularFile,
  SFTP_STATUS,
  SftpClient,
  type AuthMethod,
  type SftpAttributes,
  type SftpDirEntry,
  type SftpStatusError,
} from './sftp-client.js'

/** Bytes per SFTP WRITE / READ request. */
const CHUNK = 64 * 1024
/** WRITE requests kept in flight per upload, READ requests read ahead per download. */
const WRITES_IN_FLIGHT = 16
const READS_AHEAD = 8
/** Bytes per `copy-data` request, so that each stays well within the request timeout. */
const COPY_SLICE = 64 * 1024 * 1024
/** How often an operation is retried when a concurrent `delete` removed its (then empty) directory. */
const DIR_RETRIES = 4
/** Keep-alive probes without an answer before the connection counts as dead. */
const KEEPALIVE_COUNT_MAX = 3

const statusOf = (err: unknown): number | string | undefined => (err as SftpStatusError | null)?.code
const isNoSuchFile = (err: unknown): boolean => statusOf(err) === SFTP_STATUS.NO_SUCH_FILE
const isUnsupported = (err: unknown): boolean => err instanceof Error && /does not support this extended request/.test(err.message)

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

function noop(): void {}

const isInside = (path: string, root: string): boolean =>
  root === '.' ? !path.startsWith('/') && path !== '.' && !path.startsWith('../') : path.startsWith(`${root === '/' ? '' : root}/`)

/** `.<name>.<random>.partial` next to `path`; the name is cut so the result fits in 255 bytes. */
function tempPathFor(path: string): string {
  return posix.join(posix.dirname(path), `.${posix.basename(path).slice(0, 200)}.${randomBytes(8).toString('hex')}.partial`)
}

/** The error's message, with the SFTP status code when it has one. */
function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err)
  const code = statusOf(err)
  return typeof code === 'number' ? `${err.message} (SFTP status ${code})` : err.message
}

async function lstat(conn: Connection, path: string): Promise<SftpAttributes | undefined> {
  try {
    return await conn.request<SftpAttributes>((cb) => conn.sftp.lstat(path, cb))
  } catch (err) {
    if (isNoSuchFile(err)) return undefined
    throw err
  }
}

function open(conn: Connection, path: string, flags: 'r' | 'wx'): Promise<Buffer> {
  return conn.request<Buffer>((cb) => conn.sftp.open(path, flags, cb))
}

function closeQuietly(conn: Connection, handle: Buffer): void {
  if (!conn.broken) conn.request((cb) => conn.sftp.close(handle, cb)).catch(noop)
}

/** `fsync@openssh.com` where the server offers it; a server without it gives no such guarantee. */
async function fsync(conn: Connection, handle: Buffer): Promise<void> {
  try {
    await conn.request((cb) => conn.sftp.ext_openssh_fsync(handle, cb))
  } catch (err) {
    if (!isUnsupported(err) && statusOf(err) !== SFTP_STATUS.OP_UNSUPPORTED) throw err
  }
}

/**
 * Renames with `posix-rename@openssh.com` (what ssh2-sftp-client's `posixRename` sends), which replaces
 * the target atomically. Servers without the extension get a plain SFTP rename, which refuses an
 * existing target on most servers: the target is then removed first (not atomic there).
 */
async function posixRename(conn: Connection, from: string, to: string): Promise<void> {
  try {
    await conn.request((cb) => conn.sftp.ext_openssh_rename(from, to, cb))
    return
  } catch (err) {
    if (!isUnsupported(err)) throw err
  }
  try {
    await conn.request((cb) => conn.sftp.rename(from, to, cb))
  } catch (err) {
    if (isNoSuchFile(err)) throw err
    await conn.request((cb) => conn.sftp.unlink(to, cb)).catch(noop)
    await conn.request((cb) => conn.sftp.rename(from, to, cb))
  }
}

/** Server-side copy with `copy-data`; false when the server does not offer it. */
async function serverCopy(conn: Connection, source: Buffer, target: Buffer, size: number): Promise<boolean> {
  for (let offset = 0; offset < size || offset === 0; offset += COPY_SLICE) {
    const length = Math.min(COPY_SLICE, size - offset)
    if (length === 0) break
    try {
      await conn.request((cb) => conn.sftp.ext_copy_data(source, offset, length, target, offset, cb))
    } catch (err) {
      if (offset === 0 && (isUnsupported(err) || statusOf(err) === SFTP_STATUS.OP_UNSUPPORTED)) return false
      throw err
    }
  }
  return true
}

/** Reads the source handle and writes the target handle, both on this connection. */
async function streamCopy(conn: Connection, source: Buffer, target: Buffer): Promise<void> {
  const writer = new HandleWriter(conn, target)
  const reader = new SftpReadStream(conn, source, 0, Number.POSITIVE_INFINITY, {
    onError: (err) => (err instanceof Error ? err : new Error(String(err))),
    onClose: noop,
    keepHandle: true,
  })
  await pipeline(reader, writer.sink())
}

/**
 * Writes to an open handle with several WRITE requests in flight (SFTP answers them in order, and a
 * round trip per 64 KiB would make uploads crawl on a distant server).
 */
class HandleWriter {
  bytesWritten = 0
  #position = 0
  #inFlight = 0
  #error: Error | undefined
  #wake: (() => void) | undefined
  readonly #conn: Connection
  readonly #handle: Buffer

  constructor(conn: Connection, handle: Buffer) {
    this.#conn = conn
    this.#handle = handle
  }

  /** Queues `bytes`; resolves once they are sent (not yet acknowledged). */
  async write(bytes: Uint8Array): Promise<void> {
    const buffer = Buffer.isBuffer(bytes) ? bytes : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.byteLength)
    for (let offset = 0; offset < buffer.length; offset += CHUNK) {
      while (this.#inFlight >= WRITES_IN_FLIGHT && this.#error === undefined) await this.#waitForSlot()
      if (this.#error) throw this.#error
      const slice = buffer.subarray(offset, Math.min(offset + CHUNK, buffer.length))
      const position = this.#position
      this.#position += slice.length
      this.#inFlight++
      this.#conn
        .request((cb) => this.#conn.sftp.write(this.#handle, slice, 0, slice.length, position, cb))
        .then(
          () => {
            this.bytesWritten += slice.length
            this.#settled()
          },
          (err: Error) => {
            this.#error ??= err
            this.#settled()
          },
        )
    }
  }

  /** Waits until every write is acknowledged; throws the first failure. */
  async flush(): Promise<void> {
    while (this.#inFlight > 0) await this.#waitForSlot()
    if (this.#error) throw this.#error
  }

  /** Writes all of `bytes`, checking `signal` between requests. */
  async writeAll(bytes: Uint8Array, signal: AbortSignal | undefined): Promise<number> {
    for (let offset = 0; offset < bytes.byteLength; offset += CHUNK * WRITES_IN_FLIGHT) {
      signal?.throwIfAborted()
      await this.write(bytes.subarray(offset, Math.min(offset + CHUNK * WRITES_IN_FLIGHT, bytes.byteLength)))
    }
    await this.flush()
    return this.bytesWritten
  }

  /** A Writable over this writer, for `pipeline`. */
  sink(): Writable {
    return new Writable({
      highWaterMark: CHUNK * 4,
      write: (chunk: Buffer, _encoding, callback) => {
        this.write(chunk).then(() => callback(), callback)
      },
      final: (callback) => {
        this.flush().then(() => callback(), callback)
      },
    })
  }

  #waitForSlot(): Promise<void> {
    return new Promise((resolve) => {
      this.#wake = resolve
    })
  }

  #settled(): void {
    this.#inFlight--
    const wake = this.#wake
    this.#wake = undefined
    wake?.()
  }
}

/**
 * Streams the inclusive byte range `[start, end]` of an open handle, with a few READ requests in flight.
 * Owns the handle (closed when the stream ends or is destroyed) and calls `onClose` exactly once then,
 * which gives the pooled connection back.
 */
class SftpReadStream extends Readable {
  readonly #conn: Connection
  readonly #handle: Buffer
  readonly #end: number
  readonly #hooks: { onError: (err: unknown) => Error; onClose: () => void; keepHandle?: boolean }
  #next: number
  #queue: Array<{ position: number; length: number; data: Promise<Buffer> }> = []
  #pumping = false
  #wanted = false
  #done = false
  #eof = false

  constructor(
    conn: Connection,
    handle: Buffer,
    start: number,
    end: number,
    hooks: { onError: (err: unknown) => Error; onClose: () => void; keepHandle?: boolean },
  ) {
    super({ highWaterMark: CHUNK * 4 })
    this.#conn = conn
    this.#handle = handle
    this.#next = start
    this.#end = end
    this.#hooks = hooks
  }

  override _read(): void {
    this.#wanted = true
    if (!this.#pumping) this.#startPump()
  }

  #startPump(): void {
    this.#pumping = true
    this.#wanted = false
    this.#pump().then(
      () => {
        this.#pumping = false
        // A read asked for while the pump was finishing: start again rather than stall.
        if (this.#wanted && !this.destroyed && !this.#done) this.#startPump()
      },
      (err: unknown) => {
        this.#pumping = false
        this.destroy(this.#hooks.onError(err))
      },
    )
  }

  override _destroy(err: Error | null, callback: (error?: Error | null) => void): void {
    for (const q of this.#queue) q.data.catch(noop)
    this.#queue = []
    if (!this.#hooks.keepHandle) closeQuietly(this.#conn, this.#handle)
    this.#hooks.onClose()
    callback(err)
  }

  #finish(): void {
    this.#done = true
    this.push(null)
  }

  async #pump(): Promise<void> {
    if (this.#done) return
    for (;;) {
      while (!this.#eof && this.#queue.length < READS_AHEAD && this.#next <= this.#end) {
        const length = Math.min(CHUNK, this.#end - this.#next + 1)
        const position = this.#next
        const data = this.#readAt(position, length)
        data.catch(noop)
        this.#queue.push({ position, length, data })
        this.#next += length
      }
      const head = this.#queue.shift()
      if (head === undefined) {
        this.#finish()
        return
      }
      let chunk = await head.data
      if (this.destroyed) return
      // A short read: the file ended early (it was shortened) or the server sent less; read the rest.
      while (chunk.length < head.length && !this.#eof) {
        const more = await this.#readAt(head.position + chunk.length, head.length - chunk.length)
        if (this.destroyed) return
        if (more.length === 0) this.#eof = true
        chunk = Buffer.concat([chunk, more])
      }
      if (chunk.length === 0) {
        this.#eof = true
        this.#queue = []
        this.#finish()
        return
      }
      if (!this.push(chunk)) return
    }
  }

  async #readAt(position: number, length: number): Promise<Buffer> {
    const buffer = Buffer.allocUnsafe(length)
    const bytesRead = await this.#conn.request<number>((cb) => this.#conn.sftp.read(this.#handle, buffer, 0, length, position, cb))
    return bytesRead === length ? buffer : buffer.subarray(0, bytesRead)
  }
}
