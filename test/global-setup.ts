/**
 * Vitest global setup: the database servers of the repository tests, provided as `inject('pgUrl')` and
 * `inject('mysqlUrl')`. Both are started at once (they boot in parallel) and stopped at teardown.
 *
 * PostgreSQL:
 * - `ATTACH_TEST_PG_URL` set: that server is used (its user must be allowed to CREATE DATABASE).
 * - Otherwise a throwaway server is started from the installed PostgreSQL binaries (initdb in a temp
 *   directory, trust auth, fsync off) and stopped and removed at teardown. Run as root, the binaries run
 *   as the `postgres` system user through `runuser`.
 *
 * MySQL (MariaDB):
 * - `ATTACH_TEST_MYSQL_URL` set (`mysql://user:password@host:port/`): that server is used (its user must
 *   be allowed to CREATE DATABASE and DROP DATABASE).
 * - Otherwise a throwaway MariaDB server is started from the installed binaries (MySQL's own server is
 *   refused: it initializes differently, and --skip-grant-tables turns its networking off): the system
 *   tables are created in a temp data directory, then `mariadbd` listens on 127.0.0.1 and a free port
 *   with `--skip-grant-tables` (any user, no password), durability off, and is stopped and removed at
 *   teardown. Run as root, `mariadbd --user=mysql` drops to the `mysql` system user itself.
 *
 * Missing system packages: before starting anything, the Debian packages whose binaries the tests run
 * are installed with apt-get when they are missing (`apt-get update` once, then one `apt-get install`),
 * as root or through passwordless sudo, and the set-up says so on stderr: `postgresql` and
 * `mariadb-server` (unless the URL above names a server), `openssh-server` and `openssh-client` (the SFTP
 * store tests start sshd), `python3` (the ZIP tests check archives with its zipfile module), `nginx-light`
 * and `lighttpd` (the offload tests put them in front of the server), `chromium` (the browser upload tests
 * drive it with playwright-core). When all
 * are present nothing is run and nothing is printed. Set `ATTACH_TEST_NO_INSTALL=1` to never install.
 *
 * No binaries (and no way to install them): the run fails (never a silent skip), with a hint on how to
 * install them.
 *
 * Several vitest projects list this setup; they share one server of each kind in the same process.
 */
import { type ChildProcess, execFileSync, spawn, spawnSync } from 'node:child_process'
import { chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { delimiter, dirname, join, resolve as resolvePath } from 'node:path'
import mysql from 'mysql2/promise'
import pg from 'pg'
import type { TestProject } from 'vitest/node'

interface RunningServer {
  url: string
  users: number
  stop(): Promise<void>
}

interface Lease {
  url: string
  release(): Promise<void>
}

const SHARED_KEY = Symbol.for('attach-storage.test.servers')
type ServerKind = 'postgres' | 'mysql'
type SharedState = Partial<Record<ServerKind, Promise<RunningServer>>> & { packages?: Promise<void> }
const globalState = globalThis as Record<symbol, SharedState>
const shared: SharedState = globalState[SHARED_KEY] ?? {}
globalState[SHARED_KEY] = shared

export default async function setup(project: TestProject): Promise<() => Promise<void>> {
  // Once per process, before any server starts: the projects' set-ups share the installation.
  shared.packages ??= installMissingPackages()
  await shared.packages
  // Both servers boot at once: most of either start-up is waiting on the disk and on the server itself.
  const [postgres, mariadb] = await Promise.allSettled([
    acquire('postgres', process.env.ATTACH_TEST_PG_URL, startPostgres),
    acquire('mysql', process.env.ATTACH_TEST_MYSQL_URL, startMariadb),
  ])
  if (postgres.status === 'rejected' || mariadb.status === 'rejected') {
    const errors = [postgres, mariadb].flatMap((r) => (r.status === 'rejected' ? [r.reason as unknown] : []))
    await Promise.all([postgres, mariadb].map((r) => (r.status === 'fulfilled' ? r.value.release() : undefined)))
    if (errors.length === 1) throw errors[0]
    throw new AggregateError(errors, errors.map((e) => (e instanceof Error ? e.message : String(e))).join('\n'))
  }
  project.provide('pgUrl', postgres.value.url)
  project.provide('mysqlUrl', mariadb.value.url)
  return async () => {
    await Promise.all([postgres.value.release(), mariadb.value.release()])
  }
}

/** The server of one kind: an external URL as is, else the shared throwaway server (started on first use). */
async function acquire(kind: ServerKind, external: string | undefined, start: () => Promise<RunningServer>): Promise<Lease> {
  if (external) return { url: external, release: async () => {} }
  const pending = shared[kind] ?? start()
  shared[kind] = pending
  let server: RunningServer
  try {
    server = await pending
  } catch (err) {
    if (shared[kind] === pending) shared[kind] = undefined
    throw err
  }
  server.users++
  let released = false
  return {
    url: server.url,
    async release() {
      if (released) return
      released = true
      server.users--
      if (server.users > 0) return
      if (shared[kind] === pending) shared[kind] = undefined
      await server.stop()
    },
  }
}

// ---------------------------------------------------------------------------------------------------
// System packages
// ---------------------------------------------------------------------------------------------------

/** The Debian packages whose binaries the tests need and this machine lacks, with what each is for. */
function missingPackages(): Array<{ name: string; why: string }> {
  const missing: Array<{ name: string; why: string }> = []
  if (!process.env.ATTACH_TEST_PG_URL && findPostgresBin() === undefined) {
    missing.push({ name: 'postgresql', why: 'PostgreSQL server binaries (initdb, postgres)' })
  }
  if (!process.env.ATTACH_TEST_MYSQL_URL && findMariadbServer() === undefined) {
    missing.push({ name: 'mariadb-server', why: 'MariaDB server binary (mariadbd)' })
  }
  // packages/store-sftp/src/test-sshd.ts runs these two by their Debian paths.
  if (!existsSync('/usr/sbin/sshd')) missing.push({ name: 'openssh-server', why: 'OpenSSH server (/usr/sbin/sshd)' })
  if (!existsSync('/usr/bin/ssh-keygen')) missing.push({ name: 'openssh-client', why: 'ssh-keygen (/usr/bin/ssh-keygen)' })
  // packages/attach-storage/src/http/offload.test.ts puts nginx and lighttpd in front of the server.
  if (!existsSync('/usr/sbin/nginx')) missing.push({ name: 'nginx-light', why: 'nginx (/usr/sbin/nginx), the X-Accel-Redirect tests' })
  if (!existsSync('/usr/sbin/lighttpd')) missing.push({ name: 'lighttpd', why: 'lighttpd (/usr/sbin/lighttpd), the X-Sendfile tests' })
  // examples/hono-app/test/direct-uploads.test.ts drives Debian's Chromium with playwright-core.
  if (!existsSync('/usr/bin/chromium')) missing.push({ name: 'chromium', why: 'Chromium (/usr/bin/chromium), the browser upload tests' })
  // packages/attach-storage/src/testing/clamd-kit.ts starts clamd for the virus-scanning tests.
  if (!existsSync('/usr/sbin/clamd')) missing.push({ name: 'clamav-daemon', why: 'clamd (/usr/sbin/clamd), the virus-scanning tests' })
  // packages/attach-storage/src/media/preview-tools.ts: video previews and analysis (ffmpeg, ffprobe), PDF
  // previews and page counts (pdftoppm, pdfinfo).
  if (!existsSync('/usr/bin/ffmpeg') || !existsSync('/usr/bin/ffprobe'))
    missing.push({ name: 'ffmpeg', why: 'ffmpeg and ffprobe, the video preview tests' })
  if (!existsSync('/usr/bin/pdftoppm')) missing.push({ name: 'poppler-utils', why: 'pdftoppm and pdfinfo, the PDF preview tests' })
  if (findOnPath('python3') === undefined) missing.push({ name: 'python3', why: 'python3 (the ZIP tests read archives with zipfile)' })
  // examples/hono-app/test/resumable-browser.test.ts drives Debian's Chromium with playwright-core.
  if (!existsSync('/usr/bin/chromium')) missing.push({ name: 'chromium', why: 'Chromium (/usr/bin/chromium), the browser upload tests' })
  return missing
}

/**
 * Installs the missing packages with apt-get (`apt-get update` once, then one `apt-get install`), as root
 * or through passwordless sudo, saying so on stderr. Does nothing, silently, when everything is present.
 * When it cannot install, it says what is missing and returns: the servers' own start-up then fails with
 * its hint.
 */
async function installMissingPackages(): Promise<void> {
  const missing = missingPackages()
  if (missing.length === 0) return
  const names = missing.map((p) => p.name)
  const what = missing.map((p) => `${p.name}: ${p.why}`).join('; ')
  const say = (line: string) => process.stderr.write(`[global-setup] ${line}\n`)
  const aptGet = findOnPath('apt-get', ['/usr/bin', '/bin'])
  let prefix: string[] | undefined
  if (process.getuid?.() === 0) prefix = []
  else if (findOnPath('sudo', ['/usr/bin']) !== undefined && spawnSync('sudo', ['-n', 'true'], { stdio: 'ignore' }).status === 0) {
    // sudo resets the environment: DEBIAN_FRONTEND goes through env(1).
    prefix = ['sudo', '-n', 'env', 'DEBIAN_FRONTEND=noninteractive']
  }
  if (process.env.ATTACH_TEST_NO_INSTALL || aptGet === undefined || prefix === undefined) {
    const reason = process.env.ATTACH_TEST_NO_INSTALL
      ? 'ATTACH_TEST_NO_INSTALL is set'
      : aptGet === undefined
        ? 'apt-get was not found'
        : 'not root and no passwordless sudo'
    say(`missing system packages, not installed (${reason}): ${what}. Install them: apt-get install ${names.join(' ')}`)
    return
  }
  say(`installing missing system packages with apt-get: ${what}`)
  const started = Date.now()
  const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
  const apt = async (args: string[]) => {
    const [program, ...rest] = [...prefix, aptGet, ...args]
    await run(program!, rest, undefined, env)
  }
  try {
    await apt(['update', '-qq'])
    await apt(['install', '-y', '-qq', '--no-install-recommends', ...names])
  } catch (err) {
    throw new Error(`Installing ${names.join(' ')} with apt-get failed: ${err instanceof Error ? err.message : String(err)}`)
  }
  say(`installed ${names.join(' ')} in ${Math.round((Date.now() - started) / 1000)} s`)
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

/**
 * A last resort when the vitest process exits without its teardown (a crash, a closed output pipe):
 * stops the server synchronously from the `exit` event and removes what it can of `dir`, so no server
 * outlives the run. Answers the function that withdraws it (the normal teardown calls it).
 */
function killOnExit(kill: () => void, dir: string): () => void {
  const onExit = () => {
    try {
      kill()
    } catch {
      // already gone
    }
    try {
      rmSync(dir, { recursive: true, force: true })
    } catch {
      // the server may still be writing its last files
    }
  }
  process.once('exit', onExit)
  return () => {
    process.off('exit', onExit)
  }
}

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
    const [initCmd, initArgs] = command('initdb', ['-D', dataDir, '-A', 'trust', '-U', 'postgres', '--no-sync', '-E', 'UTF8', '--locale=C'])
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
      '-D',
      dataDir,
      '-k',
      dir,
      '-p',
      String(port),
      '-c',
      'listen_addresses=127.0.0.1',
      '-c',
      'fsync=off',
      '-c',
      'full_page_writes=off',
      '-c',
      'synchronous_commit=off',
      '-c',
      'max_connections=200',
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
        const forget = killOnExit(() => {
          // SIGQUIT to the postmaster: immediate shutdown, its backends follow.
          const pid = Number(readFileSync(join(dataDir, 'postmaster.pid'), 'utf8').split('\n')[0])
          if (Number.isSafeInteger(pid) && pid > 0) process.kill(pid, 'SIGQUIT')
        }, dir)
        return {
          url,
          users: 0,
          stop: async () => {
            forget()
            await stopPostgres(child, dataDir, dir)
          },
        }
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

// ---------------------------------------------------------------------------------------------------
// MariaDB
// ---------------------------------------------------------------------------------------------------

/** Server settings for a throwaway test server: small, no durability, no binary log, utf8mb4. */
const MARIADB_SETTINGS = [
  '--innodb-buffer-pool-size=64M',
  '--innodb-log-file-size=16M',
  '--innodb-flush-log-at-trx-commit=0',
  '--innodb-doublewrite=0',
  // Plain threads instead of io_uring/libaio: container seccomp profiles often refuse io_uring.
  '--innodb-use-native-aio=0',
  '--skip-log-bin',
  '--skip-name-resolve',
  '--character-set-server=utf8mb4',
  '--collation-server=utf8mb4_general_ci',
]

/** The MariaDB server binary: `mariadbd` (or the older `mysqld` name) in the usual places or on PATH. */
function findMariadbServer(): string | undefined {
  const dirs = [
    '/usr/sbin',
    '/usr/local/sbin',
    '/usr/local/mysql/bin',
    '/usr/local/mariadb/bin',
    ...(process.env.PATH ?? '').split(delimiter),
  ]
  for (const name of ['mariadbd', 'mysqld']) {
    for (const dir of dirs) {
      if (dir && existsSync(join(dir, name))) return join(dir, name)
    }
  }
  return undefined
}

/** The directory of the server's own system-table scripts (what mariadb-install-db feeds the server). */
function findSystemTablesSql(bin: string): string | undefined {
  const candidates = [
    resolvePath(dirname(bin), '..', 'share', 'mariadb'),
    resolvePath(dirname(bin), '..', 'share', 'mysql'),
    '/usr/share/mariadb',
    '/usr/share/mysql',
  ]
  return candidates.find((d) => existsSync(join(d, 'mysql_system_tables.sql')) && existsSync(join(d, 'mysql_system_tables_data.sql')))
}

function findOnPath(name: string, extra: string[] = []): string | undefined {
  for (const dir of [...extra, ...(process.env.PATH ?? '').split(delimiter)]) {
    if (dir && existsSync(join(dir, name))) return join(dir, name)
  }
  return undefined
}

/** Runs a program to its end; rejects with the tail of its output when it fails. */
async function run(program: string, args: string[], input?: string, env?: NodeJS.ProcessEnv): Promise<void> {
  const child = spawn(program, args, { stdio: [input === undefined ? 'ignore' : 'pipe', 'pipe', 'pipe'], env })
  let output = ''
  const keep = (chunk: Buffer) => {
    output = (output + chunk.toString()).slice(-8000)
  }
  child.stdout?.on('data', keep)
  child.stderr?.on('data', keep)
  // The server may exit (and fail) before reading all of its input: an EPIPE is reported by the exit.
  child.stdin?.on('error', () => {})
  child.stdin?.end(input)
  const code = await new Promise<number | null>((resolve, reject) => {
    child.once('error', reject)
    child.once('close', (c) => resolve(c))
  })
  if (code !== 0) throw new Error(`${program} ${args.join(' ')} exited with ${code}:\n${output}`)
}

/**
 * Creates the system tables in `dataDir`. The server's `--bootstrap` mode is given the same system-table
 * scripts as mariadb-install-db, without the help tables, the GIS procedures and the `sys` schema, which
 * take most of its five seconds and none of which the tests use; mariadb-install-db itself when the
 * scripts are not where the packages put them.
 */
async function bootstrapMariadb(bin: string, dataDir: string, userArgs: string[]): Promise<string> {
  const sqlDir = findSystemTablesSql(bin)
  if (sqlDir !== undefined) {
    const input = [
      'create database if not exists mysql;',
      'use mysql;',
      'SET @auth_root_socket=NULL;',
      readFileSync(join(sqlDir, 'mysql_system_tables.sql'), 'utf8'),
      readFileSync(join(sqlDir, 'mysql_system_tables_data.sql'), 'utf8'),
    ].join('\n')
    await run(
      bin,
      [
        '--no-defaults',
        '--bootstrap',
        `--datadir=${dataDir}`,
        '--log-warnings=0',
        '--enforce-storage-engine=',
        '--max-allowed-packet=8M',
        '--net-buffer-length=16K',
        ...userArgs,
        ...MARIADB_SETTINGS,
      ],
      input,
    )
    return 'bootstrap'
  }
  const installDb =
    findOnPath('mariadb-install-db', ['/usr/bin', '/usr/local/bin', dirname(bin)]) ??
    findOnPath('mysql_install_db', ['/usr/bin', dirname(bin)])
  if (installDb === undefined) {
    throw new Error(`Neither the system-table scripts (mysql_system_tables.sql) nor mariadb-install-db were found for ${bin}`)
  }
  await run(installDb, [
    '--no-defaults',
    `--datadir=${dataDir}`,
    '--auth-root-authentication-method=normal',
    '--skip-test-db',
    ...userArgs,
    ...MARIADB_SETTINGS,
  ])
  return 'mariadb-install-db'
}

async function startMariadb(): Promise<RunningServer> {
  const bin = findMariadbServer()
  const hint =
    'Install them (Debian/Ubuntu: apt-get install mariadb-server; no service needs to run) or set ' +
    'ATTACH_TEST_MYSQL_URL to a MySQL/MariaDB server whose user may CREATE DATABASE (mysql://user:password@host:port/).'
  if (bin === undefined) {
    // Never skip silently: in CI and locally alike the MySQL tests must run.
    const message = `MariaDB server binaries (mariadbd or mysqld) were not found under /usr/sbin or on PATH. ${hint}`
    throw new Error(process.env.CI ? `[CI] ${message}` : message)
  }
  let version = ''
  try {
    version = execFileSync(bin, ['--version'], { encoding: 'utf8' })
  } catch (err) {
    throw new Error(`${bin} --version failed: ${String(err)}. ${hint}`)
  }
  if (!/mariadb/i.test(version)) {
    // MySQL's mysqld initializes and authenticates differently (and --skip-grant-tables turns networking off).
    throw new Error(`${bin} is not a MariaDB server (${version.trim()}). ${hint}`)
  }

  const started = Date.now()
  const asRoot = process.getuid?.() === 0
  const dir = mkdtempSync(join(tmpdir(), 'attach-mysql-'))
  const dataDir = join(dir, 'data')
  mkdirSync(dataDir)
  // As root the server drops to the `mysql` user itself (--user), which must own its directories.
  const userArgs = asRoot ? ['--user=mysql'] : []
  if (asRoot) {
    const uid = Number(execFileSync('id', ['-u', 'mysql'], { encoding: 'utf8' }).trim())
    const gid = Number(execFileSync('id', ['-g', 'mysql'], { encoding: 'utf8' }).trim())
    chownSync(dir, uid, gid)
    chownSync(dataDir, uid, gid)
  }

  let how: string
  try {
    how = await bootstrapMariadb(bin, dataDir, userArgs)
  } catch (err) {
    rmSync(dir, { recursive: true, force: true })
    throw new Error(`Creating the MariaDB system tables failed: ${err instanceof Error ? err.message : String(err)}`)
  }

  let lastError = ''
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort()
    const child = spawn(
      bin,
      [
        '--no-defaults',
        `--datadir=${dataDir}`,
        `--socket=${join(dir, 'mysqld.sock')}`,
        `--pid-file=${join(dir, 'mysqld.pid')}`,
        `--tmpdir=${dir}`,
        `--port=${port}`,
        '--bind-address=127.0.0.1',
        '--skip-grant-tables',
        '--max-connections=500',
        '--innodb-fast-shutdown=3',
        ...userArgs,
        ...MARIADB_SETTINGS,
      ],
      { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] },
    )
    let log = ''
    child.stderr?.on('data', (chunk: Buffer) => {
      log = (log + chunk.toString()).slice(-8000)
    })
    let exited = false
    child.once('exit', () => {
      exited = true
    })
    const url = `mysql://root@127.0.0.1:${port}/`
    const deadline = Date.now() + 30_000
    while (!exited && Date.now() < deadline) {
      try {
        const conn = await mysql.createConnection({ host: '127.0.0.1', port, user: 'root', connectTimeout: 2000 })
        try {
          await conn.query('select 1')
        } finally {
          await conn.end().catch(() => {})
        }
        console.log(`[global-setup] MariaDB (${bin}, ${how}) ready on port ${port} in ${Date.now() - started} ms`)
        const forget = killOnExit(() => child.kill('SIGKILL'), dir)
        return {
          url,
          users: 0,
          stop: async () => {
            forget()
            await stopMariadb(child, dir)
          },
        }
      } catch {
        await sleep(100)
      }
    }
    lastError = log
    await stopMariadb(child, undefined)
  }
  rmSync(dir, { recursive: true, force: true })
  throw new Error(`MariaDB did not start:\n${lastError}`)
}

/** SIGTERM (a fast shutdown: --innodb-fast-shutdown=3, nothing is kept), SIGKILL if it hangs; then removes `dir`. */
async function stopMariadb(child: ChildProcess, dir: string | undefined): Promise<void> {
  const gone = () => child.exitCode !== null || child.signalCode !== null
  const exited = new Promise<void>((resolve) => {
    if (gone()) resolve()
    else child.once('exit', () => resolve())
  })
  if (!gone()) child.kill('SIGTERM')
  if (!(await within(exited, 10_000)) && !gone()) {
    child.kill('SIGKILL')
    await within(exited, 5_000)
  }
  if (dir !== undefined) rmSync(dir, { recursive: true, force: true })
}
