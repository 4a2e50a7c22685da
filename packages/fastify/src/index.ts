import type { Readable } from 'node:stream'
import type { FastifyInstance, FastifyPluginAsync, FastifyReply, FastifyRequest } from 'fastify'
import { createAttachHandler, type AttachStorage, type FetchHandler } from 'attach-storage'
import { toWebRequest, type NodeBridgeOptions } from 'attach-storage/node'

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
 * the client goes away.
 */
export function fromWebHandler(fetch: FetchHandler, options: NodeBridgeOptions = {}) {
  return async (request: FastifyRequest, reply: FastifyReply): Promise<FastifyReply> => reply.send(await fetch(webRequest(request, reply, options)))
}

/**
 * Mounts attach-storage on a Fastify app: the JSON group under `api-prefix` and the binary group under
 * `assets-prefix`, every method. Its routes read their bodies as streams through a pass-through
 * content-type parser registered in the plugin's own scope only. Register it without a `prefix`
 * option: the prefixes come from the configuration, and the URLs the handlers answer are built on them.
 *
 * @example
 * const app = Fastify()
 * await app.register(attachStorage, { storage })
 */
export const attachStorage: FastifyPluginAsync<AttachStoragePluginOptions> = async (scope, { storage, ...options }) => {
  const handler = createAttachHandler(storage)
  acceptRawBodies(scope)
  for (const [prefix, fetch] of [
    [storage.config.apiPrefix, handler.api],
    [storage.config.assetsPrefix, handler.assets],
  ] as const) {
    const serve = fromWebHandler(fetch, options)
    scope.all(prefix, serve)
    scope.all(`${prefix}/*`, serve)
  }
}

export default attachStorage
