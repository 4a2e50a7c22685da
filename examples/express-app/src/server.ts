import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { runReferenceServer } from '@attach-storage/example-reference'
import { answerClientError, deferContinue } from 'attach-storage/node'
import { createReferenceApp } from './app.js'

await runReferenceServer(
  createReferenceApp,
  (ref, port, host) =>
    new Promise((resolve, reject) => {
      const server = createServer(ref.app)
      // Requests Node's parser refuses answer JSON `{code, message}` too.
      server.on('clientError', answerClientError)
      // `Expect: 100-continue` is answered 100 only once the handlers read the body (after authentication).
      deferContinue(server)
      // Views by id are answered before Express (serveViewsFirst), with the app's CORS headers.
      ref.viewsFirst(server)
      server.once('error', reject)
      server.listen(port, host, () =>
        resolve({
          port: (server.address() as AddressInfo).port,
          close: () =>
            new Promise<void>((done) => {
              server.close(() => done())
              server.closeIdleConnections()
            }),
        }),
      )
    }),
)
