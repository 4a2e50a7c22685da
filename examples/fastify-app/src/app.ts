import cors from '@fastify/cors'
import Fastify, { type FastifyInstance } from 'fastify'
import {
  acceptRawBodies,
  attachErrorHandler,
  attachStorage,
  errorResponse,
  fromWebHandler,
  notFoundHandler,
  refuseOtherMethods,
  sendResponse,
} from '@attach-storage/fastify'
import { createReference, type Reference, type ServerEnv } from '@attach-storage/example-reference'
import type { Logger } from 'attach-storage'
import { answerClientError } from 'attach-storage/node'

export interface ReferenceApp extends Reference {
  /** The Fastify app, not listening: `await app.listen({ port })`. */
  app: FastifyInstance
}

/**
 * The reference server of the contract on Fastify 5: CORS, the two attach groups, and `/board`, with the
 * same answers as the Hono app (examples/hono-app). Builds the app without listening.
 */
export async function createReferenceApp(env: ServerEnv = process.env, logger: Logger = console): Promise<ReferenceApp> {
  const ref = await createReference(env, logger)
  const app = Fastify({
    // Fastify's own refusals (a bad URL, a body parser's, its 404, a request Node's parser refused)
    // answer `{code, message}` JSON like the rest.
    frameworkErrors: (err, _request, reply) => void sendResponse(reply, errorResponse(err, logger)),
    clientErrorHandler: answerClientError,
    // Node's own limits, as the Hono and Express servers have them: a request whose body never finishes
    // arriving is cut after 5 minutes (Fastify's default is no limit), an idle connection after 5 s.
    requestTimeout: 300_000,
    keepAliveTimeout: 5_000,
  })
  try {
    app.setErrorHandler(attachErrorHandler(logger))
    // A method no route serves (TRACE, QUERY, WebDAV's) answers 404 on every route, like the other apps.
    app.addHook('onRequest', refuseOtherMethods)
    // No route of this app reads its body through Fastify's parsers (the board routes read their own),
    // so its 404 does not either: an unknown route answers 404 whatever its body, like the other apps.
    acceptRawBodies(app)
    if (ref.cors) {
      const c = ref.cors
      // strictPreflight off: an OPTIONS without the preflight headers gets the 204 the other apps
      // answer, not a text/plain 400.
      await app.register(cors, {
        origin: c.origins,
        allowedHeaders: c.allowHeaders,
        methods: c.allowMethods,
        exposedHeaders: c.exposeHeaders,
        maxAge: c.maxAge,
        strictPreflight: false,
      })
    }
    const api = ref.storage.config.apiPrefix
    app.get(`${api}/openapi.json`, fromWebHandler(ref.openapi))
    app.get(`${api}/docs`, fromWebHandler(ref.docs))
    app.get(`${api}/docs/:file`, fromWebHandler(ref.docs))
    await app.register(attachStorage, { storage: ref.storage })

    // The host entity `board`: Web handlers reading their own bodies, in a scope of raw bodies.
    await app.register(async (scope) => {
      acceptRawBodies(scope)
      scope.post('/board', fromWebHandler(ref.createBoard))
      scope.get('/board', fromWebHandler(ref.listBoard))
      scope.get<{ Params: { id: string } }>('/board/:id', (request, reply) =>
        fromWebHandler((r) => ref.getBoard(r, request.params.id))(request, reply),
      )
      scope.get(
        '/healthz',
        fromWebHandler(async () => ref.health.healthz()),
      )
      scope.get(
        '/readyz',
        fromWebHandler(() => ref.health.readyz()),
      )
      scope.get(
        '/metrics',
        fromWebHandler(() => ref.metrics()),
      )
      scope.put<{ Params: { id: string } }>('/board/:id', (request, reply) =>
        fromWebHandler((r) => ref.updateBoard(r, request.params.id))(request, reply),
      )
      scope.delete<{ Params: { id: string } }>('/board/:id', (request, reply) =>
        fromWebHandler((r) => ref.deleteBoard(r, request.params.id))(request, reply),
      )
      for (const url of ['/', '/page/*']) scope.get(url, fromWebHandler(ref.page))
    })
    app.setNotFoundHandler(notFoundHandler)
    await app.ready()
  } catch (err) {
    await app.close().catch(() => undefined)
    await ref.close()
    throw err
  }
  return { ...ref, app }
}
