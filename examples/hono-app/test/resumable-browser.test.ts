/**
 * Resumable uploads from a browser, with a client nobody here wrote: a page on another origin bundles
 * Uppy with @uppy/tus, uploads two files to the reference server (CORS through ATTACH_CORS_ORIGINS) in
 * Debian's Chromium, driven by playwright-core, and commits them through the confirmed save.
 */
import { createHash } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { build } from 'esbuild'
import type { BrowserContext } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { launchChromium, type Running, sign, start } from './helpers.js'

const here = dirname(fileURLToPath(import.meta.url))

/** The page's script: Uppy and its tus plugin, and one function the test calls. */
const PAGE_SCRIPT = `
import Uppy from '@uppy/core'
import Tus from '@uppy/tus'

const hex = async (blob) =>
  [...new Uint8Array(await crypto.subtle.digest('SHA-256', await blob.arrayBuffer()))].map((b) => b.toString(16).padStart(2, '0')).join('')

window.uploadAndSave = async ({ server, token, refKey }) => {
  const uppy = new Uppy({ meta: { refDomain: 'demo' } })
  uppy.use(Tus, {
    endpoint: server + '/api/storage/attach/tus',
    headers: { authorization: 'Bearer ' + token },
    chunkSize: 256 * 1024,
    retryDelays: [0, 500],
  })
  const big = new Uint8Array(700 * 1024)
  for (let i = 0; i < big.length; i += 65536) crypto.getRandomValues(big.subarray(i, i + 65536))
  const files = [
    { name: 'one.bin', type: 'application/octet-stream', data: new Blob([big]) },
    { name: 'two.txt', type: 'text/plain', data: new Blob(['two files through Uppy and tus']) },
  ]
  for (const f of files) uppy.addFile({ ...f, source: 'test' })
  const result = await uppy.upload()
  const uploaded = result.successful.map((f) => ({ name: f.name, url: f.response.uploadURL }))
  const entries = uploaded.map((u) => ({ savedName: u.url.split('/').pop() }))
  const res = await fetch(server + '/api/storage/attach/demo/' + refKey, {
    method: 'POST',
    headers: { authorization: 'Bearer ' + token, 'content-type': 'application/json' },
    body: JSON.stringify({ default: entries }),
  })
  return {
    failed: result.failed.map((f) => String(f.error)),
    uploaded,
    status: res.status,
    saved: await res.json(),
    sha256: Object.fromEntries(await Promise.all(files.map(async (f) => [f.name, await hex(f.data)]))),
  }
}
`

describe('Uppy with @uppy/tus in Chromium', () => {
  let page: Server
  let pageOrigin: string
  let srv: Running
  let browser: BrowserContext
  let profile: string

  beforeAll(async () => {
    const bundled = await build({
      stdin: { contents: PAGE_SCRIPT, resolveDir: here, loader: 'js' },
      bundle: true,
      format: 'esm',
      platform: 'browser',
      target: 'es2022',
      write: false,
      logLevel: 'error',
    })
    const js = bundled.outputFiles[0]!.contents
    page = createServer((req, res) => {
      if (req.url === '/app.js') {
        res.writeHead(200, { 'content-type': 'text/javascript' }).end(js)
      } else {
        res
          .writeHead(200, { 'content-type': 'text/html; charset=utf-8' })
          .end('<!doctype html><title>uppy</title><script type="module" src="/app.js"></script>')
      }
    })
    await new Promise<void>((r) => page.listen(0, '127.0.0.1', () => r()))
    pageOrigin = `http://127.0.0.1:${(page.address() as AddressInfo).port}`
    srv = await start({ ATTACH_CORS_ORIGINS: pageOrigin })
    profile = await mkdtemp(join(tmpdir(), 'attach-chromium-'))
    browser = await launchChromium(profile)
  }, 60_000)

  afterAll(async () => {
    await browser?.close()
    await srv?.close()
    await new Promise<void>((r) => (page ? page.close(() => r()) : r()))
    if (profile) await rm(profile, { recursive: true, force: true })
  })

  it('uploads two files in tus chunks and the page commits them through the confirmed save', async () => {
    const tab = await browser.newPage()
    await tab.goto(pageOrigin)
    await tab.waitForFunction(() => typeof (window as any).uploadAndSave === 'function')
    const token = await sign('7')
    const out = await tab.evaluate((args) => (window as any).uploadAndSave(args), { server: srv.base, token, refKey: 'uppy1' })
    expect(out.failed).toEqual([])
    expect(out.uploaded.map((u: { url: string }) => u.url)).toEqual([
      expect.stringMatching(/\/api\/storage\/attach\/tus\/[0-9a-f-]{36}\.bin$/),
      expect.stringMatching(/\/api\/storage\/attach\/tus\/[0-9a-f-]{36}\.txt$/),
    ])
    expect(out.status).toBe(200)
    const records = out.saved.attachList as Array<{ id: number; displayName: string; fileSize: number }>
    expect(records.map((r) => [r.displayName, r.fileSize])).toEqual([
      ['one.bin', 700 * 1024],
      ['two.txt', 30],
    ])
    for (const r of records) {
      const res = await fetch(`${srv.base}/assets/storage/attach/download/${r.id}`)
      const sha = createHash('sha256')
        .update(Buffer.from(await res.arrayBuffer()))
        .digest('hex')
      expect(sha).toBe(out.sha256[r.displayName])
    }
  }, 60_000)
})
