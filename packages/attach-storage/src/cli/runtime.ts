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
 * new items once `signal` aborts (what is in flight finishes).
 */
export async function forEachConcurrent<T>(
  source: AsyncIterable<T>,
  concurrency: number,
  signal: AbortSignal,
  fn: (item: T) => Promise<void>,
): Promise<void> {
  const running = new Set<Promise<void>>()
  let failure: unknown
  for await (const item of source) {
    if (signal.aborted || failure !== undefined) break
    const p: Promise<void> = fn(item).then(
      () => {
        running.delete(p)
      },
      (err: unknown) => {
        running.delete(p)
        failure ??= err
      },
    )
    running.add(p)
    if (running.size >= concurrency) await Promise.race(running)
  }
  await Promise.all(running)
  if (failure !== undefined) throw failure
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
