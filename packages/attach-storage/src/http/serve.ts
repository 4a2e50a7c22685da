import { readAll } from '../stores/read-all.js'
import { streamResponse } from './node-body.js'
import { AttachStorageError } from '../errors.js'
import { isActiveContent } from '../media/sniff.js'
import type { ByteRange } from '../stores/store.js'
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

/**
 * The answer that hands the bytes to the server in front: this process's headers (type, download name,
 * nosniff, cache policy, the sandbox of active content) and `X-Accel-Redirect` (nginx) or `X-Sendfile`
 * (Apache, lighttpd). That server sends the file with its own Content-Length, ETag, Last-Modified,
 * Range and conditional answers; nginx keeps Content-Type, Content-Disposition and Cache-Control of
 * this answer and adds the rest as its configuration says (docs/serving.md).
 */
function handOff(
  target: ServeTarget,
  delivery: Extract<NonNullable<ServeTarget['delivery']>, { mode: 'x-accel-redirect' | 'x-sendfile' }>,
  headers: Headers,
  active: boolean,
): Response {
  if (active) headers.set('content-security-policy', "default-src 'none'; sandbox")
  const scope = target.private ? 'private' : 'public'
  headers.set('cache-control', target.cache === 'immutable' ? `${scope}, max-age=31536000, immutable` : `${scope}, no-cache`)
  if (target.vary) headers.set('vary', target.vary)
  if (delivery.mode === 'x-accel-redirect') headers.set('x-accel-redirect', delivery.uri)
  else headers.set('x-sendfile', delivery.path)
  return new Response(null, { status: 200, headers })
}

/** Bodies up to this size are answered as bytes rather than as a stream. */
const SMALL_BODY = 256 * 1024

function notModified(request: Request, target: ServeTarget): boolean {
  const inm = request.headers.get('if-none-match')
  if (inm && target.etag) {
    const tags = inm.split(',').map((t) => t.trim().replace(/^W\//, ''))
    return tags.includes('*') || tags.includes(quoteEtag(target.etag))
  }
  // A date says nothing about which file an address names when it may name another file later (a view
  // by reference after a re-sort or a replacement): only the ETag, the file's own hash, decides there.
  const ims = request.headers.get('if-modified-since')
  if (ims && target.lastModified && !inm && target.cache === 'immutable') {
    const since = Date.parse(ims)
    // HTTP dates have whole seconds: the file is unchanged when it was last modified at or before `since`.
    return Number.isFinite(since) && Math.floor(target.lastModified.getTime() / 1000) * 1000 <= since
  }
  return false
}

/**
 * Streams a resolved file as a Web Response: `view` inline (active content types always go out as
 * downloads), `download` as an attachment under its display name. Sets Content-Type, Content-Length,
 * Last-Modified, a strong ETag, Cache-Control and nosniff; honours If-None-Match / If-Modified-Since
 * (304) and a single byte range (206 / 416).
 */
export async function serveFile(request: Request, target: ServeTarget, action: 'view' | 'download'): Promise<Response> {
  const headers = new Headers()
  const active = isActiveContent(target.fileType)
  const asAttachment = action === 'download' || active
  const type = active ? 'application/octet-stream' : target.fileType || 'application/octet-stream'
  const disposition = contentDisposition(asAttachment ? 'attachment' : 'inline', target.displayName)
  headers.set('content-type', type)
  headers.set('x-content-type-options', 'nosniff')
  headers.set('content-disposition', disposition)
  if (target.delivery?.mode === 'x-accel-redirect' || target.delivery?.mode === 'x-sendfile') {
    return handOff(target, target.delivery, headers, active)
  }
  headers.set('accept-ranges', 'bytes')
  if (active) headers.set('content-security-policy', "default-src 'none'; sandbox")
  const scope = target.private ? 'private' : 'public'
  headers.set('cache-control', target.cache === 'immutable' ? `${scope}, max-age=31536000, immutable` : `${scope}, no-cache`)
  if (target.etag) headers.set('etag', quoteEtag(target.etag))
  if (target.vary) headers.set('vary', target.vary)
  if (target.lastModified && target.cache === 'immutable') headers.set('last-modified', target.lastModified.toUTCString())

  if (notModified(request, target)) return new Response(null, { status: 304, headers })
  if (target.delivery?.mode === 'redirect') {
    // The store sends the bytes (and answers Range itself); the address is short-lived, so never cached.
    const location = await target.store.presignGet!(target.key, {
      expiresIn: target.delivery.ttlSeconds,
      contentType: type,
      contentDisposition: disposition,
    })
    const redirect = new Headers({ location, 'cache-control': 'private, no-store', 'x-content-type-options': 'nosniff' })
    if (target.vary) redirect.set('vary', target.vary)
    return new Response(null, { status: 302, headers: redirect })
  }

  let range: ByteRange | null = null
  const ifRange = request.headers.get('if-range')
  const rangeAllowed = !ifRange || (target.etag !== undefined && ifRange === quoteEtag(target.etag))
  if (rangeAllowed) {
    const r = parseRange(request.headers.get('range'), target.fileSize)
    if (r === 'unsatisfiable') {
      headers.set('content-range', `bytes */${target.fileSize}`)
      const err = new AttachStorageError('range-not-satisfiable', 'The requested range is not satisfiable', { status: 416 })
      return err.toResponse(headers)
    }
    range = r
  }
  if (request.method === 'HEAD') {
    headers.set('content-length', String(range ? range.end! - range.start + 1 : target.fileSize))
    return new Response(null, { status: range ? 206 : 200, headers })
  }
  if (target.bytes) {
    const body = range ? target.bytes.subarray(range.start, range.end! + 1) : target.bytes
    if (range) headers.set('content-range', `bytes ${range.start}-${range.end}/${target.fileSize}`)
    headers.set('content-length', String(body.length))
    return new Response(body as unknown as BodyInit, { status: range ? 206 : 200, headers })
  }
  const stream = await target.store.get(target.key, range ?? undefined)
  const length = range ? range.end! - range.start + 1 : target.fileSize
  if (length <= SMALL_BODY) {
    // A small file is read whole and answered as bytes: the adapters write those at once, where a
    // stream costs a Web stream round trip per answer.
    const body = await readAll(stream)
    if (range) headers.set('content-range', `bytes ${range.start}-${range.end}/${target.fileSize}`)
    headers.set('content-length', String(body.length))
    return new Response(body as unknown as BodyInit, { status: range ? 206 : 200, headers })
  }
  if (range) {
    headers.set('content-range', `bytes ${range.start}-${range.end}/${target.fileSize}`)
    headers.set('content-length', String(range.end! - range.start + 1))
  } else {
    headers.set('content-length', String(target.fileSize))
  }
  request.signal?.addEventListener('abort', () => stream.destroy(), { once: true })
  return streamResponse(stream, { status: range ? 206 : 200, headers })
}
