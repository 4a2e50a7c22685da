import type { SftpChannel, SftpClientInstance } from './sftp-client.js'

/** A failure of the connection itself (closed, reset, timed out), not of one request. */
export class ConnectionLostError extends Error {
  constructor(message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'ConnectionLostError'
  }
}

/** Errors that came back from the server or the connection (as opposed to a caller's body stream). */
const remoteErrors = new WeakSet<object>()

/** True for an error raised by an SFTP request or by the connection. */
export const isRemoteError = (err: unknown): boolean => typeof err === 'object' && err !== null && remoteErrors.has(err)

function asRemote(err: unknown): Error {
  const e = err instanceof Error ? err : new Error(String(err))
  remoteErrors.add(e)
  return e
}

type RequestCallback<T> = (err: Error | null | undefined, value: T) => void

/**
 * One SSH connection with its SFTP channel. Several operations share it at once (SFTP multiplexes
 * requests by id); `leases` counts them. Every request is bounded by the request timeout; when the
 * connection breaks, every request in flight is rejected at once, so nothing waits on a dead socket.
 */
export class Connection {
  readonly id: number
  readonly sftp: SftpChannel
  /** Operations currently using this connection. */
  leases = 0
  /** Operations that have used this connection (a retry only makes sense on a reused one). */
  uses = 0
  #broken: Error | undefined
  readonly #client: SftpClientInstance
  readonly #timeout: number
  readonly #pending = new Set<(err: Error) => void>()
  readonly #onBroken = new Set<(conn: Connection) => void>()

  constructor(id: number, client: SftpClientInstance, sftp: SftpChannel, timeout: number) {
    this.id = id
    this.#client = client
    this.sftp = sftp
    this.#timeout = timeout
    const lost = (what: string) => (err?: unknown) =>
      this.fail(new ConnectionLostError(err instanceof Error ? `${what}: ${err.message}` : what, { cause: err }))
    client.client.on('error', lost('connection error'))
    client.client.on('end', lost('the server ended the connection'))
    client.client.on('close', lost('the connection was closed'))
    sftp.on('error', lost('SFTP channel error'))
    sftp.on('end', lost('the server ended the SFTP channel'))
    sftp.on('close', lost('the SFTP channel was closed'))
  }

  /** True once the connection failed or was closed; it is then never used again. */
  get broken(): boolean {
    return this.#broken !== undefined
  }

  /** Called once when the connection breaks. */
  onBroken(listener: (conn: Connection) => void): void {
    this.#onBroken.add(listener)
  }

  /**
   * Sends one request: `send` issues it with the given callback. Rejects when the server answers with an
   * error, when no answer comes within the request timeout (the connection is then dropped), or when the
   * connection breaks.
   */
  request<T = void>(send: (callback: RequestCallback<T>) => void): Promise<T> {
    if (this.#broken) return Promise.reject(asRemote(new ConnectionLostError(this.#broken.message)))
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined
      const settle = (err: Error | null | undefined, value?: T): void => {
        if (!this.#pending.delete(abort)) return
        if (timer !== undefined) clearTimeout(timer)
        if (err) reject(asRemote(err))
        else resolve(value as T)
      }
      const abort = (err: Error): void => settle(err)
      this.#pending.add(abort)
      if (this.#timeout > 0) {
        timer = setTimeout(() => {
          const err = new ConnectionLostError(`no answer from the server within ${this.#timeout} ms`)
          settle(err)
          this.fail(err)
        }, this.#timeout)
      }
      try {
        send((err, value) => settle(err ?? undefined, value))
      } catch (err) {
        // ssh2 throws synchronously, e.g. for an extension the server does not offer.
        settle(err instanceof Error ? err : new Error(String(err)))
      }
    })
  }

  /** Marks the connection broken, rejects every request in flight and drops the socket. */
  fail(err: Error): void {
    if (this.#broken) return
    this.#broken = err
    for (const abort of [...this.#pending]) abort(new ConnectionLostError(err.message, { cause: err }))
    try {
      this.#client.client.destroy()
    } catch {
      // already gone
    }
    for (const listener of this.#onBroken) listener(this)
  }

  /** Ends the connection politely (waits at most `graceMs`, then drops it). */
  async end(graceMs = 2_000): Promise<void> {
    if (this.#broken) return
    let timer: NodeJS.Timeout | undefined
    const grace = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, graceMs)
    })
    const closing = this.#client.end().catch(() => false)
    await Promise.race([closing, grace])
    clearTimeout(timer)
    this.fail(new ConnectionLostError('the store was closed'))
  }
}

/** Counters of a {@link ConnectionPool}, for monitoring and tests. */
export interface PoolStats {
  /** Connections open now. */
  open: number
  /** Connections being opened now. */
  connecting: number
  /** Operations using a connection now. */
  busy: number
  /** Connections opened since the store was created. */
  created: number
}

/**
 * At most `size` connections, opened lazily. `acquire` prefers an idle connection, then opens a new one
 * while under `size`, then shares the least busy one: operations never wait for each other to finish,
 * so a stream that is read slowly (or a `get` whose stream feeds a `put` on the same store) cannot
 * starve or deadlock the others. A broken connection leaves the pool at once and is replaced on demand.
 */
export class ConnectionPool {
  readonly #size: number
  readonly #open: () => Promise<Connection>
  readonly #live = new Set<Connection>()
  readonly #creating = new Set<Promise<Connection>>()
  #created = 0
  #closed: Error | undefined

  constructor(size: number, open: () => Promise<Connection>) {
    this.#size = size
    this.#open = open
  }

  get stats(): PoolStats {
    let busy = 0
    for (const c of this.#live) busy += c.leases
    return { open: this.#live.size, connecting: this.#creating.size, busy, created: this.#created }
  }

  /** A connection for one operation; give it back with {@link release}. */
  async acquire(): Promise<Connection> {
    for (;;) {
      if (this.#closed) throw this.#closed
      let best: Connection | undefined
      for (const c of this.#live) {
        if (!c.broken && (best === undefined || c.leases < best.leases)) best = c
      }
      if (best !== undefined && best.leases === 0) return lease(best)
      if (this.#live.size + this.#creating.size < this.#size) return lease(await this.#create())
      if (best !== undefined) return lease(best)
      // Only connections being opened: wait for one of them, then look again.
      await Promise.race([...this.#creating].map((p) => p.then(noop, noop)))
    }
  }

  release(conn: Connection): void {
    conn.leases = Math.max(0, conn.leases - 1)
  }

  /** Ends every connection; later `acquire` calls fail with `closedError`. */
  async close(closedError: Error): Promise<void> {
    this.#closed = closedError
    await Promise.all([...this.#creating].map((p) => p.then(noop, noop)))
    await Promise.all([...this.#live].map((c) => c.end()))
    this.#live.clear()
  }

  #create(): Promise<Connection> {
    const pending: Promise<Connection> = this.#open().then(
      (conn) => {
        this.#creating.delete(pending)
        if (this.#closed) {
          void conn.end()
          throw this.#closed
        }
        this.#created++
        if (!conn.broken) {
          this.#live.add(conn)
          conn.onBroken((c) => this.#live.delete(c))
        }
        return conn
      },
      (err: unknown) => {
        this.#creating.delete(pending)
        throw err
      },
    )
    this.#creating.add(pending)
    return pending
  }
}

function lease(conn: Connection): Connection {
  conn.leases++
  conn.uses++
  return conn
}

function noop(): void {}
