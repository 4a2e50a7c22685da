/** What every command runs over: the service's context, the output streams, progress and Ctrl-C. */
import { AttachStorage, contextOf } from '../service/attach-storage.js'
import type { ServiceContext } from '../service/context.js'
import type { Logger } from '../service/types.js'
import type { Store } from '../stores/store.js'
import { escapeControls, escapeLine } from './escape.js'
import { type CliEnv, resolveSettings } from './settings.js'

/** Where a command writes, and what stops it. */
export interface CliIo {
  stdout: NodeJS.WritableStream & { isTTY?: boolean }
  stderr: NodeJS.WritableStream & { isTTY?: boolean }
  env: CliEnv
  cwd: string
  /** Aborted on Ctrl-C: commands finish what is in flight, report, and stop. */
  signal: AbortSignal
}

/** The options every command takes. */
export interface GlobalOptions {
  config?: string
  json?: boolean
}

/** Exit codes of the contract. */
export const EXIT = { ok: 0, problems: 1, usage: 2, interrupted: 130 } as const

/** A usage or configuration problem: a message on stderr and exit 2, never a stack. */
export class UsageError extends Error {}

/** An opened service: its context, the state folder, and how to close it. */
export interface Opened {
  ctx: ServiceContext
  stateDir: string
  close(): Promise<void>
}

/** Opens the service from the configuration (migrating the schema, as the server does at start). */
export async function openService(options: GlobalOptions, io: CliIo): Promise<Opened> {
  const { settings, stateDir } = await resolveSettings(options.config, io.env, io.cwd)
  const logger: Logger = {
    info: () => {},
    warn: (message: string) => io.stderr.write(`${escapeControls(message)}\n`),
    error: (message: string) => io.stderr.write(`${escapeControls(message)}\n`),
  }
  // The tool queues and runs no background work of the server's (named variants): it does its own.
  const storage = new AttachStorage({ config: settings, logger, backgroundWork: false })
  try {
    await storage.init()
  } catch (err) {
    await storage.close().catch(() => undefined)
    throw err
  }
  return { ctx: contextOf(storage), stateDir, close: () => storage.close() }
}

/** Each store once (a store may also be the temporary store). */
export function distinctStores(ctx: ServiceContext): Store[] {
  return [...new Set(ctx.stores.stores.values())]
}

/**
 * Runs `fn` over what `source` yields, at most `concurrency` at a time, in order of arrival; stops taking
 * new items once `signal` aborts or an item fails (what is in flight finishes), then throws the first
 * failure. `concurrency` workers each take the next item when done with theirs; `worker` (0 to
 * `concurrency - 1`) names the one running an item, so a worker can keep a buffer of its own.
 */
export async function forEachConcurrent<T>(
  source: AsyncIterable<T>,
  concurrency: number,
  signal: AbortSignal,
  fn: (item: T, worker: number) => Promise<void>,
): Promise<void> {
  const items = source[Symbol.asyncIterator]()
  let failure: { err: unknown } | undefined
  const work = async (worker: number): Promise<void> => {
    while (!signal.aborted && !failure) {
      try {
        const next = await items.next()
        if (next.done) return
        await fn(next.value, worker)
      } catch (err) {
        failure ??= { err }
      }
    }
  }
  await Promise.all(Array.from({ length: Math.max(1, concurrency) }, (_, worker) => work(worker)))
  // Stopped early: the source is closed (a generator's finally blocks run).
  if (failure || signal.aborted) await items.return?.()
  if (failure) throw failure.err
}

/** Human size: `12.3 MB`. */
export function formatBytes(n: number): string {
  const units = ['B', 'KB', 'MB', 'GB', 'TB']
  let v = n
  let i = 0
  while (v >= 1000 && i < units.length - 1) {
    v /= 1000
    i++
  }
  return i === 0 ? `${v} B` : `${v.toFixed(1)} ${units[i]}`
}

/**
 * Writes the report: JSON with `--json`, else the text lines, each escaped ({@link escapeLine}: no
 * control or direction character of a stored name reaches the terminal). A field that may itself hold a
 * TAB is escaped by its command with `escapeControls` first.
 */
export function report(io: CliIo, options: GlobalOptions, json: unknown, text: string[]): void {
  io.stdout.write(options.json ? `${JSON.stringify(json, null, 2)}\n` : `${text.map(escapeLine).join('\n')}\n`)
}
