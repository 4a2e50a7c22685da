import type { Client } from 'basic-ftp'

interface Idle {
  client: Client
  since: number
  timer: NodeJS.Timeout | undefined
}

interface Waiter {
  n: number
  resolve: (clients: Client[]) => void
  reject: (err: unknown) => void
}

/**
 * A small pool of basic-ftp clients (one control connection each). FTP carries one transfer per control
 * connection, so every store operation borrows a client and gives it back. Clients are created lazily,
 * reused while healthy, closed once idle for `idleTimeout`, and replaced when broken.
 *
 * `acquire(n)` takes `n` clients at once, first come first served, so that operations needing two
 * (a copy) cannot deadlock each other while each holds one.
 */
export class ClientPool {
  readonly #max: number
  readonly #idleTimeout: number
  readonly #create: () => Client
  readonly #connect: (client: Client) => Promise<void>
  readonly #idle: Idle[] = []
  readonly #leased = new Set<Client>()
  readonly #waiters: Waiter[] = []
  /** Slots taken: leased clients and clients being connected for a lease. */
  #busy = 0
  #closed = false

  constructor(options: {
    max: number
    idleTimeout: number
    create: () => Client
    connect: (client: Client) => Promise<void>
  }) {
    this.#max = options.max
    this.#idleTimeout = options.idleTimeout
    this.#create = options.create
    this.#connect = options.connect
  }

  /** Connections open now (leased or idle), for tests and metrics. */
  get size(): number {
    return this.#leased.size + this.#idle.length
  }

  /** Borrows `n` connected clients (at most the pool size); give each back with {@link release}. */
  acquire(n = 1): Promise<Client[]> {
    if (this.#closed) return Promise.reject(new Error('The store is closed'))
    if (n > this.#max) return Promise.reject(new Error(`Cannot borrow ${n} connections from a pool of ${this.#max}`))
    if (this.#waiters.length === 0 && this.#busy + n <= this.#max) {
      this.#busy += n
      return this.#prepare(n)
    }
    return new Promise((resolve, reject) => this.#waiters.push({ n, resolve, reject }))
  }

  /** Gives a client back: kept for reuse when `reusable` and still connected, else closed. */
  release(client: Client, reusable: boolean): void {
    if (!this.#leased.delete(client)) return
    this.#busy--
    if (this.#closed || !reusable || client.closed) {
      client.close()
    } else {
      const idle: Idle = { client, since: Date.now(), timer: undefined }
      if (this.#idleTimeout > 0) {
        idle.timer = setTimeout(() => {
          const i = this.#idle.indexOf(idle)
          if (i >= 0) {
            this.#idle.splice(i, 1)
            client.close()
          }
        }, this.#idleTimeout)
        idle.timer.unref()
      }
      this.#idle.push(idle)
    }
    this.#pump()
  }

  /** Closes every connection, idle or leased (operations in flight fail), and refuses new leases. */
  close(): void {
    this.#closed = true
    for (const idle of this.#idle.splice(0)) {
      if (idle.timer) clearTimeout(idle.timer)
      idle.client.close()
    }
    for (const client of this.#leased) client.close()
    for (const waiter of this.#waiters.splice(0)) waiter.reject(new Error('The store is closed'))
  }

  #pump(): void {
    while (!this.#closed && this.#waiters.length > 0) {
      const head = this.#waiters[0] as Waiter
      if (this.#busy + head.n > this.#max) return
      this.#waiters.shift()
      this.#busy += head.n
      this.#prepare(head.n).then(head.resolve, head.reject)
    }
  }

  /** Fills `n` reserved slots with connected clients: idle ones first (most recent first), else new. */
  async #prepare(n: number): Promise<Client[]> {
    const clients: Client[] = []
    try {
      for (let i = 0; i < n; i++) {
        const idle = this.#idle.pop()
        let client: Client
        if (idle) {
          if (idle.timer) clearTimeout(idle.timer)
          client = idle.client
        } else {
          client = this.#create()
        }
        this.#leased.add(client)
        clients.push(client)
        if (client.closed) await this.#connect(client)
      }
      if (this.#closed) throw new Error('The store is closed')
      return clients
    } catch (err) {
      for (const client of clients) this.release(client, false)
      // Slots reserved for clients never created.
      this.#busy -= n - clients.length
      this.#pump()
      throw err
    }
  }
}
