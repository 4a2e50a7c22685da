import { Readable } from 'node:stream'
import type { FastifyError, FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import { createAttachHandler, type AttachStorage, type FetchHandler, type Logger } from 'attach-storage'
import {
  WEB_METHODS,
  createFastViews,
  deferContinue,
  frameworkError,
  methodNotServed,
  releaseRequestBody,
  toWebRequest,
  type NodeBridgeOptions,
} from 'attach-storage/node'

/** Options of the {@link attachStorage} plugin. */
export interface AttachStoragePluginOptions extends NodeBridgeOptions {
  /** The service whose JSON and binary groups are mounted. */
  storage: AttachStorage
}

/**
 * Makes every body in this (encapsulated) scope reach the handler unread, as the raw stream: multipart
 * uploads stream straight to the store, JSON is read by the Web handler itself. Call it inside a
 * plugin (`app.register(async (scope) => { acceptRawBodies(scope); ... })`): the host's other routes
 * keep their own parsers.
 */
export function acceptRawBodies(scope: FastifyInstance): void {
  scope.removeAllContentTypeParsers()
  scope.addContentTypeParser('*', (_request, payload, done) => done(null, payload))
}

/** The Web `Request` of a Fastify request whose body was left unread by {@link acceptRawBodies}. */
export function webRequest(request: FastifyRequest, reply: FastifyReply, options: NodeBridgeOptions = {}): Request {
  const body = request.body as Readable | undefined
  return toWebRequest(request.raw, reply.raw, { ...options, body: typeof body?.pipe === 'function' ? body : undefined })
}

/**
 * A Fastify route handler serving a Web-standard handler. Fastify sends the Response through its own
 * reply (hooks and CORS headers apply), streaming the body with back-pressure and cancelling it when
 * the client goes away. A method outside `WEB_METHODS` of `attach-storage/node` (`TRACE`, which a Web
 * `Request` cannot carry) is answered 404 `not-found`; an answer sent before the request body was read
 * has the rest discarded, within bounds, so a client still sending it reads the answer
 * (`releaseRequestBody`).
 */
export function fromWebHandler(fetch: FetchHandler, options: NodeBridgeOptions = {}) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => {
    const fast = options.fast?.match(request.raw)
    if (fast) {
      // The fast path writes to the Node response itself: the headers set on the reply so far (CORS,
      // hooks) go onto it first, and Fastify is told the reply is taken.
      releaseRequestBody(request.raw, reply.raw)
      for (const [name, value] of Object.entries(reply.getHeaders())) if (value !== undefined) reply.raw.setHeader(name, value)
      reply.hijack()
      try {
        await options.fast!.serve(fast, request.raw, reply.raw, () => webRequest(request, reply, options))
      } catch {
        if (!reply.raw.destroyed) reply.raw.destroy()
      }
      return reply
    }
    const response = WEB_METHODS.has(request.raw.method ?? 'GET') ? await fetch(webRequest(request, reply, options)) : methodNotServed()
    return sendResponse(reply, response)
  }
}

/**
 * Sends a Web `Response` through a Fastify reply, after letting go of a request body the answer did
 * not read (`releaseRequestBody`). A HEAD answer goes out as its status and headers with an empty Node
 * stream: the HEAD route Fastify adds to a GET route cannot measure a `Response` (it answered 500), and
 * the `Content-Length` of the Response is kept.
 */
export function sendResponse(reply: FastifyReply, response: Response): FastifyReply {
  releaseRequestBody(reply.request.raw, reply.raw)
  if (reply.request.raw.method !== 'HEAD') return reply.send(response)
  reply.code(response.status)
  for (const [name, value] of response.headers) reply.header(name, value)
  void response.body?.cancel().catch(() => undefined)
  return reply.send(Readable.from([]))
}

/**
 * An `onRequest` hook answering a method outside `WEB_METHODS` of `attach-storage/node` with 404
 * `not-found` before Fastify looks at the body (Fastify refuses a `QUERY` without a content type with
 * a 400 of its own before any handler runs). The plugin adds it in its scope; a host adds it on its app
 * for its other routes and its 404 (`app.addHook('onRequest', refuseOtherMethods)`).
 */
export function refuseOtherMethods(request: FastifyRequest, reply: FastifyReply, done: () => void): void {
  if (WEB_METHODS.has(request.raw.method ?? 'GET')) done()
  else sendResponse(reply, methodNotServed())
}

/** The answer of {@link attachErrorHandler}: a Fastify refusal as JSON `{code, message}`. */
export function errorResponse(err: unknown, logger: Pick<Logger, 'error'> = console): Response {
  const error = frameworkError(err)
  if (error.status >= 500) logger.error('fastify:', err)
  return error.toResponse()
}

/**
 * A Fastify error handler answering Fastify's own refusals like every other refusal, JSON
 * `{code, message}` with a stable kebab-case code: an unsupported content type (415
 * `unsupported-media-type`), a body over `bodyLimit` (413 `too-large`), malformed JSON (400
 * `bad-request`), any other 4xx with its code; anything else is a 500 `internal-error`, logged. The
 * {@link attachStorage} plugin sets it in its own scope; a host sets it on its app
 * (`app.setErrorHandler(attachErrorHandler())`), and can pass it as `frameworkErrors` too.
 */
export function attachErrorHandler(logger: Pick<Logger, 'error'> = console) {
  return (err: FastifyError, _request: FastifyRequest, reply: FastifyReply): FastifyReply => sendResponse(reply, errorResponse(err, logger))
}

/**
 * A Fastify not-found handler answering 404 `not-found` JSON `{code, message}` (the plugin cannot set
 * it for the host: Fastify allows one per prefix, and the plugin has none). Methods Fastify does not
 * route at all (`SEARCH`, WebDAV's) reach it too. `app.setNotFoundHandler(notFoundHandler)`.
 */
export function notFoundHandler(_request: FastifyRequest, reply: FastifyReply): FastifyReply {
  return sendResponse(reply, methodNotServed())
}

/**
 * Mounts attach-storage on a Fastify app: the JSON group under `api-prefix` and the binary group under
 * `assets-prefix`, every method. Its routes read their bodies as streams through a pass-through
 * content-type parser registered in the plugin's own scope only, and its own error handler answers
 * Fastify's refusals there as JSON `{code, message}`. Register it without a `prefix` option: the
 * prefixes come from the configuration, and the URLs the handlers answer are built on them. It gives the
 * app's server to `deferContinue` of `attach-storage/node`: `Expect: 100-continue` is answered 100 only
 * once a route reads the body, after authentication.
 *
 * @example
 * const app = Fastify()
 * await app.register(attachStorage, { storage })
 */
export const attachStorage: FastifyPluginAsync<AttachStoragePluginOptions> = async (scope, { storage, ...options }) => {
  const handler = createAttachHandler(storage)
  // `Expect: 100-continue` is answered 100 only once a body is read: after the handlers authenticated.
  deferContinue(scope.server)
  acceptRawBodies(scope)
  scope.setErrorHandler(attachErrorHandler(storage.logger))
  scope.addHook('onRequest', refuseOtherMethods)
  for (const [prefix, fetch] of [
    [storage.config.apiPrefix, handler.api],
    [storage.config.assetsPrefix, handler.assets],
  ] as const) {
    // Views by id, the commonest request, take the fast path: the same answers without Web objects.
    const serve = fromWebHandler(fetch, fetch === handler.assets ? { fast: createFastViews(storage), ...options } : options)
    scope.all(prefix, serve)
    scope.all(`${prefix}/*`, serve)
  }
}

export default attachStorage
