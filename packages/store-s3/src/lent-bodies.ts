/**
 * Large GetObject bodies written into a Node response from the connection's own read buffers
 * (`writeInto` of `attach-storage/store-kit`), for the Node fast path of views.
 *
 * Why: Node's HTTP client copies each piece of a body out of the read it arrived in, so a piped GetObject
 * makes a new buffer outside V8's heap for every read, however the reads are made
 * (read-buffer-agents.ts). In a process with an application's heap those bytes start full marks of the
 * heap, a few per 100 MiB. Written this way, a view makes no new buffer per read at all.
 *
 * How: the body's connection is one of the store's agents'. Its reads are taken from the HTTP client
 * ({@link takeReads}) and each is written into the response as a view of the bytes it was read into,
 * which are read into again only once that write was called back; the connection pauses while two of
 * its buffers hold such bytes (three buffers of 256 KiB in all, as a rule). What the client had already
 * read of the body goes first. The
 * client never sees the rest of the body, so the connection is closed at the end (bodies of at least
 * {@link LEND_FROM_BYTES} only, where a new connection costs little against the transfer).
 * @module
 */
import type { IncomingMessage } from 'node:http'
import type { Readable, Writable } from 'node:stream'
import { finished, pipeline } from 'node:stream/promises'
import { type WritesInto, writeInto } from 'attach-storage/store-kit'
import { takeReads } from './read-buffer-agents.js'

/** Bodies this long or longer are written from the connection's buffers; shorter ones are piped. */
export const LEND_FROM_BYTES = 8 * 1024 * 1024

const ignore = () => {}

/**
 * `body` (a GetObject body of `length` bytes), with a `writeInto` method when it is long enough; a body
 * that did not come through the store's agents is piped by that method as any other.
 */
export function lendingBody(body: Readable, length: number | undefined): Readable {
  if (length === undefined || length < LEND_FROM_BYTES || !(body as IncomingMessage).socket) return body
  const into: WritesInto[typeof writeInto] = (dest) => writeBodyInto(body as IncomingMessage, length, dest)
  Object.defineProperty(body, writeInto, { value: into, configurable: true })
  return body
}

/** Writes the `length` bytes of the body `res` into `dest` and ends it (see the module's comment). */
function writeBodyInto(res: IncomingMessage, length: number, dest: Writable): Promise<void> {
  const socket = res.socket
  // Only a body no one has started to read: paused, nothing consumed, the connection still open.
  if (!socket || socket.destroyed || res.complete || res.destroyed || res.readableFlowing !== null || res.readableDidRead) {
    return pipeline(res, dest)
  }
  return new Promise<void>((resolve, reject) => {
    let sent = 0
    let settled = false

    const settle = (err?: Error) => {
      if (settled) return
      settled = true
      socket.off('close', onClose)
      // The HTTP client saw no more of this body: the connection cannot carry another request.
      socket.destroy()
      if (err) reject(err)
      else resolve()
    }
    const onClose = () => {
      if (sent < length) settle(new Error(`The S3 connection closed after ${sent} of the body's ${length} bytes`))
    }
    const send = (piece: Buffer, release?: () => void) => {
      sent += piece.length
      dest.write(piece, (err) => {
        if (err) settle(err)
        else release?.()
      })
      if (sent >= length) {
        // The whole body arrived: the connection is done with (after this read's callback returns).
        socket.off('close', onClose)
        queueMicrotask(() => socket.destroy())
        dest.end()
      }
    }

    const taken = takeReads(socket, (view, release) => {
      if (settled || sent >= length) {
        release()
        return false
      }
      send(view.length > length - sent ? view.subarray(0, length - sent) : view, release)
      return sent < length
    })
    if (!taken) {
      settled = true
      pipeline(res, dest).then(resolve, reject)
      return
    }
    // Closing the connection aborts the response the client still waits on; that is expected here.
    res.on('error', ignore)
    socket.on('close', onClose)
    finished(dest, { readable: false }).then(
      () => settle(sent >= length ? undefined : new Error('The destination finished before the whole body was written')),
      (err: Error) => settle(err),
    )
    // What the client had already read off the connection, then the connection's reads from here on.
    for (let chunk = res.read() as Buffer | null; chunk !== null && sent < length; chunk = res.read() as Buffer | null) {
      send(chunk.length > length - sent ? chunk.subarray(0, length - sent) : chunk)
    }
    if (sent < length) socket.resume()
  })
}
