import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { createReferenceApp } from './app.js'

const port = Number(process.env.PORT ?? 3000)
if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`PORT must be a TCP port number, not "${process.env.PORT}"`)
  process.exit(1)
}

let ref: Awaited<ReturnType<typeof createReferenceApp>>
try {
  ref = await createReferenceApp(process.env)
} catch (err) {
  // Start-up failures (configuration, database, stores) stop the boot with their message.
  console.error(`attach-storage reference server failed to start: ${(err as Error).message}`)
  process.exit(1)
}

// Expired temporary files go on a timer (tmp-ttl), at most hourly and at least every minute.
const every = Math.min(3_600_000, Math.max(60_000, Math.floor(ref.storage.config.tmpTtl / 4)))
const sweeping = setInterval(() => {
  ref.storage.sweep().catch((err) => console.error('attach-storage: sweep failed', err))
}, every)
sweeping.unref()

const server = createServer(ref.app)
server.once('error', (err) => {
  console.error(`attach-storage reference server failed to listen: ${err.message}`)
  process.exit(1)
})
server.listen(port, process.env.HOST ?? '127.0.0.1', () => {
  console.log(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}`)
})

const stop = () => {
  clearInterval(sweeping)
  server.close(() => {
    ref.close().finally(() => process.exit(0))
  })
  server.closeIdleConnections()
  setTimeout(() => process.exit(0), 5000).unref()
}
process.on('SIGINT', stop)
process.on('SIGTERM', stop)
