/**
 * Answers that go out before the request body was read (a 401, 413, 403 or 404 decided on the headers
 * or on the first bytes), on a `node:http` server: the rest of the body is read and discarded, up to a
 * bound, so the client still sending it sees the status instead of a reset; and `Expect: 100-continue`
 * is answered with `100 Continue` only once something reads the body, after the handler authenticated.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'

/**
 * What the bridge knows of a request body it streams: the bytes handed to the reader so far, and how to
 * let go of the source (the answer went out before the body was read, see {@link releaseRequestBody}).
 */
export interface BodyState {
  received: number
  release(): void
}
const bodies = new WeakMap<IncomingMessage, BodyState>()

/** Records the state of a body the bridge streams (toWebRequest). */
export function trackBody(req: IncomingMessage, state: BodyState): void {
  bodies.set(req, state)
}

/**
 * After an early answer, at most this many bytes of the unread request body are read and discarded;
 * a client that sends more has its connection cut.
 */
export const DRAIN_LIMIT = 64 * 1024 * 1024

/**
 * After an early answer, the unread request body is read and discarded for at most this long (from the
 * answer); a client still sending then has its connection cut.
 */
export const DRAIN_TIME_MS = 30_000

/** After an early answer, a client that sends nothing of the unread body for this long has its connection cut. */
export const DRAIN_IDLE_MS = 5000

/**
 * What becomes of the unread part of a request body when the answer goes out now: `none` (there is
 * none: no body, or it was read to its end), `drain` (it is read and discarded, within
 * {@link DRAIN_LIMIT} and {@link DRAIN_TIME_MS}; the connection is kept once it ended) or `close` (the
 * client was never told to send it, `Expect: 100-continue` without a `100`: the answer carries
 * `Connection: close`).
 */
export function unreadBody(req: IncomingMessage): 'none' | 'drain' | 'close' {
  if (req.complete || req.destroyed) return 'none'
  const chunked = req.headers['transfer-encoding'] !== undefined
  const length = Number(req.headers['content-length'] ?? 0)
  if (!chunked && Number.isSafeInteger(length) && length >= 0 && length - (bodies.get(req)?.received ?? 0) <= 0) return 'none'
  return awaitingContinue.has(req) ? 'close' : 'drain'
}

const released = new WeakSet<IncomingMessage>()
const ignore = () => {}

/**
 * Lets go of a request body that the answer about to be sent did not read, so that the client still
 * sending it reads the answer and the connection is never left waiting for a body nobody reads: the
 * rest is read and discarded while the answer goes out, and the connection is kept for the next request
 * once it ended (or closed then, when the answer closes it: a lingering close). A client that sends more
 * than {@link DRAIN_LIMIT} bytes, pauses {@link DRAIN_IDLE_MS} or is still sending {@link DRAIN_TIME_MS}
 * after this call has its connection cut. A client that was never sent `100
 * Continue` gets `Connection: close` (it is not sending). A reader of the Web body still waiting sees it
 * fail. Call it right before writing the answer; a second call does nothing. `writeWebResponse` calls
 * it; an adapter that sends the answer through its framework's reply calls it itself.
 *
 * @returns what was decided (see {@link unreadBody}).
 */
export function releaseRequestBody(req: IncomingMessage, res?: ServerResponse): 'none' | 'drain' | 'close' {
  const fate = unreadBody(req)
  if (released.has(req)) return fate
  released.add(req)
  if (fate === 'none') {
    // Read to the end by the parser, maybe not by the reader: whatever is still buffered goes.
    if (!req.readableEnded && !req.destroyed && bodies.has(req)) {
      bodies.get(req)!.release()
      req.on('error', ignore)
      req.resume()
    }
    return fate
  }
  bodies.get(req)?.release()
  req.on('error', ignore)
  if (fate === 'close' && res && !res.headersSent) res.setHeader('connection', 'close')
  discard(req, res)
  return fate
}

/**
 * Reads and discards the rest of `req`, cutting the connection past {@link DRAIN_LIMIT} bytes,
 * {@link DRAIN_TIME_MS} in all or {@link DRAIN_IDLE_MS} without a byte. Meanwhile a close Node asks for
 * once the answer is out (`Connection: close`: the client's, or HTTP/1.0) ends the server's side only
 * (a lingering close, the socket is half-open): closing at once with bytes unread would reset the
 * connection, and a reset can reach the client before it read the answer.
 */
function discard(req: IncomingMessage, res?: ServerResponse): void {
  const socket: Socket | null = req.socket
  let left = DRAIN_LIMIT
  let closing = false
  // HTTP/1 only: an HTTP/2 stream closes on its own, and its socket may not be touched.
  const lingerer =
    socket && req.httpVersionMajor < 2
      ? () => {
          // A close asked while the answer keeps the connection (@hono/node-server gives up discarding
          // after 500 ms) waits for the bounds here instead: a half-closed connection makes Node's
          // client drop the rest of its body.
          if ((res as { _last?: boolean } | undefined)?._last === false) return
          closing = true
          if (socket.writable) socket.end()
        }
      : undefined
  if (socket && lingerer) socket.destroySoon = lingerer
  const done = () => {
    clearTimeout(total)
    clearTimeout(idle)
    req.off('data', onData)
    req.off('end', done)
    req.off('close', done)
    // Back to the prototype's own method.
    if (lingerer && socket?.destroySoon === lingerer) delete (socket as { destroySoon?: unknown }).destroySoon
    if (closing) socket?.destroySoon()
  }
  const cut = () => {
    done()
    if (req.complete) return
    if (req.httpVersionMajor >= 2) req.destroy()
    else if (socket && !socket.destroyed) socket.destroy()
  }
  const total = setTimeout(cut, DRAIN_TIME_MS)
  const idle = setTimeout(cut, DRAIN_IDLE_MS)
  total.unref()
  idle.unref()
  const onData = (chunk: Buffer | string) => {
    left -= chunk.length
    if (left < 0) return cut()
    idle.refresh()
  }
  req.on('data', onData)
  req.once('end', done)
  req.once('close', done)
  req.resume()
}

/** Requests whose `100 Continue` waits for the first read of their body (see {@link deferContinue}). */
const awaitingContinue = new WeakSet<IncomingMessage>()
const deferring = new WeakSet<Server>()
const CONTINUE = /(?:^|\W)100-continue(?:$|\W)/i

/**
 * Makes `server` answer `Expect: 100-continue` with `100 Continue` only when something starts reading
 * the request body, instead of at once (Node's default): the attach handlers read a body only after
 * authenticating the request, so a client refused 401 (or 403, 404, 413 on the headers) is never told
 * to send its body; it gets the refusal alone, with `Connection: close`. Requests go on to the
 * server's `request` listeners as usual, so it works under any framework: call it once on the server
 * that serves them (`createServer(...)`, `serve(...)` of @hono/node-server, `app.server` of Fastify;
 * the Fastify plugin does it itself). Does nothing when the server already has a `checkContinue`
 * listener of its own.
 *
 * @example
 * const server = createServer(createNodeHandler(createAttachHandler(storage).fetch))
 * deferContinue(server).listen(3000)
 */
export function deferContinue<S extends Server>(server: S): S {
  if (deferring.has(server) || server.listenerCount('checkContinue') > 0) return server
  deferring.add(server)
  server.on('checkContinue', (req: IncomingMessage, res: ServerResponse) => {
    continueOnRead(req, res)
    server.emit('request', req, res)
  })
  return server
}

/** Sends `100 Continue` on the first read of `req`'s body, unless the answer started (or the body was let go) before. */
function continueOnRead(req: IncomingMessage, res: ServerResponse): void {
  if (!CONTINUE.test(String(req.headers.expect ?? ''))) return
  awaitingContinue.add(req)
  const self = req as unknown as { _read(size: number): void }
  const read = self._read
  self._read = function (this: unknown, size: number) {
    // Back to the prototype's own method: this one runs once.
    delete (req as unknown as { _read?: unknown })._read
    awaitingContinue.delete(req)
    if (!released.has(req) && !res.headersSent && !res.writableEnded && !res.destroyed) res.writeContinue()
    return read.call(this, size)
  }
}
