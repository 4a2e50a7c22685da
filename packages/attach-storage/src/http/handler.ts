/** The Web-standard handlers of a service: the two route groups, each a route table (routes/*.ts). */
import { notFound, unauthorized } from '../errors.js'
import { type AttachStorage, contextOf } from '../service/attach-storage.js'
import { signatureIn } from '../service/signing.js'
import type { AccessContext, AuthUser } from '../service/types.js'
import { matchedRoute, observed } from './observe.js'
import { errorResponse } from './respond.js'
import { withOpenApi } from './openapi.js'
import { noRoute, type Route, Router, segmentsBelow } from './router.js'
import { authRequestRoutes } from './routes/auth-request.js'
import { editorImageRoutes, editorUploadRoutes } from './routes/editor.js'
import { presignRoutes } from './routes/presign.js'
import { recordRoutes } from './routes/records.js'
import { servingRoutes } from './routes/serving.js'
import { tusRoutes } from './routes/tus.js'
import { uploadRoutes } from './routes/uploads.js'
import { zipRoutes } from './routes/zip.js'

/** The answers' helpers, for hosts' own routes beside the handlers. */
export { errorResponse, json, readJson } from './respond.js'

/** A Web-standard handler: `(request) => Promise<Response>`. */
export type FetchHandler = (request: Request) => Promise<Response>

/** The handlers of both route groups. */
export interface AttachHandler {
  /** Serves the JSON group (`api-prefix`). */
  api: FetchHandler
  /** Serves the binary group (`assets-prefix`). */
  assets: FetchHandler
  /** Serves both groups, dispatching on the prefix; other paths answer 404. */
  fetch: FetchHandler
  /** True when the path lies under one of the two prefixes. */
  matches(pathname: string): boolean
}

/** The JSON group (`api-prefix`): every route needs an authenticated user. */
export const API_ROUTES: Route[] = [...uploadRoutes, ...presignRoutes, ...tusRoutes, ...editorUploadRoutes, ...recordRoutes]

/** The binary group (`assets-prefix`): protected per category by the secure-access functions; HEAD is served as GET. */
export const ASSET_ROUTES: Route[] = [...zipRoutes, ...editorImageRoutes, ...authRequestRoutes, ...servingRoutes]

/**
 * Builds the Web-standard handlers of a service. Mount `api` under `api-prefix` and `assets` under
 * `assets-prefix` (the adapters do), or route everything through `fetch`.
 */
export function createAttachHandler(storage: AttachStorage): AttachHandler {
  const { apiPrefix, assetsPrefix } = storage.config
  const apiRouter = new Router(API_ROUTES)
  const assetRouter = new Router(ASSET_ROUTES)

  async function authenticate(request: Request): Promise<AuthUser> {
    if (!storage.authenticate) throw unauthorized('No authenticator is configured for the JSON group')
    let user: AuthUser | null = null
    try {
      user = await storage.authenticate(request)
    } catch {
      user = null
    }
    if (!user) throw unauthorized('A valid Bearer token is required')
    return user
  }

  /** One group: the path below its prefix, who is asking, then the route. */
  function group(
    prefix: string,
    router: Router,
    who: (request: Request, url: URL) => Promise<AccessContext>,
    headAsGet: boolean,
  ): FetchHandler {
    return async (request) => {
      try {
        if (!storage.config.enabled) throw notFound('Attachment storage is disabled')
        const url = new URL(request.url)
        const segments = segmentsBelow(url.pathname, prefix)
        if (!segments) throw noRoute()
        const access = await who(request, url)
        const found = router.match(request.method, segments, headAsGet)
        if (!found) throw noRoute()
        matchedRoute.set(request, found.route.path)
        return await router.run(found, url, { storage, ctx: contextOf(storage), request, url, access })
      } catch (err) {
        return errorResponse(err, storage.logger)
      }
    }
  }

  const api = observed(
    storage,
    'api',
    withOpenApi(
      storage.config,
      group(apiPrefix, apiRouter, async (request) => ({ user: await authenticate(request), request }), false),
    ),
  )
  const assets = observed(
    storage,
    'assets',
    group(assetsPrefix, assetRouter, async (request, url) => ({ user: null, request, signature: signatureIn(url.searchParams) }), true),
  )
  const under = (pathname: string, prefix: string) => pathname === prefix || pathname.startsWith(`${prefix}/`)

  return {
    api,
    assets,
    matches: (pathname) => under(pathname, apiPrefix) || under(pathname, assetsPrefix),
    async fetch(request) {
      const { pathname } = new URL(request.url)
      if (under(pathname, apiPrefix)) return api(request)
      if (under(pathname, assetsPrefix)) return assets(request)
      return errorResponse(notFound('No such route'), storage.logger)
    },
  }
}
