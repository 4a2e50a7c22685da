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
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { AttachStorageError, badRequest } from '../errors.js'
import { nodeBodyOf } from '../http/node-body.js'

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

/** Request bytes queued ahead of the reader before the socket is paused. */
const BODY_HIGH_WATER_MARK = 64 * 1024

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
  let host = (options.trustProxy ? first(req.headers['x-forwarded-host']) : undefined) ?? req.headers.host ?? first(req.headers[':authority'])
  if (!host || !HOST.test(host)) host = 'localhost'
  // Concatenated, never resolved against the origin: a target of `//evil.example/x` stays a path.
  return `${proto}://${host}${path}`
}

/** A Web stream reading a Node stream as the consumer pulls, pausing the source in between. */
function streamFrom(source: Readable): ReadableStream<Uint8Array> {
  let onData: (chunk: Buffer | string) => void
  let detach = () => {}
  return new ReadableStream<Uint8Array>(
    {
      start(controller) {
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
          controller.enqueue(typeof chunk === 'string' ? Buffer.from(chunk) : chunk)
          if ((controller.desiredSize ?? 1) <= 0) source.pause()
        }
        const onEnd = () => settle(() => controller.close())
        const onError = (err: Error) => settle(() => controller.error(err))
        const onClose = () => {
          if (!source.readableEnded) onError(new AttachStorageError('aborted', 'The client went away before the request body ended', { status: 400 }))
        }
        detach = () => {
          source.off('data', onData)
          source.off('end', onEnd)
          source.off('error', onError)
          source.off('close', onClose)
        }
        source.on('data', onData)
        source.once('end', onEnd)
        source.once('error', onError)
        source.once('close', onClose)
        source.pause()
      },
      pull() {
        source.resume()
      },
      cancel() {
        // The handler stopped reading (an early 4xx): discard the rest so the answer can still be read
        // by the client, as Node does for a body nobody reads.
        detach()
        source.on('error', () => {})
        source.resume()
      },
    },
    { highWaterMark: BODY_HIGH_WATER_MARK, size: (chunk) => chunk.byteLength },
  )
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
  if (method !== 'GET' && method !== 'HEAD') {
    const parsed = (req as { body?: unknown }).body
    const consumed = req.readableEnded || (req as { _body?: unknown })._body === true
    if (options.body) body = streamFrom(options.body)
    else if (consumed && parsed !== undefined && headers.get('content-length') !== '0') {
      const bytes = encodeParsed(parsed, headers.get('content-type') ?? '')
      headers.delete('transfer-encoding')
      headers.delete('content-encoding')
      headers.set('content-length', String(typeof bytes === 'string' ? Buffer.byteLength(bytes) : bytes.byteLength))
      body = bytes as BodyInit
    } else if (!consumed) body = streamFrom(req)
  }
  return new Request(url, { method, headers, body, signal: controller.signal, duplex: 'half' } as RequestInit)
}

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

/**
 * Writes a Web `Response` to a Node response: status, headers (each `Set-Cookie` on its own line), then
 * the body chunk by chunk, waiting for `drain` whenever the socket's buffer is full, so a slow client
 * never makes the server hold the whole body. When the client goes away (or `signal` aborts) the body
 * is cancelled, which closes the file or store stream behind it. Headers a middleware already set on
 * `res` (CORS) are kept unless the response sets the same ones.
 */
/** Bodies with a Content-Length up to this size are written at once. */
const SMALL_RESPONSE = 256 * 1024

export { NODE_BODY, nodeBodyOf } from '../http/node-body.js'

export async function writeWebResponse(res: ServerResponse, response: Response, signal?: AbortSignal): Promise<void> {
  const headers: OutgoingHttpHeaders = {}
  response.headers.forEach((value, name) => {
    if (name !== 'set-cookie') headers[name] = value
  })
  const cookies = response.headers.getSetCookie()
  if (cookies.length > 0) headers['set-cookie'] = cookies
  const body = response.body
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
      await pipeline(node, res)
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

/**
 * A `node:http` request listener serving a Web handler.
 *
 * @example
 * createServer(createNodeHandler(createAttachHandler(storage).fetch)).listen(3000)
 */
export function createNodeHandler(
  fetch: (request: Request) => Response | Promise<Response>,
  options: NodeBridgeOptions = {},
): NodeHandler {
  return (req, res) => handleNodeRequest(fetch, req, res, options)
}
