import type { Server } from 'node:http'
import { serve } from '@hono/node-server'
import { runReferenceServer } from '@attach-storage/example-reference'
import { answerClientError, deferContinue } from 'attach-storage/node'
import { createReferenceApp } from './app.js'

await runReferenceServer(
  createReferenceApp,
  (ref, port, hostname) =>
    new Promise((resolve, reject) => {
      const server = serve({ fetch: ref.app.fetch, port, hostname }, (info) =>
        resolve({
          port: info.port,
          close: () =>
            new Promise<void>((done) => {
              server.close(() => done())
              ;(server as unknown as { closeIdleConnections?: () => void }).closeIdleConnections?.()
            }),
        }),
      )
      server.once('error', reject)
      // Requests Node's parser refuses answer JSON `{code, message}` too.
      server.on('clientError', answerClientError)
      // `Expect: 100-continue` is answered 100 only once the handlers read the body (after authentication).
      deferContinue(server as Server)
      // Views by id are answered before Hono (serveViewsFirst), with the app's CORS headers.
      ref.viewsFirst(server as Server)
    }),
)
