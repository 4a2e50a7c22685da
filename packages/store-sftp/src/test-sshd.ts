/**
 * Test-only: a throwaway OpenSSH server (Debian's `/usr/sbin/sshd`) on 127.0.0.1, serving SFTP
 * (`internal-sftp`) to a throwaway system user, with a fresh host key and user key. Needs root (it
 * creates the user); fails loudly, never skips, when that or OpenSSH is missing.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process'
import { randomBytes } from 'node:crypto'
import { chmodSync, chownSync, existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const SSHD = '/usr/sbin/sshd'
const SSH_KEYGEN = '/usr/bin/ssh-keygen'

export interface TestSshd {
  host: string
  port: number
  username: string
  password: string
  /** Path of the user's private key (ed25519, encrypted with {@link passphrase}). */
  privateKeyPath: string
  passphrase: string
  /** The host key's fingerprint, `SHA256:…`. */
  hostFingerprint: string
  /** The local directory the SFTP user logs into (its home); use as the store's base: root `''`. */
  home: string
  /** Kills the server and every session it forked (SIGKILL), like a crash. */
  kill(): Promise<void>
  /** Kills the sessions only (the listener keeps accepting): every open connection breaks. */
  killSessions(): Promise<void>
  /** Freezes the sessions (SIGSTOP): their connections stay open but never answer again. */
  freezeSessions(): Promise<void>
  /** Starts the server again on the same port. */
  start(): Promise<void>
  /** Stops the server, removes the user and the directory. */
  cleanup(): Promise<void>
  /** What sshd wrote to stderr (for failure messages). */
  log(): string
}

function hint(): string {
  return "install Debian's OpenSSH (apt-get install openssh-server openssh-client; .ci/run does it)"
}

export async function startTestSshd(): Promise<TestSshd> {
  if (!existsSync(SSHD) || !existsSync(SSH_KEYGEN)) {
    throw new Error(`The SFTP store tests need ${SSHD} and ${SSH_KEYGEN}: ${hint()}`)
  }
  if (typeof process.getuid !== 'function' || process.getuid() !== 0) {
    throw new Error('The SFTP store tests run as root: they create a throwaway system user for the SFTP login')
  }
  const dir = await mkdtemp(join(tmpdir(), 'attach-sshd-'))
  chmodSync(dir, 0o755)
  const home = join(dir, 'home')
  const username = `attach-sftp-${randomBytes(4).toString('hex')}`
  const password = `pw-${randomBytes(12).toString('base64url')}`
  const passphrase = `pp-${randomBytes(9).toString('base64url')}`
  let userCreated = false
  let child: ChildProcess | undefined
  let stderr = ''

  const cleanupAll = async (): Promise<void> => {
    await stop('SIGTERM')
    if (userCreated) {
      try {
        execFileSync('userdel', [username], { stdio: 'pipe' })
      } catch {
        // already gone
      }
    }
    await rm(dir, { recursive: true, force: true })
  }

  try {
    const hostKey = join(dir, 'host_key')
    execFileSync(SSH_KEYGEN, ['-q', '-t', 'ed25519', '-N', '', '-C', 'attach-test-host', '-f', hostKey], { stdio: 'pipe' })
    const printed = execFileSync(SSH_KEYGEN, ['-l', '-E', 'sha256', '-f', `${hostKey}.pub`], { encoding: 'utf8' })
    const hostFingerprint = /SHA256:[A-Za-z0-9+/]+/.exec(printed)?.[0]
    if (!hostFingerprint) throw new Error(`Unexpected ssh-keygen output: ${printed}`)
    const userKey = join(dir, 'user_key')
    execFileSync(SSH_KEYGEN, ['-q', '-t', 'ed25519', '-a', '2', '-N', passphrase, '-C', 'attach-test-user', '-f', userKey], {
      stdio: 'pipe',
    })

    execFileSync('useradd', ['--system', '--no-create-home', '--home-dir', home, '--shell', '/usr/sbin/nologin', username], {
      stdio: 'pipe',
    })
    userCreated = true
    execFileSync('chpasswd', [], { input: `${username}:${password}\n`, stdio: ['pipe', 'pipe', 'pipe'] })
    mkdirSync(home)
    const uid = Number(execFileSync('id', ['-u', username], { encoding: 'utf8' }).trim())
    const gid = Number(execFileSync('id', ['-g', username], { encoding: 'utf8' }).trim())
    chownSync(home, uid, gid)
    chmodSync(home, 0o755)

    const authorizedKeys = join(dir, 'authorized_keys')
    writeFileSync(authorizedKeys, readFileSync(`${userKey}.pub`), { mode: 0o644 })
    const config = join(dir, 'sshd_config')
    writeFileSync(
      config,
      [
        'ListenAddress 127.0.0.1',
        `HostKey ${hostKey}`,
        `PidFile ${join(dir, 'sshd.pid')}`,
        'UsePAM no',
        'StrictModes no',
        'PermitRootLogin no',
        `AllowUsers ${username}`,
        'PasswordAuthentication yes',
        'PermitEmptyPasswords no',
        'KbdInteractiveAuthentication no',
        'PubkeyAuthentication yes',
        `AuthorizedKeysFile ${authorizedKeys}`,
        'Subsystem sftp internal-sftp',
        'ForceCommand internal-sftp',
        'AllowTcpForwarding no',
        'X11Forwarding no',
        'PermitTTY no',
        'MaxStartups 100',
        'MaxAuthTries 6',
        'LoginGraceTime 30',
        'LogLevel INFO',
        '',
      ].join('\n'),
    )
    // sshd's privilege separation directory (the Debian package creates it at boot via tmpfiles).
    mkdirSync('/run/sshd', { recursive: true, mode: 0o755 })
    execFileSync(SSHD, ['-t', '-f', config], { stdio: 'pipe' })

    const port = await freePort()

    const start = async (): Promise<void> => {
      stderr = ''
      const proc = spawn(SSHD, ['-D', '-e', '-f', config, '-p', String(port)], { stdio: ['ignore', 'ignore', 'pipe'] })
      child = proc
      await new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`sshd did not start within 10 s:\n${stderr}`)), 10_000)
        proc.stderr!.setEncoding('utf8')
        proc.stderr!.on('data', (text: string) => {
          stderr += text
          if (stderr.length > 200_000) stderr = stderr.slice(-100_000)
          if (/Server listening on/.test(stderr)) {
            clearTimeout(timer)
            resolve()
          }
        })
        proc.once('exit', (code, signal) => {
          clearTimeout(timer)
          reject(new Error(`sshd exited (${code ?? signal}) before listening:\n${stderr}`))
        })
      })
    }

    await start()

    return {
      host: '127.0.0.1',
      port,
      username,
      password,
      privateKeyPath: userKey,
      passphrase,
      hostFingerprint,
      home,
      kill: () => stop('SIGKILL'),
      killSessions: async () => {
        if (child?.pid === undefined) return
        for (const pid of descendantsOf(child.pid)) signal(pid, 'SIGKILL')
        await waitUntil(() => descendantsOf(child!.pid!).length === 0)
      },
      freezeSessions: async () => {
        if (child?.pid === undefined) return
        for (const pid of descendantsOf(child.pid)) signal(pid, 'SIGSTOP')
      },
      start,
      cleanup: cleanupAll,
      log: () => stderr,
    }
  } catch (err) {
    await cleanupAll()
    throw err
  }

  /** Stops the listener and every process it forked (by pid: only what this helper started). */
  async function stop(sig: NodeJS.Signals): Promise<void> {
    const proc = child
    child = undefined
    if (proc?.pid === undefined || proc.exitCode !== null || proc.signalCode !== null) return
    const sessions = descendantsOf(proc.pid)
    const exited = new Promise<void>((resolve) => proc.once('exit', () => resolve()))
    signal(proc.pid, sig)
    for (const pid of sessions) signal(pid, sig)
    await Promise.race([exited, sleep(5_000)])
    if (proc.exitCode === null && proc.signalCode === null) signal(proc.pid, 'SIGKILL')
    await waitUntil(() => sessions.every((pid) => !alive(pid)))
  }
}

function signal(pid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(pid, sig)
  } catch {
    // gone already
  }
}

function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
    return !/^\d+ \(.*\) Z /.test(stat)
  } catch {
    return false
  }
}

/** Every live process below `root` in the process tree (from /proc). */
function descendantsOf(root: number): number[] {
  const parents = new Map<number, number[]>()
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue
    let stat: string
    try {
      stat = readFileSync(`/proc/${name}/stat`, 'utf8')
    } catch {
      continue
    }
    // pid (comm) state ppid …; comm may hold spaces and parentheses.
    const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
    if (rest[0] === 'Z') continue
    const ppid = Number(rest[1])
    const list = parents.get(ppid) ?? []
    list.push(Number(name))
    parents.set(ppid, list)
  }
  const out: number[] = []
  const walk = (pid: number): void => {
    for (const c of parents.get(pid) ?? []) {
      out.push(c)
      walk(c)
    }
  }
  walk(root)
  return out
}

const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

async function waitUntil(check: () => boolean, ms = 5_000): Promise<void> {
  const until = Date.now() + ms
  while (!check() && Date.now() < until) await sleep(20)
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer()
    server.unref()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      server.close(() => (typeof address === 'object' && address ? resolve(address.port) : reject(new Error('no port'))))
    })
  })
}
