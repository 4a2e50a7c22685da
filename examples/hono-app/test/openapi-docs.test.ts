/**
 * The reference server's OpenAPI document and its page: both without authentication; the document valid
 * by Redocly's validator, with the board paths, and the board's answers valid by it; the page rendered
 * by Debian's Chromium with every request it makes going to this server.
 */
import { mkdir, mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, resolve } from 'node:path'
import type { BrowserContext } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { answerChecker, redoclyProblems } from '../../../packages/attach-storage/src/http/openapi-check.js'
import { launchChromium, type Running, sign, start } from './helpers.js'

/** Where the page's screenshot goes (not committed). */
const ARTIFACTS = resolve(import.meta.dirname, '../../../test-artifacts')

describe('GET /api/storage/openapi.json and /api/storage/docs', () => {
  let srv: Running
  beforeAll(async () => {
    srv = await start({})
  })
  afterAll(() => srv?.close())

  it('answers the document without authentication: valid, with the board paths, and the board answers match it', async () => {
    const res = await fetch(`${srv.base}/api/storage/openapi.json`)
    expect(res.status).toBe(200)
    const doc = await res.json()
    expect(doc.openapi).toBe('3.1.0')
    expect(Object.keys(doc.paths)).toEqual(
      expect.arrayContaining(['/board', '/board/{id}', '/api/storage/attach/tmp', '/assets/storage/attach/{action}/{id}']),
    )
    expect((await redoclyProblems(doc)).filter((p) => p.severity === 'error')).toEqual([])
    expect(JSON.stringify(doc)).not.toContain('reference-server-test-secret')

    const checker = answerChecker(doc)
    const auth = { authorization: `Bearer ${await sign('5')}` }
    const check = async (method: string, path: string, init: RequestInit = {}) => {
      const r = await fetch(`${srv.base}${path}`, { method, ...init, headers: { ...auth, ...init.headers } })
      checker.check(method, path.split('?')[0]!, r.status, await r.json())
      return r.status
    }
    const created = await fetch(`${srv.base}/board`, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json' },
      body: JSON.stringify({ title: 'Hello', body: 'text', attachContainer: { refDomain: 'board' } }),
    })
    const post = await created.json()
    checker.check('POST', '/board', created.status, post)
    expect(created.status).toBe(201)
    expect(await check('GET', `/board/${post.id}`)).toBe(200)
    expect(await check('GET', '/board?currentPage=1&dataPerPage=10')).toBe(200)
    expect(await check('GET', '/board/999999')).toBe(404)
    expect(await check('POST', '/board', { body: '{"title": 1}', headers: { 'content-type': 'application/json' } })).toBe(400)
    expect(await check('GET', '/api/storage/config')).toBe(200)
    // Without a token: the document and the page answer, the JSON group does not.
    expect((await fetch(`${srv.base}/api/storage/config`)).status).toBe(401)
    const page = await fetch(`${srv.base}/api/storage/docs`)
    expect(page.status).toBe(200)
    expect(page.headers.get('content-type')).toMatch(/^text\/html/)
    expect(page.headers.get('content-security-policy')).toMatch(/default-src 'none'/)
    expect((await fetch(`${srv.base}/api/storage/docs/swagger-ui-bundle.js`)).status).toBe(200)
    expect((await fetch(`${srv.base}/api/storage/docs/package.json`)).status).toBe(404)
    expect((await fetch(`${srv.base}/api/storage/docs/..%2Fpackage.json`)).status).toBe(404)
  })

  describe('the page in Chromium', () => {
    let browser: BrowserContext
    let profile: string
    beforeAll(async () => {
      profile = await mkdtemp(join(tmpdir(), 'attach-docs-chromium-'))
      browser = await launchChromium(profile)
    }, 60_000)
    afterAll(async () => {
      await browser?.close()
      if (profile) await rm(profile, { recursive: true, force: true })
    })

    it('renders the operations, loading nothing from outside the server', async () => {
      const requested: string[] = []
      browser.on('request', (r) => requested.push(r.url()))
      const failed: string[] = []
      const page = await browser.newPage()
      page.on('pageerror', (e) => failed.push(e.message))
      await page.goto(`${srv.base}/api/storage/docs`)
      await page.waitForSelector('.opblock', { timeout: 30_000 })
      const summaries = await page.locator('.opblock-summary-description').allTextContents()
      expect(summaries).toEqual(
        expect.arrayContaining([
          'Temporary upload (step 1 of the two-step save)',
          'Create a post and commit its attachments in the same request',
        ]),
      )
      expect(await page.locator('.opblock').count()).toBeGreaterThan(20)
      await mkdir(ARTIFACTS, { recursive: true })
      await page.screenshot({ path: join(ARTIFACTS, 'openapi-docs.png'), fullPage: false })
      expect(failed).toEqual([])
      expect(requested.length).toBeGreaterThan(0)
      const outside = requested.filter((u) => !u.startsWith(`${srv.base}/`) && !u.startsWith('data:'))
      expect(outside).toEqual([])
      await page.close()
    }, 60_000)
  })
})
