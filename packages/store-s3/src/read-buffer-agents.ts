/**
 * The HTTP(S) agents of the S3 store's own client: Node's agents with keep-alive, except that each
 * connection reads into one buffer of its own, filled again by every read, instead of a new buffer for
 * each read.
 *
 * Why: Node's HTTP client copies every piece of a response body out of the read it arrived in, so a
 * streamed GetObject otherwise makes two new buffers outside V8's heap for each 64 KiB: the read and the
 * copy. V8 counts those bytes against its limits until a collection frees them, and in a process that has
 * already collected a few times (after some uploads, say) that starts a full mark of the whole heap every
 * 16 MiB streamed; each mark costs in proportion to the application's heap. With one buffer per
 * connection only the body copies are new, and reads of up to 256 KiB make fewer reads: a view of
 * 256 MiB from S3 took 2.2 to 2.7 s of CPU per GiB instead of 3.1 to 3.6 in that state, and 0.93 where
 * no mark ran (docs/benchmarks.md).
 *
 * How: `net.connect` and `tls.connect` take `onread: { buffer, callback }` (Node >= 15), which reads into
 * that buffer and calls back instead of pushing the bytes into the socket's stream. The callback hands a
 * view of the bytes read to the socket's `data` listeners, which is where Node's HTTP client parses
 * them: it copies a body piece out and turns headers into strings before returning, so the next read
 * may fill the buffer again. The client's pause of a socket (a slow reader of the body) stops the reads
 * as before, `net` does that for sockets in this mode too.
 *
 * What it does not fit: a listener that keeps the `data` it is given beyond its call. No such listener
 * is in the S3 client's path; an upgrade or CONNECT, the one place Node's client keeps the bytes it was
 * given, is never made by it.
 *
 * Taken reads: {@link takeReads} gives a connection's further reads to a taker instead of its `data`
 * listeners (lent-bodies.ts writes a large body into a response that way). The taker may then hold the
 * bytes of each read until it releases them, so the connection reads on into the rest of its buffer or
 * into a buffer with nothing held, and pauses while two buffers are held.
 */
import http from 'node:http'
import https from 'node:https'
import type { Duplex } from 'node:stream'

/** The bytes each connection reads into: reads of up to this many bytes, touched only as far as read. */
export const READ_BUFFER_BYTES = 256 * 1024

/** The SDK's own defaults for its agents (NodeHttpHandler): keep-alive, at most 50 sockets. */
const AGENT_DEFAULTS = { keepAlive: true, maxSockets: 50 } as const

type Connect = (options: object, callback?: (err: Error | null, socket: Duplex) => void) => Duplex

/**
 * Who a connection's reads go to once {@link takeReads} gave them away. It is given a view of each read
 * and may keep it until it calls `release` (once); it answers `false` to stop the connection's reads
 * for good (it then destroys the socket).
 */
export type ReadTaker = (view: Buffer, release: () => void) => boolean

/** A taken connection reads on into the rest of its buffer while at least this much of it is left. */
const MIN_READ_BYTES = 64 * 1024

/** A taken connection pauses while this many of its buffers hold bytes not released yet. */
const MAX_HELD_BUFFERS = 2

/**
 * The reads of one connection of the agents: into its own buffer, handed to the socket's `data`
 * listeners; or, once taken, handed to the taker, each into bytes it does not hold: on into the rest of
 * a buffer, or into a buffer none of whose bytes are held (a new one when there is none: three in all
 * as a rule). A read may come even after a pause, since TLS hands on every record it already decrypted;
 * the next bytes to read into are therefore always free ones.
 */
class ConnectionReads {
  readonly #pool: Buffer[] = [Buffer.allocUnsafeSlow(READ_BUFFER_BYTES)]
  /** Reads not released yet, by the pool's buffer they lie in. */
  readonly #held = new Map<Buffer, number>()
  #next: Buffer = this.#pool[0]!
  #nextOwner: Buffer = this.#pool[0]!
  #paused = false
  taker: ReadTaker | undefined
  socket: Duplex | undefined

  /** Where the connection reads into next (`net` asks after each read). */
  next(): Buffer {
    return this.#next
  }

  read(bytes: number, into: Buffer): boolean {
    const taker = this.taker
    if (!taker) {
      this.socket?.emit('data', into.subarray(0, bytes))
      return true
    }
    const owner = this.#nextOwner
    this.#held.set(owner, (this.#held.get(owner) ?? 0) + 1)
    let released = false
    const goOn = taker(into.subarray(0, bytes), () => {
      if (released) return
      released = true
      this.#release(owner)
    })
    const end = into.byteOffset - owner.byteOffset + bytes
    if (owner.length - end >= MIN_READ_BYTES) {
      this.#next = owner.subarray(end)
    } else {
      let free = this.#pool.find((buffer) => !this.#held.has(buffer))
      if (!free) {
        free = Buffer.allocUnsafeSlow(READ_BUFFER_BYTES)
        this.#pool.push(free)
      }
      this.#next = this.#nextOwner = free
    }
    if (!goOn) return false
    if (this.#held.size < MAX_HELD_BUFFERS) return true
    this.#paused = true
    return false
  }

  #release(owner: Buffer): void {
    const left = this.#held.get(owner)! - 1
    if (left > 0) return void this.#held.set(owner, left)
    this.#held.delete(owner)
    if (this.#paused && this.#held.size < MAX_HELD_BUFFERS && this.taker) {
      this.#paused = false
      this.socket?.resume()
    }
  }
}

const connections = new WeakMap<object, ConnectionReads>()

/**
 * Gives the reads of `socket`, a connection of these agents, to `taker` from its next read on, away from
 * its `data` listeners (Node's HTTP client, which then sees no more of this connection). Answers false,
 * taking nothing, for a socket the agents did not make.
 */
export function takeReads(socket: object, taker: ReadTaker): boolean {
  const reads = connections.get(socket)
  if (!reads) return false
  reads.taker = taker
  return true
}

/** The agent's own `createConnection` with an `onread` that hands each read on (see {@link ConnectionReads}). */
function connectWithReadBuffer(
  agent: http.Agent,
  create: Connect,
  options: object,
  callback?: (err: Error | null, socket: Duplex) => void,
): Duplex {
  const reads = new ConnectionReads()
  const onread = { buffer: () => reads.next(), callback: (bytes: number, into: Buffer) => reads.read(bytes, into) }
  const socket = create.call(agent, { ...options, onread }, callback)
  reads.socket = socket
  connections.set(socket, reads)
  return socket
}

/** Node's `http.Agent` with keep-alive and 50 sockets, each reading into a buffer of its own. */
export class ReadBufferHttpAgent extends http.Agent {
  constructor(options?: http.AgentOptions) {
    super({ ...AGENT_DEFAULTS, ...options })
  }

  override createConnection(options: object, callback?: (err: Error | null, socket: Duplex) => void): Duplex {
    return connectWithReadBuffer(this, super.createConnection as Connect, options, callback)
  }
}

/** Node's `https.Agent` with keep-alive and 50 sockets, each reading into a buffer of its own. */
export class ReadBufferHttpsAgent extends https.Agent {
  constructor(options?: https.AgentOptions) {
    super({ ...AGENT_DEFAULTS, ...options })
  }

  override createConnection(options: object, callback?: (err: Error | null, socket: Duplex) => void): Duplex {
    return connectWithReadBuffer(this, super.createConnection as Connect, options, callback)
  }
}
