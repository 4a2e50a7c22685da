import { Router, type RequestHandler } from 'express'
import { createAttachHandler, type AttachStorage, type FetchHandler } from 'attach-storage'
import { handleNodeRequest, type NodeBridgeOptions } from 'attach-storage/node'

/** Options of {@link attachStorageRouter}: how the request URL is built (see `attach-storage/node`). */
export type AttachStorageRouterOptions = NodeBridgeOptions

/**
 * An Express request handler serving a Web-standard handler. The request keeps its full URL
 * (`req.originalUrl`), whatever path it was mounted under.
 */
export function fromWebHandler(fetch: FetchHandler, options: NodeBridgeOptions = {}): RequestHandler {
  return (req, res) => handleNodeRequest(fetch, req, res, { ...options, url: req.originalUrl })
}

/**
 * An Express Router serving attach-storage: the JSON group under `api-prefix` and the binary group
 * under `assets-prefix`. Mount it at the application's root (`app.use(router)`): the prefixes are
 * absolute, and so are the URLs the handlers answer. Body parsers mounted before it (`express.json()`,
 * `express.urlencoded()`) do not break it: uploads are never read by them, and a JSON body they did
 * read is passed on from `req.body`.
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
  router.use(assetsPrefix, fromWebHandler(handler.assets, options))
  return router
}

/**
 * Mounts attach-storage on an Express app (or router) at its root. Returns the mounted Router.
 *
 * @example
 * const storage = await createAttachStorage({ config, jwt: { secret } })
 * const app = express()
 * mountAttachStorage(app, storage)
 */
export function mountAttachStorage(app: { use: Router['use'] }, storage: AttachStorage, options: AttachStorageRouterOptions = {}): Router {
  const router = attachStorageRouter(storage, options)
  app.use(router)
  return router
}
