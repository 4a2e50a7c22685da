/**
 * A throwaway FTP(S) server for the tests: ftp-srv 4.6.3 on 127.0.0.1 with a free control port, its own
 * passive port range, one user, and a root in a fresh temporary directory. Test-only.
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { FtpSrv } from 'ftp-srv'

export interface TestFtpServerOptions {
  user?: string
  password?: string
  /** Certificate and key: explicit FTPS (`AUTH TLS`), or implicit TLS with `implicit: true`. */
  tls?: { key: string; cert: string }
  implicit?: boolean
  /** Listen on this port and serve this directory (to restart a stopped server in place). */
  port?: number
  dir?: string
}

export interface TestFtpServer {
  host: string
  port: number
  user: string
  password: string
  /** The local directory that is `/` for the FTP user. */
  dir: string
  /** Logins accepted so far (one per control connection of the store). */
  readonly logins: number
  /** Stops the server at once: every connection is dropped. */
  stop(): Promise<void>
  /** Stops the server and removes its directory. */
  close(): Promise<void>
}

/** A logger that drops everything (ftp-srv logs through bunyan by default). */
const quiet: Record<string, unknown> = {}
for (const level of ['trace', 'debug', 'info', 'warn', 'error', 'fatal']) quiet[level] = () => {}
quiet.child = () => quiet

async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const probe = createServer()
    probe.once('error', reject)
    probe.listen(0, '127.0.0.1', () => {
      const address = probe.address()
      probe.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))))
    })
  })
}

export async function startFtpServer(options: TestFtpServerOptions = {}): Promise<TestFtpServer> {
  const user = options.user ?? 'attach'
  const password = options.password ?? 'ftp-Test-Passw0rd'
  const dir = options.dir ?? (await mkdtemp(join(tmpdir(), 'attach-ftp-')))
  const port = options.port ?? (await freePort())
  // Passive ports below Linux's ephemeral range, in a random window so parallel runs rarely meet;
  // ftp-srv moves on to the next port when one is taken.
  const pasvMin = 20_000 + Math.floor(Math.random() * 120) * 100
  const server = new FtpSrv({
    url: `${options.implicit ? 'ftps' : 'ftp'}://127.0.0.1:${port}`,
    pasv_url: '127.0.0.1',
    pasv_min: pasvMin,
    pasv_max: pasvMin + 99,
    tls: options.tls ?? false,
    greeting: 'attach-storage test server',
    log: quiet,
  })
  let logins = 0
  server.on('login', ({ username, password: given }, resolve, reject) => {
    if (username === user && given === password) {
      logins++
      resolve({ root: dir })
    } else {
      // Like some real servers, this one repeats what it was sent: the store must not pass it on.
      reject(new Error(`Login incorrect for ${username} with password ${given}`))
    }
  })
  server.on('client-error', () => {})
  await server.listen()

  let stopped: Promise<void> | undefined
  const stop = (): Promise<void> => {
    stopped ??= Promise.resolve(server.close()).then(
      () => undefined,
      () => undefined,
    )
    return stopped
  }
  return {
    host: '127.0.0.1',
    port,
    user,
    password,
    dir,
    get logins() {
      return logins
    },
    stop,
    async close() {
      await stop()
      await rm(dir, { recursive: true, force: true })
    },
  }
}
