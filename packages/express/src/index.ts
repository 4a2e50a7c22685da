import { Router, type ErrorRequestHandler, type RequestHandler } from 'express'
import { createAttachHandler, type AttachStorage, type FetchHandler, type Logger } from 'attach-storage'
import { createFastViews, frameworkError, handleNodeRequest, writeWebResponse, type NodeBridgeOptions } from 'attach-storage/node'

/** Options of {@link attachStorageRouter}: how the request URL is built (see `attach-storage/node`). */
export type AttachStorageRouterOptions = NodeBridgeOptions

/**
 * An Express request handler serving a Web-standard handler. The request keeps its full URL
 * (`req.originalUrl`), whatever path it was mounted under. A method outside `WEB_METHODS` of
 * `attach-storage/node` (`TRACE`, WebDAV's) is answered 404 `not-found`; an answer sent before the
 * request body was read has the rest discarded, within bounds, so a client still sending it reads the
 * answer (`releaseRequestBody`). For `Expect: 100-continue` after authentication, give the server to
 * `deferContinue` of `attach-storage/node`.
 */
export function fromWebHandler(fetch: FetchHandler, options: NodeBridgeOptions = {}): RequestHandler {
  return (req, res) => handleNodeRequest(fetch, req, res, { ...options, url: req.originalUrl })
}

/**
 * An Express error handler answering Express's own failures like every other refusal, JSON
 * `{code, message}`: a body parser's refusal (`express.json()` on malformed JSON: 400 `bad-request`;
 * over its `limit`: 413 `too-large`; an unsupported charset: 415 `unsupported-media-type`), a path that
 * is not valid percent-encoding (400), any other 4xx with its kebab-case code. Anything else is a 500
 * `internal-error`, logged. Mount it last (`app.use(attachErrorHandler())`).
 */
export function attachErrorHandler(logger: Pick<Logger, 'error'> = console): ErrorRequestHandler {
  return (err, _req, res, _next) => {
    const error = frameworkError(err)
    if (error.status >= 500) logger.error('express:', err)
    void writeWebResponse(res, error.toResponse())
  }
}

/**
 * An Express Router serving attach-storage: the JSON group under `api-prefix` and the binary group
 * under `assets-prefix`. Mount it at the application's root (`app.use(router)`): the prefixes are
 * absolute, and so are the URLs the handlers answer. Body parsers mounted before it (`express.json()`,
 * `express.urlencoded()`) do not break it: uploads are never read by them, and a JSON body they did
 * read is passed on from `req.body`. A body they refused (malformed JSON, over their limit) reaches
 * Express's error handlers, never a Router: {@link mountAttachStorage} adds {@link attachErrorHandler}
 * under the prefixes; a host mounting the router itself adds it too.
 *
 * @example
 * const app = express()
 * app.use(express.json())
 * app.use(attachStorageRouter(storage))
 */
export function attachStorageRouter(storage: AttachStorage, options: AttachStorageRouterOptions = {}): Router {
  const handler = createAttachHandler(storage)
  const { apiPrefix, assetsPrefix } = storage.config
  const router = Router()
  // `use` matches the prefix and everything below it, for every method; Express strips the prefix
  // from `req.url`, which is why fromWebHandler rebuilds the URL from `req.originalUrl`.
  router.use(apiPrefix, fromWebHandler(handler.api, options))
  // Views by id, the commonest request, take the fast path: the same answers without Web objects.
  router.use(assetsPrefix, fromWebHandler(handler.assets, { fast: createFastViews(storage), ...options }))
  return router
}

/**
 * Mounts attach-storage on an Express app (or router) at its root, with {@link attachErrorHandler}
 * under its two prefixes (a host body parser's refusal there answers JSON). Returns the mounted Router.
 *
 * @example
 * const storage = await createAttachStorage({ config, jwt: { secret } })
 * const app = express()
 * mountAttachStorage(app, storage)
 */
export function mountAttachStorage(app: { use: Router['use'] }, storage: AttachStorage, options: AttachStorageRouterOptions = {}): Router {
  const router = attachStorageRouter(storage, options)
  app.use(router)
  // The groups own their prefixes: a failure raised before them there (a host's body parser refusing
  // malformed JSON) answers JSON too. Express hands errors only to error handlers, never to a Router.
  const onError = attachErrorHandler(storage.logger)
  app.use(storage.config.apiPrefix, onError)
  app.use(storage.config.assetsPrefix, onError)
  return router
}
