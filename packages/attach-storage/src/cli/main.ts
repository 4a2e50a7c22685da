/**
 * The `attach-storage` command: migrate, sweep, verify, stats, copy-store, variants. It reads the
 * configuration the reference server reads (`ATTACH_DATA_DIR`, `ATTACH_CONFIG`, `ATTACH_DATABASE_URL`)
 * or `--config`. Exit codes: 0 done and clean, 1 problems found, 2 bad usage or configuration,
 * 130 interrupted (Ctrl-C).
 */
import { Command, CommanderError, InvalidArgumentError } from 'commander'
import { AttachStorageError } from '../errors.js'
import { copyStoreCommand } from './copy-store.js'
import { escapeControls } from './escape.js'
import { migrateCommand } from './migrate.js'
import { type CliIo, EXIT, type GlobalOptions, UsageError } from './runtime.js'
import { statsCommand } from './stats.js'
import { sweepCommand } from './sweep.js'
import { variantsCommand } from './variants.js'
import { verifyCommand } from './verify.js'

const positiveInt = (value: string): number => {
  const n = Number(value)
  if (!Number.isSafeInteger(n) || n < 1) throw new InvalidArgumentError('a positive integer')
  return n
}

/** Runs the command line `argv` (without `node` and the script); answers the exit code. */
export async function main(argv: string[], io: CliIo): Promise<number> {
  let code: number = EXIT.ok
  const program = new Command('attach-storage')
    .description('Operate attach-storage: schema, sweep, verification, statistics, moving a domain to another store')
    .option('-c, --config <file>', 'a JSON or YAML file {"attach": {...}} (default: $ATTACH_CONFIG)')
    .option('--json', 'the report as JSON')
    .exitOverride()
    .configureOutput({ writeOut: (s) => io.stdout.write(s), writeErr: (s) => io.stderr.write(s) })
  const global = (cmd: Command): GlobalOptions => cmd.optsWithGlobals()
  const run =
    <A extends unknown[]>(fn: (...args: A) => Promise<number>) =>
    async (...args: A) => {
      code = await fn(...args)
    }

  program
    .command('migrate')
    .description('bring the schema up to date (idempotent)')
    .option('--dry-run', 'print the SQL instead of running it')
    .action(run(async (_o: unknown, cmd: Command) => migrateCommand(global(cmd), io)))
  program
    .command('sweep')
    .description('remove expired temporary files, pending rows, crash leftovers and orphaned variants')
    .option('--dry-run', 'count what would be removed')
    .action(run(async (_o: unknown, cmd: Command) => sweepCommand(global(cmd), io)))
  program
    .command('verify')
    .description("check every file's bytes and sha256 in its store, and find files no record points to (exit 1 on a problem)")
    .option('--concurrency <n>', 'files read at once', positiveInt, 16)
    .option('--no-orphans', 'skip the search for files no record points to')
    .action(run(async (_o: unknown, cmd: Command) => verifyCommand(global(cmd), io)))
  program
    .command('stats')
    .description('files and bytes per domain, category and store; variants; temporary files')
    .option('--quota', 'bytes each user holds in uploads not committed yet, against upload.user-quota')
    .action(run(async (_o: unknown, cmd: Command) => statsCommand(global(cmd), io)))
  program
    .command('copy-store')
    .description("copy a domain's files to another store, verifying each sha256; resumable")
    .requiredOption('--domain <domain>', 'the domain whose files are copied')
    .requiredOption('--to <store>', 'the target store (declared in attach.stores)')
    .option('--concurrency <n>', 'files copied at once', positiveInt, 8)
    .option('--delete-source', 'once the records point at the target, remove the old copies')
    .option('--journal <file>', 'where verified copies are remembered (default: next to the configuration)')
    .action(run(async (_o: unknown, cmd: Command) => copyStoreCommand(global(cmd), io)))
  program
    .command('variants')
    .description("purge: drop a domain's stored resize variants; make: make the named variants not made yet")
    .argument('<action>', 'purge or make')
    .requiredOption('--domain <domain>', 'the domain')
    .option('--category <category>', 'make: only this category')
    .option('--concurrency <n>', 'make: variants made at once', positiveInt, 2)
    .action(run(async (action: string, _o: unknown, cmd: Command) => variantsCommand(action, global(cmd), io)))

  try {
    await program.parseAsync(argv, { from: 'user' })
    return code
  } catch (err) {
    if (err instanceof CommanderError) {
      // Help and version are not errors; commander has already written its message.
      return err.exitCode === 0 ? EXIT.ok : EXIT.usage
    }
    if (err instanceof UsageError) {
      io.stderr.write(`attach-storage: ${escapeControls(err.message)}\n`)
      return EXIT.usage
    }
    if (err instanceof AttachStorageError && (err.code === 'config-invalid' || err.code === 'migration-failed' || err.status === 400)) {
      io.stderr.write(`attach-storage: ${escapeControls(err.message)}\n`)
      return EXIT.usage
    }
    io.stderr.write(`attach-storage: ${escapeControls((err as Error)?.message ?? String(err))}\n`)
    return EXIT.problems
  }
}

/** Shows the cursor and wraps lines again: the progress bar turns both off while it runs. */
const RESTORE_TERMINAL = '\x1b[?25h\x1b[?7h'

/**
 * Runs as a process: Ctrl-C (or SIGTERM) stops cleanly, the exit code is the command's; a second one
 * quits at once with 130, without waiting for the files in flight.
 */
export async function runProcess(): Promise<void> {
  const controller = new AbortController()
  const stop = () => {
    if (controller.signal.aborted) {
      if (process.stderr.isTTY) process.stderr.write(RESTORE_TERMINAL)
      process.exit(EXIT.interrupted)
    }
    process.stderr.write('\nattach-storage: stopping after the files in flight (Ctrl-C again to quit now)\n')
    controller.abort()
  }
  process.on('SIGINT', stop)
  process.on('SIGTERM', stop)
  const code = await main(process.argv.slice(2), {
    stdout: process.stdout,
    stderr: process.stderr,
    env: process.env,
    cwd: process.cwd(),
    signal: controller.signal,
  })
  process.exitCode = code
  // A store call the command stopped waiting for (a stalled store, Ctrl-C) must not keep the process alive.
  process.stdout.write('', () => process.exit(code))
}
