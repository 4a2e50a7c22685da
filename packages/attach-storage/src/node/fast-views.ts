/**
 * The Node fast path of the commonest request: a view or download by id on the binary group
 * (`GET|HEAD {assets-prefix}/attach/{view|download}/{id}`). It runs the same use case, access rule and
 * answer as the route table (`http/routes/serving.ts`, `http/serve.ts`), but on the Node request and
 * response themselves: no Web `Request` is made unless a secure-access function asks for one, and no
 * Web `Response`: the headers are written once and a small file in one piece. Any other request is left
 * to the handlers.
 */
import type { IncomingMessage, ServerResponse } from 'node:http'
import { writeStreamInto } from '../http/node-body.js'
import { answeredError, errorAnswer } from '../http/respond.js'
import { firstValues } from '../http/router.js'
import { CACHE_BOUND_HEADER, DecideQuerySchema, decideSignedView } from '../http/routes/auth-request.js'
import { previewOf, resizeOf, shownOf } from '../http/routes/serving.js'
import { ResizeQuerySchema } from '../http/routes/schemas.js'
import { type FileAnswer, fileAnswer, notModified, type ReadBuffers } from '../http/serve.js'
import { type AttachStorage, contextOf } from '../service/attach-storage.js'
import type { ServiceContext } from '../service/context.js'
import { resolveById } from '../service/serving.js'
import { signatureIn } from '../service/signing.js'
import type { AccessContext, Logger, ViewSignature } from '../service/types.js'
import { parseInput } from '../validation.js'
import { releaseRequestBody } from './early-answer.js'
import { ReadBufferPool } from './read-buffers.js'

/**
 * A request the fast path takes: the action, the id and the query of a view by id, or (`decide`) of
 * nginx's decision on a signed view (`GET {assets-prefix}/attach-decide/view/{id}`, docs/serving.md).
 */
export interface FastViewMatch {
  readonly action: 'view' | 'download' | 'decide'
  readonly id: number
  readonly query: string
}

/** The fast path of one service; the Node bridge and the adapters try it before the handlers. */
export interface FastViews {
  /** The view by id this request is, or undefined for any other request (the handlers answer it). */
  match(req: IncomingMessage, target?: string): FastViewMatch | undefined
  /**
   * Answers a matched request on `res`. `toRequest` makes the Web `Request` a secure-access function is
   * shown, only if one is asked. `headers` go out with the answer (the CORS headers of
   * `serveViewsFirst`); a `Vary` among them, or set on `res` before, is merged with the answer's own.
   */
  serve(
    match: FastViewMatch,
    req: IncomingMessage,
    res: ServerResponse,
    toRequest: () => Request,
    headers?: ReadonlyArray<readonly [string, string]>,
  ): Promise<void>
}

/**
 * Answers a request `views` matched, as each Node entry point does (the bridge, `serveViewsFirst`): a
 * request body nobody reads is released within bounds, then the fast path answers; a failure once the
 * status line went out cuts the connection. Never rejects.
 */
export async function answerMatched(
  views: FastViews,
  match: FastViewMatch,
  req: IncomingMessage,
  res: ServerResponse,
  toRequest: () => Request,
  headers?: ReadonlyArray<readonly [string, string]>,
): Promise<void> {
  releaseRequestBody(req, res)
  try {
    await views.serve(match, req, res, toRequest, headers)
  } catch {
    if (!res.destroyed) res.destroy()
  }
}

const escapeRegExp = (s: string) => s.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')

/** Creates the fast path of a service (see the module description). */
export function createFastViews(storage: AttachStorage): FastViews {
  // Small files are read into buffers kept from one view to the next (./read-buffers.ts).
  const buffers = new ReadBufferPool()
  const byId = new RegExp(`^${escapeRegExp(storage.config.assetsPrefix)}/attach(?:/(view|download)|-decide/view)/(\\d{1,15})$`)
  return {
    match(req, target = req.url ?? '/') {
      if ((req.method !== 'GET' && req.method !== 'HEAD') || !storage.config.enabled || !target.startsWith('/')) return undefined
      const q = target.indexOf('?')
      const m = byId.exec(q < 0 ? target : target.slice(0, q))
      // The decision route is GET alone (a HEAD of it is the handlers' 404).
      if (!m || (m[1] === undefined && req.method !== 'GET')) return undefined
      const action = (m[1] as 'view' | 'download' | undefined) ?? 'decide'
      return { action, id: Number(m[2]), query: q < 0 ? '' : target.slice(q + 1) }
    },
    async serve(match, req, res, toRequest, headers) {
      if (headers) for (const [name, value] of headers) res.setHeader(name, value)
      let ctx: ServiceContext
      try {
        ctx = contextOf(storage)
      } catch (err) {
        await writeAnswer(res, errorAnswer(answeredError(err, storage.logger)), storage.logger)
        return
      }
      if (ctx.tracer) {
        // Traced: the span is the route's own, as through the handlers.
        const route = routeOf(match)
        return ctx.tracer.startActiveSpan(`${req.method} assets ${route}`, async (span) => {
          try {
            await serveView(match, req, res, toRequest, ctx)
            span.setAttribute('http.route', route)
            span.setAttribute('http.response.status_code', res.statusCode)
          } finally {
            span.end()
          }
        })
      }
      return serveView(match, req, res, toRequest, ctx)
    },
  }

  async function serveView(match: FastViewMatch, req: IncomingMessage, res: ServerResponse, toRequest: () => Request, ctx: ServiceContext) {
    const started = ctx.observe.active ? performance.now() : 0
    let answer: FileAnswer
    try {
      if (match.action === 'decide') answer = await decision(match, req, ctx)
      else answer = await view(match, req, toRequest, ctx)
    } catch (err) {
      answer = errorAnswer(answeredError(err, storage.logger))
    }
    await writeAnswer(res, answer, storage.logger, buffers)
    if (ctx.observe.active) {
      const seconds = (performance.now() - started) / 1000
      ctx.observe.request({ group: 'assets', route: routeOf(match), method: req.method ?? 'GET', status: res.statusCode, seconds })
      const length = Number(res.getHeader('content-length'))
      if (res.statusCode < 300 && length > 0 && req.method !== 'HEAD') ctx.observe.bytes('out', length)
    }
  }

  /** nginx's decision on a signed view, as its route answers it (http/routes/auth-request.ts). */
  async function decision(match: FastViewMatch, req: IncomingMessage, ctx: ServiceContext): Promise<FileAnswer> {
    const params = new URLSearchParams(match.query)
    parseInput(DecideQuerySchema, firstValues(params), 'query')
    return { status: 200, headers: await decideSignedView(ctx, match.id, params, header(req, CACHE_BOUND_HEADER)) }
  }

  /** A view or download by id, as the route table answers it (http/routes/serving.ts). */
  async function view(match: FastViewMatch, req: IncomingMessage, toRequest: () => Request, ctx: ServiceContext): Promise<FileAnswer> {
    // The commonest view has no query: its parse is the same every time, made once.
    const params = match.query === '' ? NO_PARAMS : new URLSearchParams(match.query)
    const query = match.query === '' ? noQuery() : parseInput(ResizeQuerySchema, firstValues(params), 'query')
    const resize = resizeOf(query, header(req, 'accept'))
    const shown = match.action === 'view' ? shownOf(query, header(req, 'accept')) : undefined
    const access = new LazyRequestAccess(toRequest, signatureIn(params))
    const asked = { method: req.method ?? 'GET', header: (name: string) => header(req, name) }
    const lookOnly = req.method === 'HEAD'
    const preview = previewOf(query)
    const target = await resolveById(
      ctx,
      { id: match.id, resize, shown, preview, lookOnly, notModified: (t) => notModified(asked, t) },
      access,
    )
    return fileAnswer(asked, target, match.action as 'view' | 'download', buffers)
  }
}

/**
 * A view's access context, whose Web `Request` is made only when a secure-access function reads it. A
 * class, not an object literal with a getter: each literal's getter is a closure of its own, so V8 gives
 * every such object a hidden class of its own, made in the old generation. That class holds the
 * closure, and through it the request's objects, through every young-generation collection until the
 * next full one: under load, 1 MB promoted at each scavenge and pauses of 6-14 ms, the p99 tail.
 */
class LazyRequestAccess implements AccessContext {
  readonly user = null
  readonly #toRequest: () => Request
  #request: Request | undefined
  constructor(
    toRequest: () => Request,
    readonly signature: ViewSignature | undefined,
  ) {
    this.#toRequest = toRequest
  }
  get request(): Request {
    this.#request ??= this.#toRequest()
    return this.#request
  }
}

/** The parameters of a view without a query (never changed: only read). */
const NO_PARAMS = new URLSearchParams()
let parsedNoQuery: ReturnType<typeof parseInput<typeof ResizeQuerySchema>> | undefined
const noQuery = () => {
  parsedNoQuery ??= Object.freeze(parseInput(ResizeQuerySchema, {}, 'query'))
  return parsedNoQuery
}

/** The patterns of the routes taken here (`http/routes/serving.ts`, `auth-request.ts`), as they are reported. */
const VIEW_ROUTE = 'attach/:action/:id'
const DECIDE_ROUTE = 'attach-decide/view/:id'
const routeOf = (match: FastViewMatch) => (match.action === 'decide' ? DECIDE_ROUTE : VIEW_ROUTE)

/** A request header's value (the first of a repeated one), or null. */
function header(req: IncomingMessage, name: string): string | null {
  const v = req.headers[name]
  return v === undefined ? null : Array.isArray(v) ? (v[0] ?? null) : v
}

/**
 * The answer's headers as one flat list, its `Vary` merged with one already set on `res` (a CORS
 * middleware's `Origin`): writing the list replaces a header of the same name.
 */
function flatHeaders(res: ServerResponse, headers: Array<[string, string]>): string[] {
  const prior = res.getHeader('vary')
  const flat = headers.flat()
  if (prior === undefined) return flat
  const at = flat.findIndex((v, i) => i % 2 === 0 && v.toLowerCase() === 'vary')
  if (at < 0) return flat
  const names = new Map<string, string>()
  for (const name of `${Array.isArray(prior) ? prior.join(',') : prior},${flat[at + 1]}`.split(',')) {
    const t = name.trim()
    if (t && !names.has(t.toLowerCase())) names.set(t.toLowerCase(), t)
  }
  flat[at + 1] = [...names.values()].join(', ')
  return flat
}

/** Writes an answer: the headers once, then nothing, the bytes in one piece, or the store's stream. */
async function writeAnswer(res: ServerResponse, answer: FileAnswer, logger: Logger, buffers?: ReadBuffers): Promise<void> {
  const { lease } = answer
  if (lease) {
    // The read buffer goes back once the answer was handed to the socket whole ('finish'); an answer cut
    // short leaves it to the garbage collector, since the socket may still hold it.
    res.once('finish', () => buffers!.give(lease))
  }
  if (res.headersSent || res.destroyed) {
    if (!res.destroyed) res.destroy()
    return
  }
  const { body } = answer
  if (body !== undefined && !(body instanceof Uint8Array)) {
    // Opened before the status line goes out, so that a missing object is still a clean error.
    let stream: Awaited<ReturnType<typeof body.store.get>>
    try {
      stream = await body.store.get(body.key, body.range)
    } catch (err) {
      const e = errorAnswer(answeredError(err, logger))
      res.writeHead(e.status, flatHeaders(res, e.headers))
      res.end(e.body as Uint8Array)
      return
    }
    res.writeHead(answer.status, flatHeaders(res, answer.headers))
    try {
      await writeStreamInto(stream, res)
    } catch {
      // The client went away, or the source failed after the status line: cut the connection.
      if (!res.destroyed) res.destroy()
    }
    return
  }
  res.writeHead(answer.status, flatHeaders(res, answer.headers))
  res.end(body)
}
