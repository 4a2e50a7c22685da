import type { Logger } from 'attach-storage'
import { referenceLogger } from './logger.js'
import type { Reference, ServerEnv } from './reference.js'

/** A listening server, as each framework's example starts it. */
export interface Listening {
  /** The bound port (PORT=0 picks a free one). */
  port: number
  /** Stops accepting connections and closes idle ones. */
  close(): Promise<void>
}

/**
 * The process around a reference server, the same for every framework: reads PORT and HOST, builds the
 * app with pino as its logger (JSON lines on stdout, `LOG_LEVEL`) (a start-up failure prints its message and exits 1), runs the sweep of expired temporary files on
 * a timer, prints `listening on http://127.0.0.1:<port>`, and stops cleanly on SIGINT / SIGTERM.
 */
export async function runReferenceServer<R extends Reference>(
  build: (env: ServerEnv, logger: Logger) => Promise<R>,
  listen: (ref: R, port: number, host: string) => Promise<Listening>,
  env: ServerEnv = process.env,
): Promise<void> {
  const port = Number(env.PORT ?? 3000)
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`PORT must be a TCP port number, not "${env.PORT}"`)
    process.exit(1)
  }
  const logger = referenceLogger(env)
  let ref: R
  try {
    ref = await build(env, logger)
  } catch (err) {
    // Start-up failures (configuration, database, stores) stop the boot with their message.
    console.error(`attach-storage reference server failed to start: ${(err as Error).message}`)
    process.exit(1)
  }

  // Expired temporary files go on a timer (tmp-ttl), at most hourly and at least every minute.
  const every = Math.min(3_600_000, Math.max(60_000, Math.floor(ref.storage.config.tmpTtl / 4)))
  const sweeping = setInterval(() => {
    ref.storage.sweep().catch((err) => logger.error('attach-storage: sweep failed', err))
  }, every)
  sweeping.unref()

  let server: Listening
  try {
    server = await listen(ref, port, env.HOST ?? '127.0.0.1')
  } catch (err) {
    console.error(`attach-storage reference server failed to listen: ${(err as Error).message}`)
    await ref.close().catch(() => undefined)
    process.exit(1)
  }
  console.log(`listening on http://127.0.0.1:${server.port}`)

  const stop = () => {
    clearInterval(sweeping)
    server
      .close()
      .then(() => ref.close())
      .finally(() => process.exit(0))
    setTimeout(() => process.exit(0), 5000).unref()
  }
  process.on('SIGINT', stop)
  process.on('SIGTERM', stop)
}
