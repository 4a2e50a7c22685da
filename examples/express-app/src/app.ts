import cors from 'cors'
import express, { type Express } from 'express'
import { attachErrorHandler, fromWebHandler, mountAttachStorage } from '@attach-storage/express'
import { createReference, type Reference, type ServerEnv } from '@attach-storage/example-reference'
import type { Logger } from 'attach-storage'

export interface ReferenceApp extends Reference {
  /** The Express app, not listening: `createServer(app).listen(port)`. */
  app: Express
}

/**
 * The reference server of the contract on Express 5: CORS, the two attach groups, and `/board`, with the
 * same answers as the Hono app (examples/hono-app). Builds the app without listening.
 */
export async function createReferenceApp(env: ServerEnv = process.env, logger: Logger = console): Promise<ReferenceApp> {
  const ref = await createReference(env, logger)
  const app = express()
  app.disable('x-powered-by')
  // Route like Hono does: `/board/1/` and `/BOARD/1` are not `/board/1`.
  app.set('strict routing', true)
  app.set('case sensitive routing', true)
  if (ref.cors) {
    const c = ref.cors
    app.use(
      cors({
        origin: c.origins,
        allowedHeaders: c.allowHeaders,
        methods: c.allowMethods,
        exposedHeaders: c.exposeHeaders,
        maxAge: c.maxAge,
      }),
    )
  }
  const api = ref.storage.config.apiPrefix
  app.get(`${api}/openapi.json`, fromWebHandler(ref.openapi))
  app.get(`${api}/docs`, fromWebHandler(ref.docs))
  app.get(`${api}/docs/:file`, fromWebHandler(ref.docs))
  mountAttachStorage(app, ref.storage)

  // The host entity `board`: its routes are Web handlers, so no body parser is needed for them.
  app.post('/board', fromWebHandler(ref.createBoard))
  app.get('/board', fromWebHandler(ref.listBoard))
  app.get('/board/:id', (req, res, next) => fromWebHandler((request) => ref.getBoard(request, req.params.id))(req, res, next))
  app.get(
    '/healthz',
    fromWebHandler(async () => ref.health.healthz()),
  )
  app.get(
    '/readyz',
    fromWebHandler(() => ref.health.readyz()),
  )
  app.get(
    '/metrics',
    fromWebHandler(() => ref.metrics()),
  )
  app.put('/board/:id', (req, res, next) => fromWebHandler((request) => ref.updateBoard(request, req.params.id))(req, res, next))
  app.delete('/board/:id', (req, res, next) => fromWebHandler((request) => ref.deleteBoard(request, req.params.id))(req, res, next))
  app.get(['/', '/page/*path'], fromWebHandler(ref.page))

  app.use(fromWebHandler(async () => ref.notFound()))
  // Express's own failures (a path parameter that is not valid percent-encoding, a body parser's
  // refusal) answer `{code, message}` JSON like the rest.
  app.use(attachErrorHandler(logger))
  return { ...ref, app }
}
