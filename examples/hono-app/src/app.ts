import { Hono } from 'hono'
import { cors } from 'hono/cors'
import { mountAttachStorage } from '@attach-storage/hono'
import { createReference, type Reference, type ServerEnv } from '@attach-storage/example-reference'
import type { Logger } from 'attach-storage'

export interface ReferenceApp extends Reference {
  app: Hono
}

/** The reference server of the contract on Hono: CORS, the two attach groups, and `/board`. */
export async function createReferenceApp(env: ServerEnv = process.env, logger: Logger = console): Promise<ReferenceApp> {
  const ref = await createReference(env, logger)
  const app = new Hono()
  if (ref.cors) {
    const c = ref.cors
    app.use('*', cors({ origin: c.origins, allowHeaders: c.allowHeaders, allowMethods: c.allowMethods, exposeHeaders: c.exposeHeaders, maxAge: c.maxAge }))
  }
  mountAttachStorage(app, ref.storage)
  app.post('/board', (c) => ref.createBoard(c.req.raw))
  app.get('/board', (c) => ref.listBoard(c.req.raw))
  app.get('/board/:id', (c) => ref.getBoard(c.req.raw, c.req.param('id')))
  app.notFound(() => ref.notFound())
  return { ...ref, app }
}
