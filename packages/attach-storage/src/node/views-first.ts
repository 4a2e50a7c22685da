/**
 * Views by id answered at the `node:http` level, before the framework sees the request: the server's
 * `request` listeners (Hono's @hono/node-server listener, an Express app, Fastify's router) are moved
 * behind one listener that answers `GET|HEAD {assets-prefix}/attach/{view|download}/{id}` itself, with
 * the fast path of views by id (`fast-views.ts`: the same use case, access rule and answer as the route
 * table), and hands every other request to them unchanged. The framework's own middleware therefore
 * does not run for these views; the one header group a browser needs from it, CORS, is written here
 * from the same settings (`cors`), or, when none are given, a request carrying `Origin` is left to the
 * framework, whose CORS middleware answers it as before.
 */
import type { IncomingMessage, Server, ServerResponse } from 'node:http'
import type { Server as HttpsServer } from 'node:https'
import type { AttachStorage } from '../service/attach-storage.js'
import { answerMatched, createFastViews } from './fast-views.js'
import { type NodeBridgeOptions, toWebRequest } from './index.js'

/**
 * The CORS settings of the host's framework middleware, as they apply to a simple `GET`/`HEAD` (a
 * preflight `OPTIONS` is never taken here: the framework answers it).
 */
export interface ViewsCors {
  /** The origins a browser script may read views from, or `'*'` for any. */
  origins: readonly string[] | '*'
  /** The answer headers a script may read (`Access-Control-Expose-Headers`). */
  exposeHeaders?: readonly string[]
  /**
   * `Access-Control-Allow-Credentials: true`. With `origins: '*'` the request's origin is then echoed,
   * since browsers refuse `*` with credentials.
   * @default false
   */
  credentials?: boolean
}

/** Options of {@link serveViewsFirst}. */
export interface ViewsFirstOptions extends Pick<NodeBridgeOptions, 'trustProxy' | 'baseUrl'> {
  /**
   * The CORS headers the framework adds to these answers, given as its settings. `false`: the app sends
   * no CORS headers, and views with an `Origin` header are answered here too. Not given: a view whose
   * request carries `Origin` is left to the framework (its CORS middleware then answers as before), so
   * only cross-origin script reads lose the fast path.
   */
  cors?: ViewsCors | false
}

/** A server whose `request` event a framework listens to: `node:http` or `node:https`. */
export type ListeningServer = Server | HttpsServer

/**
 * Answers the server's views by id before its framework does (see the module description). Call it once
 * the framework has put its listener on the server: after `serve()` of @hono/node-server, after
 * `http.createServer(app)` or `app.listen()` for Express, after `Fastify()` (its `server`). Returns a
 * function that puts the framework's listeners back as they were.
 *
 * @example
 * const server = serve({ fetch: app.fetch, port: 3000 })
 * serveViewsFirst(server as Server, storage, { cors: { origins: ['https://app.example.com'] } })
 */
export function serveViewsFirst(server: ListeningServer, storage: AttachStorage, options: ViewsFirstOptions = {}): () => void {
  const framework = server.listeners('request') as Array<(req: IncomingMessage, res: ServerResponse) => void>
  if (framework.length === 0) {
    throw new TypeError('serveViewsFirst: the server has no request listener yet; call it after the framework made its server')
  }
  const views = createFastViews(storage)
  const { cors, ...bridge } = options
  const corsOf = cors ? corsWriter(cors) : undefined
  const handOn = (req: IncomingMessage, res: ServerResponse) => {
    for (const listener of framework) listener.call(server, req, res)
  }
  const front = (req: IncomingMessage, res: ServerResponse) => {
    const origin = req.headers.origin
    const match = cors === undefined && origin !== undefined ? undefined : views.match(req)
    if (!match) return handOn(req, res)
    void answerMatched(views, match, req, res, () => toWebRequest(req, res, bridge), corsOf?.(origin))
  }
  server.removeAllListeners('request')
  server.on('request', front)
  return () => {
    server.off('request', front)
    for (const listener of framework) server.on('request', listener)
  }
}

/**
 * The CORS headers of a simple request from `origin` under `cors`, as the common middleware write them
 * (hono/cors, cors, @fastify/cors): the allowed origin (echoed, or `*`), `Vary: Origin` whenever the
 * answer depends on it, and the exposed headers.
 */
export function corsWriter(cors: ViewsCors): (origin: string | undefined) => Array<[string, string]> {
  const any = cors.origins === '*'
  const allowed = new Set(any ? [] : cors.origins)
  const expose = cors.exposeHeaders?.length ? cors.exposeHeaders.join(',') : undefined
  const echo = !any || cors.credentials === true
  return (origin) => {
    const headers: Array<[string, string]> = []
    if (any && !cors.credentials) headers.push(['access-control-allow-origin', '*'])
    else if (origin !== undefined && (any || allowed.has(origin))) {
      headers.push(['access-control-allow-origin', origin])
      if (cors.credentials) headers.push(['access-control-allow-credentials', 'true'])
    }
    if (echo) headers.push(['vary', 'Origin'])
    if (expose) headers.push(['access-control-expose-headers', expose])
    return headers
  }
}
