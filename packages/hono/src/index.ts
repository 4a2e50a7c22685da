import type { Hono } from 'hono'
import { createAttachHandler, type AttachHandler, type AttachStorage } from 'attach-storage'

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
  app.all(apiPrefix, (c) => handler.api(c.req.raw))
  app.all(`${apiPrefix}/*`, (c) => handler.api(c.req.raw))
  app.all(assetsPrefix, (c) => handler.assets(c.req.raw))
  app.all(`${assetsPrefix}/*`, (c) => handler.assets(c.req.raw))
  return handler
}
