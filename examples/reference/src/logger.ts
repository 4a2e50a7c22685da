import { pino, type Logger as Pino } from 'pino'
import type { Logger } from 'attach-storage'

/**
 * The reference server's logger: pino's JSON lines on stdout (level from `LOG_LEVEL`, default `info`),
 * behind the `logger` option's three methods. An `Error` among the arguments becomes pino's `err` (its
 * message and stack); other arguments go under `args`.
 */
export function referenceLogger(env: { LOG_LEVEL?: string } = process.env, base: Pino = pino({ level: env.LOG_LEVEL ?? 'info' })): Logger {
  const at =
    (level: 'info' | 'warn' | 'error') =>
    (message: string, ...args: unknown[]) => {
      const err = args.find((a) => a instanceof Error)
      const rest = args.filter((a) => a !== err)
      base[level]({ ...(err ? { err } : {}), ...(rest.length > 0 ? { args: rest } : {}) }, message)
    }
  return { info: at('info'), warn: at('warn'), error: at('error') }
}
