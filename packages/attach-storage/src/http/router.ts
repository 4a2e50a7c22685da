/**
 * The route table's machinery: a route is a method, a path pattern and valibot schemas for its path,
 * query and body; the router finds the route, parses what it declares at the edge and hands the use
 * case typed input and the caller's access context. Each group's routes live in `routes/*.ts`.
 */
import * as v from 'valibot'
import { badRequest, notFound } from '../errors.js'
import type { AttachStorage } from '../service/attach-storage.js'
import type { ServiceContext } from '../service/context.js'
import type { AccessContext } from '../service/types.js'
import { parseInput } from '../validation.js'
import type { RouteDoc } from './openapi.js'
import { readJson } from './respond.js'

/** What a route's handler gets besides its parsed input. */
export interface RouteEnv {
  readonly storage: AttachStorage
  /** The use cases' context. */
  readonly ctx: ServiceContext
  /** The request, for the multipart reader, conditional headers and the abort signal; never handed to a use case. */
  readonly request: Request
  /** The request's URL, parsed once. */
  readonly url: URL
  /** Who is asking. */
  readonly access: AccessContext
}

/** The parsed input of a route: path parameters, query and JSON body, each as its schema outputs. */
export interface RouteInput<P, Q, B> {
  params: P
  query: Q
  body: B
}

type Out<S> = S extends v.GenericSchema ? v.InferOutput<S> : undefined

/** One route of a group. */
export interface Route<
  P extends v.GenericSchema | undefined = any,
  Q extends v.GenericSchema | undefined = any,
  B extends v.GenericSchema | undefined = any,
> {
  readonly method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'HEAD' | 'DELETE' | 'OPTIONS'
  /**
   * The path below the group's prefix, segment by segment: a literal, `:name` (one segment), `:name?`
   * (one optional last segment) or `*name` (the remaining segments, as an array).
   */
  readonly path: string
  /** The path parameters. A path that fails it is not this route's (the next route is tried, else 404). */
  readonly params?: P
  /** The query (first value of each name). A query that fails it is a 400. */
  readonly query?: Q
  /** The JSON body (read with a 2 MiB bound). A body that fails it is a 400. */
  readonly body?: B
  /** What the OpenAPI document says of the route beyond its schemas (summary, answers, multipart body). */
  readonly doc?: RouteDoc
  readonly handle: (input: RouteInput<Out<P>, Out<Q>, Out<B>>, env: RouteEnv) => Promise<Response>
}

/** Declares a route; the handler's input types follow from its schemas. */
export function defineRoute<
  P extends v.GenericSchema | undefined = undefined,
  Q extends v.GenericSchema | undefined = undefined,
  B extends v.GenericSchema | undefined = undefined,
>(route: Route<P, Q, B>): Route<P, Q, B> {
  return route
}

/** A compiled route table: finds the route of a method and path. */
export class Router {
  readonly #routes: Array<{ route: Route; pattern: string[] }>

  constructor(routes: Route[]) {
    this.#routes = routes.map((route) => ({ route, pattern: route.path === '' ? [] : route.path.split('/') }))
  }

  /**
   * The route of `method` and the decoded path segments below the prefix, with its parsed path
   * parameters; undefined when none matches (a 404). HEAD is served by the GET routes when `headAsGet`.
   */
  match(method: string, segments: string[], headAsGet: boolean): { route: Route; params: unknown } | undefined {
    const m = headAsGet && method === 'HEAD' ? 'GET' : method
    for (const { route, pattern } of this.#routes) {
      if (route.method !== m) continue
      const raw = bind(pattern, segments)
      if (!raw) continue
      if (!route.params) return { route, params: raw }
      const parsed = v.safeParse(route.params, raw)
      if (parsed.success) return { route, params: parsed.output }
    }
    return undefined
  }

  /** Parses the query and the body the route declares, then runs it. */
  async run(found: { route: Route; params: unknown }, url: URL, env: RouteEnv): Promise<Response> {
    const { route, params } = found
    const query = route.query ? parseInput(route.query, firstValues(url.searchParams), 'query') : undefined
    const body = route.body ? parseInput(route.body, await readJson(env.request), 'body') : undefined
    return route.handle({ params, query, body }, env)
  }
}

/** The segments' values by the pattern's names, or undefined when the path has another shape. */
function bind(pattern: string[], segments: string[]): Record<string, string | string[]> | undefined {
  const out: Record<string, string | string[]> = {}
  for (let i = 0; i < pattern.length; i++) {
    const p = pattern[i]!
    if (p.startsWith('*')) {
      out[p.slice(1)] = segments.slice(i)
      return out
    }
    const s = segments[i]
    if (p.startsWith(':')) {
      const optional = p.endsWith('?')
      const name = optional ? p.slice(1, -1) : p.slice(1)
      if (s === undefined) {
        if (optional && i === pattern.length - 1) return out
        return undefined
      }
      out[name] = s
    } else if (s !== p) {
      return undefined
    }
  }
  return segments.length === pattern.length ? out : undefined
}

/** The query as an object of each name's first value (what `URLSearchParams.get` answers). */
export function firstValues(params: URLSearchParams): Record<string, string> {
  const out: Record<string, string> = {}
  for (const [k, val] of params) if (!(k in out)) out[k] = val
  return out
}

/** The percent-decoded segments of `pathname` below `prefix`, or undefined when it is not under it (400 on bad escapes). */
export function segmentsBelow(pathname: string, prefix: string): string[] | undefined {
  if (pathname !== prefix && !pathname.startsWith(`${prefix}/`)) return undefined
  const parts = pathname.slice(prefix.length).split('/').slice(1)
  try {
    return parts.map((p) => decodeURIComponent(p))
  } catch {
    throw badRequest('The path is not valid percent-encoding')
  }
}

/** 404 `not-found` for a path no route serves. */
export const noRoute = () => notFound('No such route')
