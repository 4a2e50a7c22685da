import type { AddressInfo } from 'node:net'
import { runReferenceServer } from '@attach-storage/example-reference'
import { createReferenceApp } from './app.js'

await runReferenceServer(createReferenceApp, async (ref, port, host) => {
  // Views by id are answered before Fastify (serveViewsFirst), with the app's CORS headers.
  ref.viewsFirst(ref.app.server)
  await ref.app.listen({ port, host })
  return { port: (ref.app.server.address() as AddressInfo).port, close: () => ref.app.close() }
})
