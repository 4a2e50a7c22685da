/**
 * The health answers a host mounts for its orchestrator, without authentication: `healthz` (the process
 * lives and answers) and `readyz` (the database and every store answer: 200, else 503), both JSON and
 * never cached.
 */
import type { AttachStorage } from '../service/attach-storage.js'
import type { Readiness, ReadinessOptions } from '../service/health.js'

/** The two health answers of a service. */
export interface HealthHandlers {
  /** 200 `{"status":"ok"}` while the process answers requests. */
  healthz(request?: Request): Response
  /**
   * 200 `{"status":"ready", ...}` when the database and every store answered within the time limit, else
   * 503 `{"status":"not-ready", ...}` naming what did not (`database`, `stores.<name>`, with the error).
   */
  readyz(request?: Request): Promise<Response>
}

const json = (status: number, body: unknown) =>
  new Response(JSON.stringify(body), {
    status,
    headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-store' },
  })

/**
 * The health answers of `storage`, for a host to mount where its orchestrator looks (the reference
 * server: `GET /healthz`, `GET /readyz`). `readyz` answers without authentication, so its check is
 * shared: concurrent probes wait for one check, and a finished one is reused for `maxAgeMs` (default
 * 1 s), so each store and the database are asked at most once per second however many probes arrive.
 *
 * @example
 * const health = createHealthHandlers(storage)
 * app.get('/healthz', () => health.healthz())
 * app.get('/readyz', () => health.readyz())
 */
export function createHealthHandlers(storage: AttachStorage, options: ReadinessOptions = {}): HealthHandlers {
  return {
    healthz: () => json(200, { status: 'ok' }),
    async readyz() {
      let readiness: Readiness
      try {
        readiness = await storage.readiness(options)
      } catch (err) {
        // Not initialised, or closed: not ready.
        return json(503, { status: 'not-ready', error: (err as Error).message })
      }
      return json(readiness.ready ? 200 : 503, { status: readiness.ready ? 'ready' : 'not-ready', ...readiness })
    },
  }
}
