/**
 * Each answer of a route group reported to the service's observers (route, status, time, bytes out),
 * and run in an OpenTelemetry span when there is a tracer.
 */
import { type Span, SpanKind, SpanStatusCode } from '@opentelemetry/api'
import { type AttachStorage, contextOf } from '../service/attach-storage.js'
import type { ServiceContext } from '../service/context.js'

/** The route pattern each request was matched to (set by the group, read when its answer is reported). */
export const matchedRoute = new WeakMap<Request, string>()

/** `handler` with its answers reported (and traced); unchanged in cost when nothing observes. */
export function observed(
  storage: AttachStorage,
  group: 'api' | 'assets',
  handler: (request: Request) => Promise<Response>,
): (request: Request) => Promise<Response> {
  return async (request) => {
    let ctx: ServiceContext
    try {
      ctx = contextOf(storage)
    } catch {
      return handler(request)
    }
    const { observe, tracer } = ctx
    if (!observe.active && !tracer) return handler(request)
    const started = performance.now()
    const report = (response: Response, span?: Span) => {
      const route = matchedRoute.get(request) ?? 'unmatched'
      observe.request({ group, route, method: request.method, status: response.status, seconds: (performance.now() - started) / 1000 })
      const length = Number(response.headers.get('content-length'))
      if (group === 'assets' && request.method !== 'HEAD' && response.status < 300 && length > 0) observe.bytes('out', length)
      if (span) {
        span.updateName(`${request.method} ${group} ${route}`)
        span.setAttribute('http.route', route)
        span.setAttribute('http.response.status_code', response.status)
        if (response.status >= 500) span.setStatus({ code: SpanStatusCode.ERROR })
        span.end()
      }
      return response
    }
    if (!tracer) return report(await handler(request))
    return tracer.startActiveSpan(
      `${request.method} ${group}`,
      { kind: SpanKind.SERVER, attributes: { 'http.request.method': request.method, 'attach_storage.group': group } },
      async (span) => {
        try {
          return report(await handler(request), span)
        } catch (err) {
          span.recordException(err as Error)
          span.setStatus({ code: SpanStatusCode.ERROR })
          span.end()
          throw err
        }
      },
    )
  }
}
