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
 */
import http from 'node:http'
import https from 'node:https'
import type { Duplex } from 'node:stream'

/** The bytes each connection reads into: reads of up to this many bytes, touched only as far as read. */
export const READ_BUFFER_BYTES = 256 * 1024

/** The SDK's own defaults for its agents (NodeHttpHandler): keep-alive, at most 50 sockets. */
const AGENT_DEFAULTS = { keepAlive: true, maxSockets: 50 } as const

type Connect = (options: object, callback?: (err: Error | null, socket: Duplex) => void) => Duplex

/** The agent's own `createConnection` with an `onread` that hands each read to the socket's `data` listeners. */
function connectWithReadBuffer(
  agent: http.Agent,
  create: Connect,
  options: object,
  callback?: (err: Error | null, socket: Duplex) => void,
): Duplex {
  let owner: Duplex | undefined
  const onread = {
    buffer: Buffer.allocUnsafeSlow(READ_BUFFER_BYTES),
    callback(bytes: number, into: Buffer): boolean {
      owner?.emit('data', into.subarray(0, bytes))
      return true
    },
  }
  owner = create.call(agent, { ...options, onread }, callback)
  return owner
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
