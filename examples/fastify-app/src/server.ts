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

try {
  await ref.app.listen({ port, host: process.env.HOST ?? '127.0.0.1' })
} catch (err) {
  console.error(`attach-storage reference server failed to listen: ${(err as Error).message}`)
  process.exit(1)
}
console.log(`listening on http://127.0.0.1:${(ref.app.server.address() as AddressInfo).port}`)

const stop = () => {
  clearInterval(sweeping)
  ref.app
    .close()
    .then(() => ref.close())
    .finally(() => process.exit(0))
  setTimeout(() => process.exit(0), 5000).unref()
}
process.on('SIGINT', stop)
process.on('SIGTERM', stop)
