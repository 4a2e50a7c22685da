/**
 * The Node bridge: turns a Node `IncomingMessage` into a Web `Request` (streaming body, abort signal)
 * and writes a Web `Response` to a `ServerResponse` (back-pressure, client aborts). The Express and
 * Fastify adapters are built on it; any `node:http` server can use {@link createNodeHandler} directly.
 *
 * @example
 * import { createServer } from 'node:http'
 * import { createAttachHandler } from 'attach-storage'
 * import { createNodeHandler } from 'attach-storage/node'
 *
 * createServer(createNodeHandler(createAttachHandler(storage).fetch)).listen(3000)
 */
import type { IncomingMessage, OutgoingHttpHeaders, ServerResponse } from 'node:http'
import type { Duplex, Readable } from 'node:stream'
import { AttachStorageError, badRequest, notFound, type AttachErrorCode } from '../errors.js'
import { carryNodeRequestBody, nodeBodyOf, writeStreamInto } from '../http/node-body.js'
import { type BodyState, releaseRequestBody, trackBody } from './early-answer.js'
import { answerMatched, type FastViews } from './fast-views.js'

/** Options shared by every entry point of the bridge. */
export interface NodeBridgeOptions {
  /**
   * Build the request URL from `X-Forwarded-Proto` and `X-Forwarded-Host` (first value of each).
   * Enable only behind a proxy that sets them.
   * @default false
   */
  trustProxy?: boolean
  /**
   * The origin the request URL is built on (`https://files.example.com`), instead of the `Host`
   * header and the socket's scheme. Only its origin is used.
   */
  baseUrl?: string
  /**
   * The fast path of a service's views by id ({@link createFastViews}), tried before the handler:
   * the same answers, on the Node request and response themselves. The adapters set it.
   */
  fast?: FastViews
}

/** Options of {@link toWebRequest}. */
export interface ToWebRequestOptions extends NodeBridgeOptions {
  /**
   * The request target (path and query) when the framework rewrote `req.url`, as Express does under a
   * mount path: pass `req.originalUrl`.
   * @default req.url
   */
  url?: string
  /**
   * The stream to read the body from instead of `req` itself, for a framework that hands the raw
   * payload over after its own hooks (Fastify's content-type parser `payload`).
   */
  body?: Readable
}

/** A `node:http` request listener. */
export type NodeHandler = (req: IncomingMessage, res: ServerResponse) => Promise<void>

/**
 * Request bytes queued ahead of the reader: none. The socket is read only when the reader asks, so a
 * body nobody has read yet is still whole in Node's stream, for a reader that takes it as that stream
 * (`NODE_REQUEST_BODY`: the upload readers), and a refused request has read nothing it must discard.
 */
const BODY_HIGH_WATER_MARK = 0

const HOST = /^(?:[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.?|\[[0-9A-Fa-f:.]+\])(?::\d{1,5})?$/

const first = (v: string | string[] | undefined) => (Array.isArray(v) ? v[0] : v?.split(',')[0])?.trim()

function requestUrl(req: IncomingMessage, options: ToWebRequestOptions): string {
  const target = options.url ?? req.url ?? '/'
  let path = '/'
  if (target.startsWith('/')) path = target
  else if (/^https?:\/\//i.test(target)) {
    // absolute-form (a request through a forward proxy): only its path and query count.
    try {
      const u = new URL(target)
      path = u.pathname + u.search
    } catch {
      path = '/'
    }
  }
  if (options.baseUrl) return new URL(options.baseUrl).origin + path
  const forwardedProto = options.trustProxy ? first(req.headers['x-forwarded-proto'])?.toLowerCase() : undefined
  const proto =
    forwardedProto === 'http' || forwardedProto === 'https'
      ? forwardedProto
      : (req.socket as { encrypted?: boolean } | null)?.encrypted
        ? 'https'
        : 'http'
  let host =
    (options.trustProxy ? first(req.headers['x-forwarded-host']) : undefined) ?? req.headers.host ?? first(req.headers[':authority'])
  if (!host || !HOST.test(host)) host = 'localhost'
  // Concatenated, never resolved against the origin: a target of `//evil.example/x` stays a path.
  return `${proto}://${host}${path}`
}

/**
 * A Web stream reading a Node stream as the consumer pulls, pausing the source in between; and `take`,
 * which hands the Node stream itself to a reader instead while the Web stream has not been read (it
 * then fails if read).
 */
function streamFrom(source: Readable, owner?: IncomingMessage): { stream: ReadableStream<Uint8Array>; take: () => Readable | undefined } {
  let onData: (chunk: Buffer | string) => void
  let detach = () => {}
  let pulled = false
  let taken = false
  let web: ReadableStreamDefaultController<Uint8Array> | undefined
  const state: BodyState = { received: 0, release: () => {} }
  if (owner) trackBody(owner, state)
  const take = (): Readable | undefined => {
    if (pulled || taken || state.received > 0 || source.readableEnded || source.destroyed) return undefined
    taken = true
    detach()
    try {
      web?.error(new AttachStorageError('aborted', 'The request body was taken as a Node stream', { status: 400 }))
    } catch {
      // already closed
    }
    return source
  }
  const stream = new ReadableStream<Uint8Array>(
    {
      start(controller) {
        web = controller
        let settled = false
        const settle = (fn: () => void) => {
          if (settled) return
          settled = true
          detach()
          try {
            fn()
          } catch {
            // the consumer cancelled meanwhile
          }
        }
        onData = (chunk) => {
          const bytes = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
          state.received += bytes.byteLength
          controller.enqueue(bytes)
          if ((controller.desiredSize ?? 1) <= 0) source.pause()
        }
        const onEnd = () => settle(() => controller.close())
        const onError = (err: Error) => settle(() => controller.error(err))
        const onClose = () => {
          if (!source.readableEnded)
            onError(new AttachStorageError('aborted', 'The client went away before the request body ended', { status: 400 }))
        }
        detach = () => {
          source.off('data', onData)
          source.off('end', onEnd)
          source.off('error', onError)
          source.off('close', onClose)
        }
        // The answer went out first: a late reader sees the body fail, never a truncated one end.
        state.release = () =>
          settle(() =>
            controller.error(new AttachStorageError('aborted', 'The answer was sent before the request body was read', { status: 400 })),
          )
        // 'data' is listened to from the first pull only: nothing reads the socket before (a deferred
        // `100 Continue` goes out on the first read, see deferContinue).
        source.once('end', onEnd)
        source.once('error', onError)
        source.once('close', onClose)
        source.pause()
      },
      pull() {
        if (taken) return
        if (!pulled) source.on('data', onData)
        pulled = true
        source.resume()
      },
      cancel() {
        if (taken) return
        // The handler stopped reading (an early 4xx): discard the rest so the answer can still be read
        // by the client, as Node does for a body nobody reads.
        detach()
        source.on('error', () => {})
        source.resume()
      },
    },
    { highWaterMark: BODY_HIGH_WATER_MARK, size: (chunk) => chunk.byteLength },
  )
  return { stream, take }
}

function formEncode(value: unknown, key: string, out: URLSearchParams): void {
  if (value === undefined || value === null) return
  if (Array.isArray(value)) for (const v of value) formEncode(v, key, out)
  else if (typeof value === 'object') for (const [k, v] of Object.entries(value)) formEncode(v, key ? `${key}[${k}]` : k, out)
  else out.append(key, String(value))
}

/** The bytes of a body a host's parser already read (`req.body` of Express's json/urlencoded/raw/text). */
function encodeParsed(parsed: unknown, contentType: string): Uint8Array | string {
  if (parsed instanceof Uint8Array || typeof parsed === 'string') return parsed
  if (/^application\/x-www-form-urlencoded/i.test(contentType)) {
    const out = new URLSearchParams()
    formEncode(parsed, '', out)
    return out.toString()
  }
  return JSON.stringify(parsed)
}

/**
 * Turns a Node request into a Web `Request` whose body streams from the socket as it is read (never
 * buffered), and whose `signal` aborts when the client disconnects before the response is finished.
 *
 * A body that a host's parser already consumed (Express's `express.json()` or `express.urlencoded()`
 * mounted before the handler, which set `req.body`) is re-encoded from `req.body`. Those parsers never
 * read `multipart/form-data`, so uploads always stream.
 *
 * @param res the response, when there is one: its premature `close` is the client going away.
 */
export function toWebRequest(req: IncomingMessage, res?: ServerResponse, options: ToWebRequestOptions = {}): Request {
  const url = requestUrl(req, options)
  const method = (req.method ?? 'GET').toUpperCase()
  const headers = new Headers()
  const raw = req.rawHeaders
  for (let i = 0; i + 1 < raw.length; i += 2) {
    const name = raw[i]!
    if (name.startsWith(':')) continue // HTTP/2 pseudo-headers
    try {
      headers.append(name, raw[i + 1]!)
    } catch {
      // a value Node accepted but the Fetch API does not: left out
    }
  }

  const controller = new AbortController()
  const abort = () => controller.abort(new DOMException('The client went away', 'AbortError'))
  if (res) {
    const onClose = () => {
      if (!res.writableFinished) abort()
    }
    res.once('close', onClose)
  } else {
    req.once('close', () => {
      if (!req.complete) abort()
    })
  }

  let body: BodyInit | null = null
  let take: (() => Readable | undefined) | undefined
  if (method !== 'GET' && method !== 'HEAD') {
    const parsed = (req as { body?: unknown }).body
    const consumed = req.readableEnded || (req as { _body?: unknown })._body === true
    const streamed = options.body ? streamFrom(options.body, req) : !consumed ? streamFrom(req, req) : undefined
    if (streamed) {
      body = streamed.stream
      take = streamed.take
    } else if (consumed && parsed !== undefined && headers.get('content-length') !== '0') {
      const bytes = encodeParsed(parsed, headers.get('content-type') ?? '')
      headers.delete('transfer-encoding')
      headers.delete('content-encoding')
      headers.set('content-length', String(typeof bytes === 'string' ? Buffer.byteLength(bytes) : bytes.byteLength))
      body = bytes as BodyInit
    }
  }
  const request = new Request(url, { method, headers, body, signal: controller.signal, duplex: 'half' } as RequestInit)
  return take ? carryNodeRequestBody(request, take) : request
}

/**
 * The methods the adapters hand to a Web handler. Any other one (`TRACE`, `TRACK`, `CONNECT`, which a
 * Web `Request` cannot even carry, and the WebDAV-style ones Node's parser lets through) is answered
 * 404 `not-found` by the adapter itself, the same way on every framework, before any handler runs.
 */
export const WEB_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'])

/** The answer to a method outside {@link WEB_METHODS}. */
export const methodNotServed = (): Response => notFound('No such route').toResponse()

/** Resolves true on 'drain', false when the response closed first. */
function drained(res: ServerResponse): Promise<boolean> {
  return new Promise((resolve) => {
    const done = (ok: boolean) => () => {
      res.off('drain', onDrain)
      res.off('close', onClose)
      resolve(ok)
    }
    const onDrain = done(true)
    const onClose = done(false)
    res.once('drain', onDrain)
    res.once('close', onClose)
  })
}

/** Bodies with a Content-Length up to this size are written at once. */
const SMALL_RESPONSE = 256 * 1024

export { NODE_BODY, NODE_REQUEST_BODY, nodeBodyOf, nodeRequestBodyOf, type NodeRequestBody } from '../http/node-body.js'
export { createFastViews, type FastViewMatch, type FastViews } from './fast-views.js'
export { type ListeningServer, serveViewsFirst, type ViewsCors, type ViewsFirstOptions } from './views-first.js'
export { DRAIN_IDLE_MS, DRAIN_LIMIT, DRAIN_TIME_MS, deferContinue, releaseRequestBody, unreadBody } from './early-answer.js'

/**
 * Writes a Web `Response` to a Node response: status, headers (each `Set-Cookie` on its own line), then
 * the body chunk by chunk, waiting for `drain` whenever the socket's buffer is full, so a slow client
 * never makes the server hold the whole body. When the client goes away (or `signal` aborts) the body
 * is cancelled, which closes the file or store stream behind it. Headers a middleware already set on
 * `res` (CORS) are kept unless the response sets the same ones.
 */
export async function writeWebResponse(res: ServerResponse, response: Response, signal?: AbortSignal): Promise<void> {
  const headers: OutgoingHttpHeaders = {}
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') headers[name] = value
  })
  const cookies = response.headers.getSetCookie()
  if (cookies.length > 0) headers['set-cookie'] = cookies
  const body = response.body
  if (res.req) releaseRequestBody(res.req, res)
  if (res.headersSent || res.destroyed) {
    await body?.cancel().catch(() => undefined)
    if (!res.destroyed) res.destroy()
    return
  }
  if (response.statusText) res.writeHead(response.status, response.statusText, headers)
  else res.writeHead(response.status, headers)
  if (!body || res.req?.method === 'HEAD') {
    await body?.cancel().catch(() => undefined)
    res.end()
    return
  }
  // A stored file streamed by the handlers: its Node stream goes straight to the socket.
  const node = nodeBodyOf(response)
  if (node) {
    const abort = () => node.destroy()
    signal?.addEventListener('abort', abort, { once: true })
    try {
      await writeStreamInto(node, res)
    } catch {
      // The client went away, or the source failed after the status line: cut the connection.
      if (!res.destroyed) res.destroy()
    } finally {
      signal?.removeEventListener('abort', abort)
    }
    return
  }
  // A small body with a known length (a small file, a JSON answer) is written in one piece: reading it
  // whole costs less than a read loop over its stream.
  const length = Number(response.headers.get('content-length') ?? NaN)
  if (Number.isFinite(length) && length <= SMALL_RESPONSE) {
    try {
      res.end(Buffer.from(await response.arrayBuffer()))
    } catch {
      if (!res.destroyed) res.destroy()
    }
    return
  }

  const reader = body.getReader()
  let aborted = false
  const abort = () => {
    if (aborted) return
    aborted = true
    reader.cancel().catch(() => undefined)
  }
  const onClose = () => {
    if (!res.writableFinished) abort()
  }
  res.once('close', onClose)
  if (signal?.aborted) abort()
  signal?.addEventListener('abort', abort, { once: true })
  try {
    for (;;) {
      const { done, value } = await reader.read()
      if (done || aborted) break
      if (!res.write(value) && !(await drained(res))) {
        abort()
        break
      }
    }
    if (!aborted) res.end()
  } catch {
    // The body failed after the status line went out: cut the connection so the client sees a
    // truncated answer, never a complete-looking one.
    if (!res.destroyed) res.destroy()
  } finally {
    res.off('close', onClose)
    signal?.removeEventListener('abort', abort)
    if (aborted && !res.destroyed && !res.writableEnded) res.destroy()
  }
}

/**
 * Serves one Node request with a Web handler: {@link toWebRequest}, the handler, then
 * {@link writeWebResponse}. Never rejects: a failure becomes a 500 (or a cut connection when the answer
 * had started).
 */
export async function handleNodeRequest(
  fetch: (request: Request) => Response | Promise<Response>,
  req: IncomingMessage,
  res: ServerResponse,
  options: ToWebRequestOptions = {},
): Promise<void> {
  if (!WEB_METHODS.has((req.method ?? 'GET').toUpperCase())) {
    await writeWebResponse(res, methodNotServed())
    return
  }
  const fast = options.fast?.match(req, options.url)
  if (fast) {
    await answerMatched(options.fast!, fast, req, res, () => toWebRequest(req, res, options))
    return
  }
  let request: Request
  try {
    request = toWebRequest(req, res, options)
  } catch {
    await writeWebResponse(res, badRequest('The request URL is not valid').toResponse())
    return
  }
  let response: Response
  try {
    response = await fetch(request)
  } catch {
    response = new AttachStorageError('internal-error', 'An internal error occurred', { status: 500 }).toResponse()
  }
  try {
    await writeWebResponse(res, response, request.signal)
  } catch {
    if (!res.destroyed) res.destroy()
  }
}

const FRAMEWORK_CODES: Record<number, [AttachErrorCode, string]> = {
  400: ['bad-request', 'The request is not valid'],
  401: ['unauthorized', 'Authentication is required'],
  403: ['forbidden', 'The request is not permitted'],
  404: ['not-found', 'No such route'],
  405: ['method-not-allowed', 'The method is not allowed here'],
  406: ['not-acceptable', 'No acceptable representation'],
  408: ['request-timeout', 'The request took too long to arrive'],
  411: ['length-required', 'The request needs a Content-Length'],
  413: ['too-large', 'The request body is too large'],
  415: ['unsupported-media-type', 'The content type is not supported'],
  431: ['headers-too-large', 'The request headers are too large'],
}
const JSON_ERRORS = new Set(['entity.parse.failed', 'FST_ERR_CTP_INVALID_JSON_BODY', 'FST_ERR_CTP_EMPTY_JSON_BODY'])

/**
 * A web framework's own refusal as the `{code, message}` error every other refusal answers: Express's
 * body parsers (`entity.parse.failed`, `entity.too.large`, `encoding.unsupported`, ...), Fastify's
 * content-type parsers and body limit (`FST_ERR_CTP_*`), a path that is not valid percent-encoding,
 * a 404 or 405 of the router. The status is the error's own 4xx (`status` or `statusCode`) with a
 * stable kebab-case code (400 `bad-request`, 404 `not-found`, 405 `method-not-allowed`, 413
 * `too-large`, 415 `unsupported-media-type`, ...); anything else is a 500 `internal-error`, whose
 * cause the caller should log. An `AttachStorageError` is returned as it is.
 */
export function frameworkError(err: unknown): AttachStorageError {
  if (err instanceof AttachStorageError) return err
  const e = (err ?? {}) as { status?: unknown; statusCode?: unknown; code?: unknown; type?: unknown }
  const status = [e.statusCode, e.status].find((v): v is number => Number.isInteger(v) && (v as number) >= 400 && (v as number) < 500)
  if (status === undefined) return new AttachStorageError('internal-error', 'An internal error occurred', { status: 500, cause: err })
  const [code, generic] = FRAMEWORK_CODES[status] ?? ['bad-request', 'The request is not valid']
  const kind = typeof e.type === 'string' ? e.type : typeof e.code === 'string' ? e.code : ''
  const message =
    err instanceof URIError || kind === 'FST_ERR_BAD_URL'
      ? // The same words as the attach handlers for a path that is not valid percent-encoding.
        'The path is not valid percent-encoding'
      : JSON_ERRORS.has(kind)
        ? 'The body is not valid JSON'
        : generic
  return new AttachStorageError(code, message, { status, cause: err })
}

/** The JSON answer of {@link answerClientError}: status, code and message by Node's error code. */
function clientErrorOf(err: NodeJS.ErrnoException): [number, string, AttachErrorCode, string] {
  if (err.code === 'HPE_HEADER_OVERFLOW')
    return [431, 'Request Header Fields Too Large', 'headers-too-large', 'The request headers are too large']
  if (err.code === 'ERR_HTTP_REQUEST_TIMEOUT') return [408, 'Request Timeout', 'request-timeout', 'The request took too long to arrive']
  return [400, 'Bad Request', 'bad-request', 'The request is not valid HTTP']
}

/**
 * A `clientError` listener for a `node:http` server (`server.on('clientError', answerClientError)`, or
 * Fastify's `clientErrorHandler` option): a request Node's parser refused (two different
 * `Content-Length` headers, a malformed chunked body, headers too large, a request too slow to arrive)
 * is answered like every other refusal, JSON `{code, message}` (400 `bad-request`, 431
 * `headers-too-large`, 408 `request-timeout`), with `Connection: close`, instead of Node's bare status
 * line or a framework's own shape. A connection reset by the client is simply closed.
 */
export function answerClientError(err: Error, socket: Duplex): void {
  const e = err as NodeJS.ErrnoException
  if (e.code === 'ECONNRESET' || !socket.writable || (socket as { _httpMessage?: { headersSent?: boolean } })._httpMessage?.headersSent) {
    socket.destroy()
    return
  }
  const [status, text, code, message] = clientErrorOf(e)
  const body = JSON.stringify({ code, message })
  socket.end(
    `HTTP/1.1 ${status} ${text}\r\nContent-Type: application/json; charset=utf-8\r\nCache-Control: no-store\r\n` +
      `X-Content-Type-Options: nosniff\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`,
  )
}

/**
 * A `node:http` request listener serving a Web handler.
 *
 * @example
 * createServer(createNodeHandler(createAttachHandler(storage).fetch)).listen(3000)
 */
export function createNodeHandler(fetch: (request: Request) => Response | Promise<Response>, options: NodeBridgeOptions = {}): NodeHandler {
  return (req, res) => handleNodeRequest(fetch, req, res, options)
}
