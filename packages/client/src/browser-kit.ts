/**
 * For this package's browser tests (not shipped): a page with one `<attach-field>` loading the browser
 * bundle (src/browser.ts, built as build-browser.mjs builds it), served beside attach-storage's handlers
 * ({@link startTestServer}) under the reference server's Content-Security-Policy (nothing inline), and Debian's Chromium driven by playwright-core with the flags the
 * reference server's browser tests use.
 */
import { mkdtempSync, rmSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import type { AttachmentView } from 'attach-storage'
import { createNodeHandler } from 'attach-storage/node'
import { build } from 'esbuild'
import { type BrowserContext, chromium, type Page } from 'playwright-core'
import { CHROMIUM_ARGS, CHROMIUM_PATH } from '../../../scripts/chromium.mjs'
import { startTestServer, type TestServer } from './test-kit.js'

/** Where the browser tests leave their screenshots (gitignored). */
export const ARTIFACTS = fileURLToPath(new URL('../test-artifacts/', import.meta.url))

export interface FieldPages {
  srv: TestServer
  /** What the page reported: console errors (a CSP violation among them) and uncaught exceptions. */
  problems: string[]
  /** Opens the page (a field `name="attachContainer" domain="demo" category="photo" accept="image/*"`, signed in). */
  open(): Promise<Page>
  close(): Promise<void>
}

const PAGE = `<!doctype html><html><head><meta charset="utf-8"><title>field</title></head>
<body>
<form><attach-field name="attachContainer" domain="demo" category="photo" accept="image/*"></attach-field></form>
<script type="module" src="/page.js"></script></body></html>`

/** The page's script: hands the field a client with the token. */
const SCRIPT = (token: string) => `import { AttachClient } from '/bundle.js'
document.querySelector('attach-field').client = new AttachClient({ token: ${JSON.stringify(token)} })
window.ready = true`

/** The reference server's policy: nothing inline, pictures from the server, blob: and data: URLs. */
const CSP = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:"

/** The server (category `photo` of domain `demo`, an image filter, or the given categories), the page and a browser. */
export async function startFieldPages(categories: Record<string, object> = { photo: { filters: ['image'] } }): Promise<FieldPages> {
  const srv = await startTestServer(categories)
  const bundle = await build({
    entryPoints: [fileURLToPath(new URL('./browser.ts', import.meta.url))],
    bundle: true,
    format: 'esm',
    target: 'es2022',
    platform: 'browser',
    write: false,
  })
  const js = bundle.outputFiles[0]!.contents
  const attach = createNodeHandler(srv.handler.fetch)
  const http = createServer((req, res) => {
    if (req.url === '/') res.writeHead(200, { 'content-type': 'text/html; charset=utf-8', 'content-security-policy': CSP }).end(PAGE)
    else if (req.url === '/page.js') res.writeHead(200, { 'content-type': 'text/javascript' }).end(SCRIPT(srv.token))
    else if (req.url === '/favicon.ico') res.writeHead(204).end()
    else if (req.url === '/bundle.js') res.writeHead(200, { 'content-type': 'text/javascript' }).end(js)
    else void attach(req, res)
  })
  await new Promise<void>((resolve) => http.listen(0, '127.0.0.1', resolve))
  const base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`
  const profile = mkdtempSync(join(tmpdir(), 'attach-client-chromium-'))
  let context: BrowserContext | undefined
  try {
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM_PATH,
      headless: true,
      viewport: { width: 560, height: 420 },
      deviceScaleFactor: 2,
      args: [...CHROMIUM_ARGS],
    })
  } catch (err) {
    http.close()
    await srv.close()
    throw err
  }
  const browser = context
  const problems: string[] = []
  return {
    srv,
    problems,
    async open() {
      const page = await browser.newPage()
      page.on('console', (m) => {
        if (m.type() === 'error') problems.push(m.text())
      })
      page.on('pageerror', (e) => problems.push(e.message))
      await page.goto(base)
      await page.waitForFunction(() => (window as unknown as { ready?: boolean }).ready === true)
      return page
    },
    async close() {
      await browser.close()
      await new Promise((resolve) => http.close(resolve))
      await srv.close()
      rmSync(profile, { recursive: true, force: true })
    },
  }
}

/** Calls the field's `setSaved(records)`. */
export const setSaved = (page: Page, records: AttachmentView[]) =>
  page.locator('attach-field').evaluate((field, saved) => (field as unknown as { setSaved(r: unknown[]): void }).setSaved(saved), records)

/** Each row's picture: its tag, its text (an icon's), whether it has loaded, its placeholder background's start, its natural width. */
export const pictures = (page: Page) =>
  page.locator('attach-field li').evaluateAll((lis) =>
    lis.map((li) => {
      const el = li.firstElementChild as HTMLElement
      const img = el instanceof HTMLImageElement ? el : undefined
      return {
        tag: el.tagName.toLowerCase(),
        text: img ? '' : el.textContent,
        loaded: img ? 'loaded' in img.dataset : false,
        background: img?.style.backgroundImage.slice(0, 27) ?? '',
        naturalWidth: img?.naturalWidth ?? 0,
      }
    }),
  )
