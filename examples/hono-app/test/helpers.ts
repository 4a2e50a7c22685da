/** Shared set-up of the reference-server tests: a real listening server, tokens, databases. */
import type { Dirent } from 'node:fs'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { serve, type ServerType } from '@hono/node-server'
import { build } from 'esbuild'
import { CHROMIUM_ARGS, CHROMIUM_PATH } from '../../../scripts/chromium.mjs'
import { SignJWT } from 'jose'
import { openTestDatabase } from '../../../test/databases.js'
import { createReferenceApp, type ReferenceApp } from '../src/app.js'

const here = dirname(fileURLToPath(import.meta.url))

export const SECRET = 'reference-server-test-secret-123'

export const sign = (sub: string, secret = SECRET) =>
  new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(sub).setExpirationTime('1h').sign(new TextEncoder().encode(secret))

export async function walk(dir: string): Promise<string[]> {
  const out: string[] = []
  let entries: Dirent[]
  try {
    entries = await readdir(dir, { withFileTypes: true, recursive: true })
  } catch {
    return out
  }
  for (const e of entries) if (e.isFile()) out.push(join(e.parentPath ?? (e as any).path, e.name))
  return out
}

export interface Running {
  ref: ReferenceApp
  server: ServerType
  base: string
  dataDir: string
  close(): Promise<void>
}

export async function start(env: Record<string, string>, logged?: string[]): Promise<Running> {
  const dataDir = await mkdtemp(join(tmpdir(), 'attach-ref-'))
  const record = (...args: unknown[]) => {
    logged?.push(args.map((a) => (a instanceof Error ? `${a.message} ${JSON.stringify(a)} ${String(a.cause ?? '')}` : String(a))).join(' '))
  }
  const quiet = { info: record, warn: record, error: record }
  const ref = await createReferenceApp({ ATTACH_DATA_DIR: dataDir, ATTACH_JWT_SECRET: SECRET, ...env }, quiet)
  const server = serve({ fetch: ref.app.fetch, port: 0, hostname: '127.0.0.1' })
  await new Promise<void>((r) => server.once('listening', () => r()))
  const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
  return {
    ref,
    server,
    base,
    dataDir,
    async close() {
      await new Promise<void>((r) => server.close(() => r()))
      await ref.close()
      await rm(dataDir, { recursive: true, force: true })
    },
  }
}

/** A fresh PostgreSQL database (test/databases.ts) for a server under test to open by URL. */
export async function pgDatabase(): Promise<{ url: string; drop(): Promise<void> }> {
  const t = await openTestDatabase('postgres')
  await t.db.destroy() // the server under test opens its own connections
  return { url: t.location, drop: () => t.cleanup() }
}

/**
 * playwright-core, imported on the first launch: importing it takes about a second, which the files of
 * this folder that start no browser do not pay.
 */
const playwright = () => import('playwright-core')

/** Debian's Chromium, headless, for the browser tests (playwright-core drives it; nothing is downloaded). */
export async function launchChromium(
  profile: string,
  options: { viewport?: { width: number; height: number }; acceptDownloads?: boolean } = {},
) {
  const { chromium } = await playwright()
  return chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: [...CHROMIUM_ARGS],
    ...options,
  })
}

/**
 * Debian's Chromium, headless, without a profile folder: one browser whose contexts
 * (`browser.newContext()`) each start with empty storage, as a fresh profile does, for a file whose
 * tests each want a new browser (a launch costs seconds; a context, milliseconds).
 */
export async function launchChromiumBrowser() {
  const { chromium } = await playwright()
  return chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: [...CHROMIUM_ARGS] })
}

/**
 * The reference server (src/server.ts) bundled into one file with esbuild, workspace packages inlined
 * from source and other packages left to node_modules: a child process restarts it in milliseconds.
 */
export async function bundleServer(outfile: string): Promise<void> {
  await build({
    entryPoints: [join(here, '..', 'src', 'server.ts')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node20',
    outfile,
    conditions: ['@attach-storage/source'],
    logLevel: 'error',
    banner: { js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);" },
    plugins: [
      {
        name: 'workspace-only',
        setup(b) {
          b.onResolve({ filter: /^[^./]/ }, (a) =>
            /^(attach-storage|@attach-storage\/)/.test(a.path) ? undefined : { path: a.path, external: true },
          )
        },
      },
    ],
  })
}
