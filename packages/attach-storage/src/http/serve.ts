import { readAll } from '../stores/read-all.js'
import { streamResponse } from './node-body.js'
import { errorAnswer } from './respond.js'
import { AttachStorageError } from '../errors.js'
import { isActiveContent } from '../media/sniff.js'
import type { ByteRange, Store } from '../stores/store.js'
import type { ServeTarget } from '../service/attach-storage.js'

/**
 * `Content-Disposition` per RFC 6266 / RFC 8187: an ASCII fallback `filename` plus `filename*` in UTF-8,
 * so non-ASCII names (Korean, Japanese, accented) arrive intact.
 */
export function contentDisposition(type: 'inline' | 'attachment', fileName: string): string {
  const fallback = fileName
    .normalize('NFKD')
    .replace(/[\u0300-\u036f]/g, '')
    .normalize('NFC')
    .replace(/[^\x20-\x7e]/g, '_')
    .replace(/["\\]/g, '_')
  const encoded = encodeURIComponent(fileName).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
  return `${type}; filename="${fallback}"; filename*=UTF-8''${encoded}`
}

/** Parses a single `bytes=` range against a size; `null` for no (or an ignorable) range, `'unsatisfiable'` for 416. */
export function parseRange(header: string | null, size: number): ByteRange | null | 'unsatisfiable' {
  if (!header) return null
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim())
  if (!m) return null // multi-range and other units: answer the whole file
  const [, a, b] = m
  if (a === '' && b === '') return null
  let start: number
  let end: number
  if (a === '') {
    const suffix = Number(b)
    if (suffix === 0) return 'unsatisfiable'
    start = Math.max(0, size - suffix)
    end = size - 1
  } else {
    start = Number(a)
    end = b === '' ? size - 1 : Math.min(Number(b), size - 1)
    if (b !== '' && Number(b) < start) return null
  }
  if (start >= size || size === 0) return 'unsatisfiable'
  return { start, end }
}

const quoteEtag = (sha: string) => `"${sha}"`

/** Bodies up to this size are read whole and answered as bytes rather than as a stream. */
export const SMALL_BODY = 256 * 1024

/** What a file answer needs of its request: the method and the request headers (lower-case names). */
export interface AnswerRequest {
  readonly method: string
  header(name: string): string | null
}

/**
 * A file answer before it is written, the same for the Web handlers and the Node fast path: the status,
 * the headers (in the order they go out), and the body: none (HEAD, 304, a hand-off), bytes (a small
 * file or range read whole, an error), or a store's object to stream.
 */
export interface FileAnswer {
  status: number
  headers: Array<[string, string]>
  body?: Uint8Array | { store: Store; key: string; range: ByteRange | undefined; length: number }
  /**
   * The buffer of {@link ReadBuffers} the body was read into: the caller gives it back once the answer
   * has gone out (never while anything may still read the body).
   */
  lease?: Buffer
}

/** Buffers a caller lends {@link fileAnswer} to read small bodies into (the Node fast path's pool). */
export interface ReadBuffers {
  /** A buffer of at least `length` bytes, or undefined to read into a new one. */
  take(length: number): Buffer | undefined
  /** Gives back a buffer `take` answered, once nothing reads it any more. */
  give(buffer: Buffer): void
}

/** The Web `Request` as an {@link AnswerRequest}. */
export const webAnswerRequest = (request: Request): AnswerRequest => ({
  method: request.method,
  header: (name) => request.headers.get(name),
})

/**
 * True when the request's `If-None-Match` (else, for an immutable address, `If-Modified-Since`) says the
 * client holds this file already: the answer is 304. Needs only the target's validators, so a resized
 * variant is asked before it is made.
 */
export function notModified(request: AnswerRequest, target: Pick<ServeTarget, 'etag' | 'lastModified' | 'cache'>): boolean {
  const inm = request.header('if-none-match')
  if (inm && target.etag) {
    const tags = inm.split(',').map((t) => t.trim().replace(/^W\//, ''))
    return tags.includes('*') || tags.includes(quoteEtag(target.etag))
  }
  // A date says nothing about which file an address names when it may name another file later (a view
  // by reference after a re-sort or a replacement): only the ETag, the file's own hash, decides there.
  const ims = request.header('if-modified-since')
  if (ims && target.lastModified && !inm && target.cache === 'immutable') {
    const since = Date.parse(ims)
    // HTTP dates have whole seconds: the file is unchanged when it was last modified at or before `since`.
    return Number.isFinite(since) && Math.floor(target.lastModified.getTime() / 1000) * 1000 <= since
  }
  return false
}

/**
 * Decides the answer for a resolved file: `view` inline (active content types always go out as
 * downloads), `download` as an attachment under its display name. Sets Content-Type, Content-Length,
 * Last-Modified, a strong ETag, Cache-Control and nosniff; honours If-None-Match / If-Modified-Since
 * (304) and a single byte range (206 / 416); hands the bytes to nginx, Apache or lighttpd, or redirects
 * to a presigned store address, as the target's delivery says. A small body (at most {@link SMALL_BODY})
 * is read here in one call when the store can (`readBytes`), else whole from its stream.
 */
export async function fileAnswer(
  request: AnswerRequest,
  target: ServeTarget,
  action: 'view' | 'download',
  buffers?: ReadBuffers,
): Promise<FileAnswer> {
  const active = isActiveContent(target.fileType)
  const asAttachment = action === 'download' || active
  const type = active ? 'application/octet-stream' : target.fileType || 'application/octet-stream'
  const disposition = contentDisposition(asAttachment ? 'attachment' : 'inline', target.displayName)
  const headers: Array<[string, string]> = [
    ['content-type', type],
    ['x-content-type-options', 'nosniff'],
    ['content-disposition', disposition],
  ]
  const delivery = target.delivery
  const handOff = delivery?.mode === 'x-accel-redirect' || delivery?.mode === 'x-sendfile' ? delivery : undefined
  if (!handOff) headers.push(['accept-ranges', 'bytes'])
  if (active) headers.push(['content-security-policy', "default-src 'none'; sandbox"])
  const scope = target.private ? 'private' : 'public'
  headers.push(['cache-control', target.cache === 'immutable' ? `${scope}, max-age=31536000, immutable` : `${scope}, no-cache`])
  if (handOff) {
    // The server in front sends the file, with its own length, validators, Range and 304 answers.
    if (target.vary) headers.push(['vary', target.vary])
    headers.push(handOff.mode === 'x-accel-redirect' ? ['x-accel-redirect', handOff.uri] : ['x-sendfile', handOff.path])
    // An empty body of known length (not a chunked one) lets nginx keep its connection to this server
    // open for the next request: it reuses an upstream connection only when it has read the whole answer.
    headers.push(['content-length', '0'])
    return { status: 200, headers }
  }
  if (target.etag) headers.push(['etag', quoteEtag(target.etag)])
  if (target.vary) headers.push(['vary', target.vary])
  if (target.lastModified && target.cache === 'immutable') headers.push(['last-modified', target.lastModified.toUTCString()])

  if (notModified(request, target)) return { status: 304, headers }
  if (target.delivery?.mode === 'redirect') {
    // The store sends the bytes (and answers Range itself); the address is short-lived, so never cached.
    const location = await target.store.presignGet!(target.key, {
      expiresIn: target.delivery.ttlSeconds,
      contentType: type,
      contentDisposition: disposition,
    })
    const redirect: Array<[string, string]> = [
      ['location', location],
      ['cache-control', 'private, no-store'],
      ['x-content-type-options', 'nosniff'],
    ]
    if (target.vary) redirect.push(['vary', target.vary])
    return { status: 302, headers: redirect }
  }

  let range: ByteRange | undefined
  const ifRange = request.header('if-range')
  const rangeAllowed = !ifRange || (target.etag !== undefined && ifRange === quoteEtag(target.etag))
  if (rangeAllowed) {
    const r = parseRange(request.header('range'), target.fileSize)
    if (r === 'unsatisfiable') {
      const err = new AttachStorageError('range-not-satisfiable', 'The requested range is not satisfiable', { status: 416 })
      return errorAnswer(err, [...headers, ['content-range', `bytes */${target.fileSize}`]])
    }
    range = r ?? undefined
  }
  const status = range ? 206 : 200
  const length = range ? range.end! - range.start + 1 : target.fileSize
  if (range) headers.push(['content-range', `bytes ${range.start}-${range.end}/${target.fileSize}`])
  const sized = (bytes: number): Array<[string, string]> => [...headers, ['content-length', String(bytes)]]
  if (request.method === 'HEAD') return { status, headers: sized(length) }
  if (target.bytes) {
    const body = range ? target.bytes.subarray(range.start, range.end! + 1) : target.bytes
    return { status, headers: sized(body.length), body }
  }
  if (length <= SMALL_BODY) {
    // A small file is read whole and answered as bytes: written at once, where a stream costs a turn
    // per chunk. A store that reads a known length in one call skips opening a stream (and its stat).
    if (!target.store.readBytes) {
      const body = await readAll(await target.store.get(target.key, range))
      return { status, headers: sized(body.length), body }
    }
    // Read into a lent buffer where there is one: a new one per view is memory outside V8's heap, which
    // sets off its full collections under load.
    const lease = buffers?.take(length)
    let body: Uint8Array
    try {
      body = await target.store.readBytes(target.key, range?.start ?? 0, length, lease)
    } catch (err) {
      if (lease) buffers!.give(lease)
      throw err
    }
    return { status, headers: sized(body.length), body, lease }
  }
  return { status, headers: sized(length), body: { store: target.store, key: target.key, range, length } }
}

/**
 * Streams a resolved file as a Web Response ({@link fileAnswer} decides the status, headers and body).
 */
export async function serveFile(request: Request, target: ServeTarget, action: 'view' | 'download'): Promise<Response> {
  const answer = await fileAnswer(webAnswerRequest(request), target, action)
  const headers = new Headers(answer.headers)
  const { body } = answer
  if (body === undefined) return new Response(null, { status: answer.status, headers })
  if (body instanceof Uint8Array) return new Response(body as unknown as BodyInit, { status: answer.status, headers })
  const stream = await body.store.get(body.key, body.range)
  request.signal?.addEventListener('abort', () => stream.destroy(), { once: true })
  return streamResponse(stream, { status: answer.status, headers })
}
