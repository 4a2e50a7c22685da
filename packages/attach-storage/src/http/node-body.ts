import type { Readable } from 'node:stream'

/**
 * A streamed answer of the handlers keeps its Node stream under this key. A Node adapter that finds it
 * pipes that stream to the socket itself (with back-pressure) instead of reading the Web body, which is
 * created lazily and then never started: the bytes cross no Web stream on Node.
 */
export const NODE_BODY = Symbol.for('attach-storage.node-body')

/** A Response whose body streams `stream`, carrying the stream for Node adapters (see {@link NODE_BODY}). */
export function streamResponse(stream: Readable, init: ResponseInit): Response {
  let started = false
  const body = new ReadableStream<Uint8Array>(
    {
      start() {},
      async pull(controller) {
        started = true
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
  const response = new Response(body, init)
  Object.defineProperty(response, NODE_BODY, {
    // Once a Web reader has started, the Node stream is no longer free to be piped.
    get: () => (started ? undefined : stream),
  })
  return response
}

/** The Node stream of a handler's answer, when it has one and nobody has read its Web body yet. */
export function nodeBodyOf(response: Response): Readable | undefined {
  return (response as unknown as Record<symbol, Readable | undefined>)[NODE_BODY]
}

/** The next chunk of a Node stream, or null at its end. */
function nextChunk(stream: Readable): Promise<Uint8Array | null> {
  return new Promise((resolve, reject) => {
    const chunk = stream.read() as Buffer | null
    if (chunk !== null) return resolve(chunk)
    if (stream.readableEnded || stream.destroyed) return resolve(null)
    const cleanup = () => {
      stream.off('readable', onReadable)
      stream.off('end', onEnd)
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
      resolve(null)
    }
    const onError = (err: Error) => {
      cleanup()
      reject(err)
    }
    stream.on('readable', onReadable)
    stream.once('end', onEnd)
    stream.once('close', onEnd)
    stream.once('error', onError)
  })
}
