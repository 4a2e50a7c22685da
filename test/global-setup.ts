/**
 * Vitest global setup: a PostgreSQL server for the repository tests, provided as `inject('pgUrl')`.
 *
 * - `ATTACH_TEST_PG_URL` set: that server is used (its user must be allowed to CREATE DATABASE).
 * - Otherwise a throwaway server is started from the installed PostgreSQL binaries (initdb in a temp
 *   directory, trust auth, fsync off) and stopped and removed at teardown. Run as root, the binaries run
 *   as the `postgres` system user through `runuser`.
 * - No binaries: the run fails (never a silent skip), with a hint on how to install them.
 *
 * Several vitest projects list this setup; they share one server in the same process.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { chownSync, existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { delimiter, join } from 'node:path'
import pg from 'pg'
import type { TestProject } from 'vitest/node'

interface RunningServer {
  url: string
  users: number
  stop(): Promise<void>
}

const SHARED_KEY = Symbol.for('attach-storage.test.postgres')
type SharedState = { server?: Promise<RunningServer> }
const shared: SharedState = ((globalThis as Record<symbol, SharedState>)[SHARED_KEY] ??= {})

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  const external = process.env.ATTACH_TEST_PG_URL
  if (external) {
    project.provide('pgUrl', external)
    return async () => {}
  }

  shared.server ??= startPostgres()
  let server: RunningServer
  try {
    server = await shared.server
  } catch (err) {
    shared.server = undefined
    throw err
  }
  server.users++
  project.provide('pgUrl', server.url)
  return async () => {
    server.users--
    if (server.users > 0) return
    shared.server = undefined
    await server.stop()
  }
}

/** The `bin` directory holding initdb and postgres: the highest /usr/lib/postgresql/<v>/bin, else PATH. */
function findPostgresBin(): string | undefined {
  const base = '/usr/lib/postgresql'
  if (existsSync(base)) {
    const versions = readdirSync(base)
      .filter((v) => /^\d+(\.\d+)?$/.test(v) && existsSync(join(base, v, 'bin', 'initdb')))
      .sort((a, b) => Number.parseFloat(b) - Number.parseFloat(a))
    if (versions[0] !== undefined) return join(base, versions[0], 'bin')
  }
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (dir && existsSync(join(dir, 'initdb')) && existsSync(join(dir, 'postgres'))) return dir
  }
  return undefined
}

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer()
    srv.unref()
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address()
      const port = typeof address === 'object' && address ? address.port : 0
      srv.close(() => resolve(port))
    })
  })
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** Resolves true when `promise` settles within `ms`, false otherwise; never keeps the process alive. */
async function within(promise: Promise<unknown>, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined
  const timeout = new Promise<boolean>((resolve) => {
    timer = setTimeout(() => resolve(false), ms)
    timer.unref()
  })
  try {
    return await Promise.race([promise.then(() => true), timeout])
  } finally {
    clearTimeout(timer)
  }
}

async function startPostgres(): Promise<RunningServer> {
  const bin = findPostgresBin()
  if (bin === undefined) {
    const hint =
      'PostgreSQL server binaries (initdb, postgres) were not found under /usr/lib/postgresql/*/bin or on PATH. ' +
      'Install them (Debian/Ubuntu: apt-get install postgresql) or set ATTACH_TEST_PG_URL to a server ' +
      'whose user may CREATE DATABASE.'
    // Never skip silently: in CI and locally alike the PostgreSQL tests must run.
    throw new Error(process.env.CI ? `[CI] ${hint}` : hint)
  }

  const started = Date.now()
  const asRoot = process.getuid?.() === 0
  const dir = mkdtempSync(join(tmpdir(), 'attach-pg-'))
  const dataDir = join(dir, 'data')
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'postgres'], { encoding: 'utf8' }).trim())
    const gid = Number(execFileSync('id', ['-g', 'postgres'], { encoding: 'utf8' }).trim())
    chownSync(dir, uid, gid)
  }
  /** The command line, through `runuser -u postgres --` when we are root. */
  const command = (program: string, args: string[]): [string, string[]] =>
    asRoot ? ['runuser', ['-u', 'postgres', '--', join(bin, program), ...args]] : [join(bin, program), args]

  try {
    const [initCmd, initArgs] = command('initdb', [
      '-D', dataDir, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8', '--locale=C',
    ])
    execFileSync(initCmd, initArgs, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'] })
  } catch (err) {
    rmSync(dir, { recursive: true, force: true })
    const stderr = (err as { stderr?: Buffer }).stderr?.toString() ?? ''
    throw new Error(`initdb failed: ${stderr || String(err)}`)
  }

  let lastError = ''
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort()
    const [cmd, args] = command('postgres', [
      '-D', dataDir, '-k', dir, '-p', String(port),
      '-c', 'listen_addresses=127.0.0.1', '-c', 'fsync=off', '-c', 'full_page_writes=off',
      '-c', 'synchronous_commit=off', '-c', 'max_connections=200',
    ])
    const child = spawn(cmd, args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] })
    let log = ''
    child.stderr?.on('data', (chunk: Buffer) => {
      log = (log + chunk.toString()).slice(-8000)
    })
    let exited = false
    child.once('exit', () => {
      exited = true
    })
    const url = `postgres://postgres@127.0.0.1:${port}/postgres`
    const deadline = Date.now() + 30_000
    while (!exited && Date.now() < deadline) {
      const client = new pg.Client({ connectionString: url })
      try {
        await client.connect()
        await client.query('select 1')
        await client.end()
        console.log(`[global-setup] PostgreSQL (${bin}) ready on port ${port} in ${Date.now() - started} ms`)
        return { url, users: 0, stop: () => stopPostgres(child, dataDir, dir) }
      } catch {
        await client.end().catch(() => {})
        await sleep(100)
      }
    }
    lastError = log
    await stopPostgres(child, dataDir, undefined)
  }
  rmSync(dir, { recursive: true, force: true })
  throw new Error(`PostgreSQL did not start:\n${lastError}`)
}

/** Fast shutdown (SIGINT to the postmaster itself, not to runuser), then removes `dir`. */
async function stopPostgres(child: ChildProcess, dataDir: string, dir: string | undefined): Promise<void> {
  const exited = new Promise<void>((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) resolve()
    else child.once('exit', () => resolve())
  })
  const gone = () => child.exitCode !== null || child.signalCode !== null
  const signal = (sig: NodeJS.Signals) => {
    if (gone()) return
    let target = child.pid
    try {
      // Under runuser the postmaster is a grandchild: signal it directly (runuser would turn SIGINT
      // into SIGTERM, a "smart" shutdown that waits for clients).
      const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0])
      if (Number.isSafeInteger(pid) && pid > 0) target = pid
    } catch {
      // no pid file yet: signal our child
    }
    if (target === undefined) return
    try {
      process.kill(target, sig)
    } catch {
      // already gone
    }
  }
  signal('SIGINT')
  if (!(await within(exited, 10_000))) {
    signal('SIGQUIT')
    await within(exited, 5_000)
  }
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
}
