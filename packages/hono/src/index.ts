import type { IncomingMessage, ServerResponse } from 'node:http'
import type { Hono, MiddlewareHandler } from 'hono'
import type { FastViews } from 'attach-storage/node'
import { AttachStorageError, createAttachHandler, type AttachHandler, type AttachStorage } from 'attach-storage'

/**
 * The methods handed to the handlers; any other one (`TRACE`, WebDAV's, ...) is answered 404
 * `not-found` before any handler runs, as the Express and Fastify adapters do (`WEB_METHODS` of
 * `attach-storage/node`, which this runtime-neutral adapter does not import).
 */
const WEB_METHODS: ReadonlySet<string> = new Set(['GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'])

/**
 * Mounts attach-storage on a Hono app: the JSON group under `api-prefix` and the binary group under
 * `assets-prefix`. Returns the Web-standard handler it mounted.
 *
 * @example
 * const storage = await createAttachStorage({ config, jwt: { secret } })
 * const app = new Hono()
 * mountAttachStorage(app, storage)
 */
export function mountAttachStorage(app: Hono<any, any, any>, storage: AttachStorage): AttachHandler {
  const handler = createAttachHandler(storage)
  const { apiPrefix, assetsPrefix } = storage.config
  const release = releaseUnreadBodies()
  const serve = (fetch: (request: Request) => Promise<Response>) => async (c: HonoContext) => {
    const response = WEB_METHODS.has(c.req.method)
      ? await fetch(withNodeBody(c))
      : new AttachStorageError('not-found', 'No such route', { status: 404 }).toResponse()
    await release(c as never, noop)
    return response
  }
  const assets = serve(handler.assets)
  const fast = fastViewsOn(storage)
  app.all(apiPrefix, serve(handler.api))
  app.all(`${apiPrefix}/*`, serve(handler.api))
  app.all(assetsPrefix, assets)
  app.all(`${assetsPrefix}/*`, async (c: HonoContext) => (await fast(c)) ?? assets(c))
  return handler
}

const noop = async () => {}

/**
 * A Hono middleware for apps served by @hono/node-server: once the route answered, a request body it
 * did not read (a 401, 403 or 413 decided before the body was read) is read and discarded, within
 * bounds, while the answer goes out (`releaseRequestBody` of `attach-storage/node`), so a client still
 * sending it reads the status instead of a reset; the connection is kept for the next request, or closed
 * once the body ended when the answer closes it. @hono/node-server alone discards for 500 ms, then
 * closes. {@link mountAttachStorage} applies it to its own routes; `app.use('*', releaseUnreadBodies())`
 * applies it to the host's routes too. Elsewhere (Bun, Deno, workers) it does nothing.
 */
export function releaseUnreadBodies(): MiddlewareHandler {
  let release: ((req: IncomingMessage, res: ServerResponse) => unknown) | undefined
  return async (c, next) => {
    await next()
    const { incoming, outgoing } = ((c as unknown as HonoContext).env ?? {}) as HonoContext['env'] & {}
    if (!incoming || !outgoing || typeof incoming.listenerCount !== 'function' || incoming.complete) return
    release ??= (await import('attach-storage/node')).releaseRequestBody
    release(incoming, outgoing)
  }
}

/** What the adapter uses of Hono's context: the request, the answer so far, and Node's objects under @hono/node-server. */
interface HonoContext {
  req: { method: string; raw: Request }
  res: Response
  env?: { incoming?: IncomingMessage; outgoing?: ServerResponse }
}

/** The key under which a Request made from a Node request offers its body as the Node stream (`NODE_REQUEST_BODY` of `attach-storage/node`). */
const NODE_REQUEST_BODY = Symbol.for('attach-storage.node-request-body')

/**
 * Under @hono/node-server, the request is offered to the handlers with its body as Node's own stream as
 * well (`NODE_REQUEST_BODY` of `attach-storage/node`), taken only while nothing read the body (no
 * middleware, no Web body): an upload then crosses no Web stream. Elsewhere the request is unchanged.
 */
function withNodeBody(c: HonoContext): Request {
  const request = c.req.raw
  const incoming = c.env?.incoming
  if (!incoming || typeof incoming.listenerCount !== 'function' || c.req.method === 'GET' || c.req.method === 'HEAD') return request
  let taken = false
  const take = () => {
    if (taken || incoming.readableDidRead || incoming.readableEnded || incoming.destroyed || incoming.listenerCount('data') > 0)
      return undefined
    taken = true
    return incoming
  }
  Object.defineProperty(request, NODE_REQUEST_BODY, { value: { take }, configurable: true })
  return request
}

/**
 * Under @hono/node-server (`c.env.incoming` and `c.env.outgoing` are Node's request and response), a
 * view by id takes the fast path of `attach-storage/node`: the same answer written on Node's response
 * itself, then Hono is told it was sent (`x-hono-already-sent`). Headers a middleware put on the answer
 * before (CORS) go out with it. Elsewhere (Bun, Deno, workers) nothing changes; the Node module is
 * loaded only once a Node request is seen.
 */
function fastViewsOn(storage: AttachStorage): (c: HonoContext) => Promise<Response | undefined> {
  let views: FastViews | undefined
  let loading: Promise<FastViews> | undefined
  return async (c) => {
    const incoming = c.env?.incoming
    const outgoing = c.env?.outgoing
    if (!incoming || !outgoing || typeof incoming.url !== 'string') return undefined
    if (!views) {
      loading ??= import('attach-storage/node').then((m) => m.createFastViews(storage))
      views = await loading
    }
    const match = views.match(incoming)
    if (!match) return undefined
    c.res.headers.forEach((value, name) => {
      outgoing.setHeader(name, value)
    })
    try {
      await views.serve(match, incoming, outgoing, () => c.req.raw)
    } catch {
      if (!outgoing.destroyed) outgoing.destroy()
    }
    return ALREADY_SENT
  }
}

/**
 * What @hono/node-server takes for "the answer was written on Node's response"; one for every view (Hono
 * copies an answer it is given into a new one, so this one is never changed).
 */
const ALREADY_SENT = new Response(null, { headers: { 'x-hono-already-sent': 'true' } })
