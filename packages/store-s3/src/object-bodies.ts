/**
 * What a GetObject answers, as the store passes it on: its body as a Node Readable, the range a 206
 * names, and the slice of a longer answer that was asked for.
 * @module
 */
import { Readable } from 'node:stream'

/** The GetObject body as a Node Readable (it is one in Node: the HTTP response itself). */
export function bodyOf(body: unknown): Readable {
  if (body instanceof Readable) return body
  if (body === undefined || body === null) return Readable.from([], { objectMode: false })
  if (typeof (body as ReadableStream).getReader === 'function') {
    return Readable.fromWeb(body as import('node:stream/web').ReadableStream<Uint8Array>)
  }
  throw new TypeError('Unexpected GetObject body type')
}

/** `bytes 0-99/1000` → {start, end, size}; undefined for anything else. */
export function parseContentRange(header: string | undefined): { start: number; end: number; size: number } | undefined {
  const m = header ? /^\s*bytes\s+(\d+)-(\d+)\/(\d+)\s*$/i.exec(header) : null
  if (!m) return undefined
  return { start: Number(m[1]), end: Number(m[2]), size: Number(m[3]) }
}

/** Skips `skip` bytes of `source`, yields the next `take`, then stops reading it. */
export async function* sliceOf(source: Readable, skip: number, take: number): AsyncGenerator<Buffer> {
  try {
    for await (const chunk of source) {
      let piece = chunk as Buffer
      if (skip > 0) {
        if (piece.length <= skip) {
          skip -= piece.length
          continue
        }
        piece = piece.subarray(skip)
        skip = 0
      }
      if (piece.length >= take) {
        yield piece.subarray(0, take)
        take = 0
        return
      }
      take -= piece.length
      yield piece
    }
    if (take > 0) throw new Error('The S3 response ended before the requested range')
  } finally {
    source.destroy()
  }
}
