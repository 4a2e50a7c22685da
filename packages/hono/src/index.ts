import type { Hono } from 'hono'
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
  const serve = (fetch: (request: Request) => Promise<Response>) => (c: { req: { method: string; raw: Request } }) =>
    WEB_METHODS.has(c.req.method) ? fetch(c.req.raw) : new AttachStorageError('not-found', 'No such route', { status: 404 }).toResponse()
  app.all(apiPrefix, serve(handler.api))
  app.all(`${apiPrefix}/*`, serve(handler.api))
  app.all(assetsPrefix, serve(handler.assets))
  app.all(`${assetsPrefix}/*`, serve(handler.assets))
  return handler
}
