/**
 * Test-only: Azurite's blob service in memory on 127.0.0.1 (a free port), as the store tests and the
 * reference-server tests start it. Not shipped: the package builds only index.ts.
 */
import { type ChildProcess, spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { connect, createServer as createNetServer } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'

/** The well-known development account of the Azure storage emulators. */
export const DEV_ACCOUNT = 'devstoreaccount1'
export const DEV_KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='

/** A connection string of the development account on a local Azurite. */
export const connectionString = (port: number): string =>
  `DefaultEndpointsProtocol=http;AccountName=${DEV_ACCOUNT};AccountKey=${DEV_KEY};BlobEndpoint=http://127.0.0.1:${port}/${DEV_ACCOUNT};`

export interface Azurite {
  port: number
  stop(): Promise<void>
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createNetServer()
    srv.on('error', reject)
    srv.listen(0, '127.0.0.1', () => {
      const address = srv.address()
      const port = typeof address === 'object' && address ? address.port : 0
      srv.close(() => resolve(port))
    })
  })
}

export const canConnect = (port: number): Promise<boolean> =>
  new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => {
      socket.destroy()
      resolve(true)
    })
    socket.once('error', () => resolve(false))
  })

export async function startAzurite(): Promise<Azurite> {
  const main = join(dirname(createRequire(import.meta.url).resolve('azurite/package.json')), 'dist/src/blob/main.js')
  const location = await mkdtemp(join(tmpdir(), 'azurite-'))
  const port = await freePort()
  // prettier-ignore
  const child: ChildProcess = spawn(
    process.execPath,
    [
      main,
      '--blobHost',
      '127.0.0.1',
      '--blobPort',
      String(port),
      '--inMemoryPersistence',
      '--extentMemoryLimit',
      '1024',
      '--skipApiVersionCheck',
      '--disableTelemetry',
      '--loose',
      '--silent',
    ],
    { cwd: location, stdio: ['ignore', 'ignore', 'pipe'] },
  ) // in memory; the empty cwd catches any stray file
  let stderr = ''
  child.stderr?.on('data', (d: Buffer) => {
    stderr += d.toString()
  })
  let exited = false
  const exit = new Promise<void>((resolve) => child.once('exit', () => resolve()))
  void exit.then(() => {
    exited = true
  })
  const deadline = Date.now() + 30_000
  while (!(await canConnect(port))) {
    if (exited) throw new Error(`Azurite exited at start: ${stderr}`)
    if (Date.now() > deadline) {
      child.kill('SIGKILL')
      throw new Error(`Azurite did not listen on 127.0.0.1:${port} within 30 s: ${stderr}`)
    }
    await new Promise((r) => setTimeout(r, 100))
  }
  return {
    port,
    async stop() {
      if (!exited) {
        child.kill('SIGTERM')
        const timer = setTimeout(() => child.kill('SIGKILL'), 5_000)
        await exit
        clearTimeout(timer)
      }
      await rm(location, { recursive: true, force: true })
    },
  }
}
