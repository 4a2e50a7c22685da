import { Hono } from 'hono'
import { cors } from 'hono/cors'
import { mountAttachStorage, releaseUnreadBodies } from '@attach-storage/hono'
import { createReference, type Reference, type ServerEnv } from '@attach-storage/example-reference'
import type { Logger } from 'attach-storage'

export interface ReferenceApp extends Reference {
  app: Hono
}

/** The reference server of the contract on Hono: CORS, the two attach groups, and `/board`. */
export async function createReferenceApp(env: ServerEnv = process.env, logger: Logger = console): Promise<ReferenceApp> {
  const ref = await createReference(env, logger)
  const app = new Hono()
  // A body a route did not read (a 401 or 413 sent first) is discarded within bounds while the answer
  // goes out, so a client still sending it reads the answer; @hono/node-server alone closes after 500 ms.
  app.use('*', releaseUnreadBodies())
  if (ref.cors) {
    const c = ref.cors
    app.use(
      '*',
      cors({
        origin: c.origins,
        allowHeaders: c.allowHeaders,
        allowMethods: c.allowMethods,
        exposeHeaders: c.exposeHeaders,
        maxAge: c.maxAge,
      }),
    )
  }
  const api = ref.storage.config.apiPrefix
  app.get(`${api}/openapi.json`, (c) => ref.openapi(c.req.raw))
  app.get(`${api}/docs`, (c) => ref.docs(c.req.raw))
  app.get(`${api}/docs/*`, (c) => ref.docs(c.req.raw))
  mountAttachStorage(app, ref.storage)
  app.post('/board', (c) => ref.createBoard(c.req.raw))
  app.get('/board', (c) => ref.listBoard(c.req.raw))
  app.get('/board/:id', (c) => ref.getBoard(c.req.raw, c.req.param('id')))
  app.get('/healthz', () => ref.health.healthz())
  app.get('/readyz', () => ref.health.readyz())
  app.get('/metrics', () => ref.metrics())
  app.put('/board/:id', (c) => ref.updateBoard(c.req.raw, c.req.param('id')))
  app.delete('/board/:id', (c) => ref.deleteBoard(c.req.raw, c.req.param('id')))
  app.on('GET', ['/', '/page/*'], (c) => ref.page(c.req.raw))
  app.notFound(() => ref.notFound())
  return { ...ref, app }
}
