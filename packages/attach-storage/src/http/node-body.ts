import type { Readable, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { type WritesInto, writeInto } from '../stores/store.js'

/**
 * A streamed answer of the handlers keeps its Node stream under this key. A Node adapter that finds it
 * pipes that stream to the socket itself (with back-pressure) instead of reading the Web body, which is
 * created lazily and then never started: the bytes cross no Web stream on Node.
 */
export const NODE_BODY = Symbol.for('attach-storage.node-body')

/**
 * Writes a stored file's stream into a Node destination (a response) and ends it: by the stream's own
 * {@link writeInto} where it has one (the S3 store's large bodies), else by a pipe. Rejects when either
 * side fails, leaving `dest` to the caller.
 */
export function writeStreamInto(stream: Readable, dest: Writable): Promise<void> {
  const into = (stream as Partial<WritesInto>)[writeInto]
  return into ? into.call(stream, dest) : pipeline(stream, dest)
}

/** A Response whose body streams `stream`, carrying the stream for Node adapters (see {@link NODE_BODY}). */
export function streamResponse(stream: Readable, init: ResponseInit): Response {
  // A failure reaches whoever reads (the Web reader through `errored`, a Node pipeline through its own
  // listener); this one only keeps an error with no reader yet from crashing the process.
  stream.on('error', () => {})
  const source = { stream, started: false }
  const body = new ReadableStream<Uint8Array>(
    {
      start() {},
      async pull(controller) {
        source.started = true
        const chunk = await nextChunk(stream)
        if (chunk === null) controller.close()
        else controller.enqueue(chunk)
      },
      cancel(reason) {
        stream.destroy(reason instanceof Error ? reason : undefined)
      },
    },
    { highWaterMark: 0 },
  )
  return new StreamedResponse(body, init, source)
}

/**
 * A Response carrying its Node stream under {@link NODE_BODY}. The getter is the class's (one hidden
 * class for all): a getter defined on each response would give each its own hidden class, made in the
 * old generation, holding the response's objects through young-generation collections.
 */
class StreamedResponse extends Response {
  readonly #source: { readonly stream: Readable; started: boolean }
  constructor(body: ReadableStream<Uint8Array>, init: ResponseInit, source: { readonly stream: Readable; started: boolean }) {
    super(body, init)
    this.#source = source
  }
  /** Once a Web reader has started, the Node stream is no longer free to be piped. */
  get [NODE_BODY](): Readable | undefined {
    return this.#source.started ? undefined : this.#source.stream
  }
}

/** The Node stream of a handler's answer, when it has one and nobody has read its Web body yet. */
export function nodeBodyOf(response: Response): Readable | undefined {
  return (response as unknown as Record<symbol, Readable | undefined>)[NODE_BODY]
}

/**
 * A Request made from a Node request may carry, under this key, a way to take its body as the Node
 * stream itself (see {@link nodeRequestBodyOf}). The Node bridge and the Hono adapter on
 * @hono/node-server set it; a reader of a large body (the multipart upload) takes it, so the bytes
 * cross no Web stream on Node.
 */
export const NODE_REQUEST_BODY = Symbol.for('attach-storage.node-request-body')

/** What a Request made from a Node request carries under {@link NODE_REQUEST_BODY}. */
export interface NodeRequestBody {
  /**
   * The Node stream of the body, when nothing of it was read yet; from then on the Web body of the
   * Request must not be read (it fails or is empty). Undefined when the body was already started, or
   * taken. The taker never destroys it (that would cut the connection before the answer): it stops
   * reading, and the adapter lets go of the rest after the answer, as for any body left unread.
   */
  take(): Readable | undefined
}

/** The Node stream of a request's body, taken (see {@link NODE_REQUEST_BODY}), or undefined: read `request.body`. */
export function nodeRequestBodyOf(request: Request): Readable | undefined {
  const carrier = (request as unknown as Record<symbol, NodeRequestBody | undefined>)[NODE_REQUEST_BODY]
  return carrier?.take()
}

/** Marks a Request as made from a Node request whose body `take` hands over (see {@link NODE_REQUEST_BODY}). */
export function carryNodeRequestBody(request: Request, take: () => Readable | undefined): Request {
  Object.defineProperty(request, NODE_REQUEST_BODY, { value: { take } satisfies NodeRequestBody, configurable: true })
  return request
}

/** The next chunk of a Node stream, or null at its end. */
function nextChunk(stream: Readable): Promise<Uint8Array | null> {
  return new Promise((resolve, reject) => {
    if (stream.errored) return reject(stream.errored)
    const chunk = stream.read() as Buffer | null
    if (chunk !== null) return resolve(chunk)
    if (stream.errored) return reject(stream.errored)
    if (stream.readableEnded) return resolve(null)
    // Destroyed before its end without an error: the answer is cut short, which must not pass as whole.
    if (stream.destroyed) return reject(new Error('The stream was destroyed before its end'))
    const cleanup = () => {
      stream.off('readable', onReadable)
      stream.off('end', onEndOk)
      stream.off('error', onError)
      stream.off('close', onEnd)
    }
    const onReadable = () => {
      const c = stream.read() as Buffer | null
      if (c === null) return
      cleanup()
      resolve(c)
    }
    const onEnd = () => {
      cleanup()
      if (stream.errored) reject(stream.errored)
      else if (stream.readableEnded) resolve(null)
      else reject(new Error('The stream was destroyed before its end'))
    }
    const onError = (err: Error) => {
      cleanup()
      reject(err)
    }
    const onEndOk = () => {
      cleanup()
      resolve(null)
    }
    stream.on('readable', onReadable)
    stream.once('end', onEndOk)
    stream.once('close', onEnd)
    stream.once('error', onError)
  })
}
