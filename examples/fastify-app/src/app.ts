import cors from '@fastify/cors'
import Fastify, { type FastifyError, type FastifyInstance, type FastifyReply } from 'fastify'
import { acceptRawBodies, attachStorage, fromWebHandler } from '@attach-storage/fastify'
import { createReference, type Reference, type ServerEnv } from '@attach-storage/example-reference'
import { AttachStorageError, type Logger } from 'attach-storage'

export interface ReferenceApp extends Reference {
  /** The Fastify app, not listening: `await app.listen({ port })`. */
  app: FastifyInstance
}

/** Fastify's own failures (bad URL, …) answer `{code, message}` JSON like the rest. */
function errorResponse(err: FastifyError, logger: Logger): Response {
  const status = Number.isInteger(err.statusCode) && err.statusCode! >= 400 && err.statusCode! < 500 ? err.statusCode! : 500
  if (status === 500) {
    logger.error('fastify:', err)
    return new AttachStorageError('internal-error', 'An internal error occurred', { status }).toResponse()
  }
  const code = status === 404 ? 'not-found' : status === 413 ? 'too-large' : 'bad-request'
  // The same words as the attach handlers for a path that is not valid percent-encoding.
  const message = err.code === 'FST_ERR_BAD_URL' ? 'The path is not valid percent-encoding' : 'The request is not valid'
  return new AttachStorageError(code, message, { status }).toResponse()
}

/**
 * The reference server of the contract on Fastify 5: CORS, the two attach groups, and `/board`, with the
 * same answers as the Hono app (examples/hono-app). Builds the app without listening.
 */
export async function createReferenceApp(env: ServerEnv = process.env, logger: Logger = console): Promise<ReferenceApp> {
  const ref = await createReference(env, logger)
  const app = Fastify({ frameworkErrors: (err, _request, reply) => void (reply as FastifyReply).send(errorResponse(err, logger)) })
  try {
    app.setErrorHandler((err: FastifyError, _request, reply) => reply.send(errorResponse(err, logger)))
    if (ref.cors) {
      const c = ref.cors
      await app.register(cors, { origin: c.origins, allowedHeaders: c.allowHeaders, methods: c.allowMethods, exposedHeaders: c.exposeHeaders, maxAge: c.maxAge })
    }
    await app.register(attachStorage, { storage: ref.storage })

    // The host entity `board`: Web handlers reading their own bodies, in a scope of raw bodies.
    await app.register(async (scope) => {
      acceptRawBodies(scope)
      scope.post('/board', fromWebHandler(ref.createBoard))
      scope.get('/board', fromWebHandler(ref.listBoard))
      scope.get<{ Params: { id: string } }>('/board/:id', (request, reply) =>
        fromWebHandler((r) => ref.getBoard(r, request.params.id))(request, reply),
      )
    })
    app.setNotFoundHandler((_request, reply) => reply.send(ref.notFound()))
    await app.ready()
  } catch (err) {
    await app.close().catch(() => undefined)
    await ref.close()
    throw err
  }
  return { ...ref, app }
}
