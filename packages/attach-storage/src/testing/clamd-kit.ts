/**
 * A throwaway clamd for tests (Debian's clamav-daemon, which test/global-setup.ts installs when missing):
 * its own signature database of one body signature, a TCP port on 127.0.0.1 and a Unix socket, started in
 * the foreground and stopped at the end. No signature download is involved.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { existsSync } from 'node:fs'
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { clamdPing } from '../media/clamd.js'

/** The text the test signature matches, anywhere in a file. */
export const TEST_VIRUS_MARKER = 'ATTACH-STORAGE-TEST-VIRUS-MARKER'
/** The name clamd reports for it (`.UNOFFICIAL`: a database of one's own). */
export const TEST_SIGNATURE = 'AttachStorage.Test.Marker-1.UNOFFICIAL'

/** A running clamd: its addresses and how to stop it. */
export interface TestClamd {
  tcp: string
  unix: string
  /** The port of `tcp`. */
  port: number
  /** The config file (for `clamdscan -c`). */
  configFile: string
  stop(): Promise<void>
}

/** The clamd binary, where Debian puts it. */
export const CLAMD_BIN = ['/usr/sbin/clamd', '/usr/bin/clamd'].find((p) => existsSync(p))

/** A TCP port nothing listens on right now. */
export async function freePort(): Promise<number> {
  const server = createServer()
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const port = (server.address() as { port: number }).port
  await new Promise((resolve) => server.close(resolve))
  return port
}

/** Starts clamd with the test signature; resolves once it answers PING (about a second). */
export async function startClamd(
  /** `config`: more clamd.conf lines, e.g. `MaxFileSize 400M` (a file over clamd's limits is not read in full). */
  options: { streamMaxLength?: string; config?: string[] } = {},
): Promise<TestClamd> {
  if (!CLAMD_BIN) throw new Error('clamd is not installed (Debian: apt-get install clamav-daemon; test/global-setup.ts installs it)')
  const dir = await mkdtemp(join(tmpdir(), 'attach-clamd-'))
  const db = join(dir, 'db')
  await mkdir(db)
  const hex = Buffer.from(TEST_VIRUS_MARKER).toString('hex')
  await writeFile(join(db, 'test.ndb'), `AttachStorage.Test.Marker-1:0:*:${hex}\n`)
  const port = await freePort()
  const unixPath = join(dir, 'clamd.sock')
  const configFile = join(dir, 'clamd.conf')
  const log = join(dir, 'clamd.log')
  await writeFile(
    configFile,
    [
      'Foreground yes',
      `DatabaseDirectory ${db}`,
      `TCPSocket ${port}`,
      'TCPAddr 127.0.0.1',
      `LocalSocket ${unixPath}`,
      `LogFile ${log}`,
      `PidFile ${join(dir, 'clamd.pid')}`,
      `StreamMaxLength ${options.streamMaxLength ?? '100M'}`,
      'Bytecode no',
      'SelfCheck 0',
      ...(options.config ?? []),
      '',
    ].join('\n'),
  )
  const child: ChildProcess = spawn(CLAMD_BIN, ['-c', configFile], { stdio: 'ignore' })
  const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  let gone = false
  void exited.then(() => {
    gone = true
  })
  const tcp = `tcp://127.0.0.1:${port}`
  const stop = async () => {
    if (!gone) {
      child.kill('SIGTERM')
      const killer = setTimeout(() => child.kill('SIGKILL'), 5000)
      await exited
      clearTimeout(killer)
    }
    await rm(dir, { recursive: true, force: true })
  }
  const deadline = Date.now() + 30_000
  for (;;) {
    try {
      await clamdPing({ address: tcp, connectTimeoutMs: 500, replyTimeoutMs: 2000 })
      break
    } catch (err) {
      if (gone || Date.now() > deadline) {
        const tail = await readFile(log, 'utf8').catch(() => '')
        await stop()
        throw new Error(`clamd did not start: ${(err as Error).message}\n${tail.slice(-2000)}`)
      }
      await new Promise((r) => setTimeout(r, 100))
    }
  }
  return { tcp, unix: `unix:${unixPath}`, port, configFile, stop }
}
