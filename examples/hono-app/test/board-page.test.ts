/**
 * The board page (`GET /`) and `<attach-field>` in a real browser: Debian's Chromium, driven by
 * playwright-core, against the reference server on a SQLite file and a local folder, with the
 * development secret (the page signs in by itself). Every step leaves a screenshot in
 * examples/hono-app/test-artifacts/board-page/ (gitignored). Photos: each picture shows its ThumbHash
 * placeholder until it has loaded, with width and height from the record's `media` and a srcset of the
 * named variants; a click in the edit view sets the record's focus (PUT) and the cover crops follow it; a
 * HEIC photo shows as a picture (a view that answers JPEG).
 */
import { mkdirSync, readFileSync, rmSync } from 'node:fs'
import { join } from 'node:path'
import type { Browser, BrowserContext, Page } from 'playwright-core'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DEV_SECRET } from '@attach-storage/example-reference'
import { launchChromiumBrowser, sign, start, type Running } from './helpers.js'

const ARTIFACTS = join(import.meta.dirname, '..', 'test-artifacts', 'board-page')

let srv: Running
let shot = 0
/** One Chromium for the file, launched beside the server's start. */
let browser: Browser

/** A new context of the file's Chromium: its own cookies and storage, as on a fresh profile. */
function openBrowser(): Promise<BrowserContext> {
  return browser.newContext({ viewport: { width: 1000, height: 900 }, acceptDownloads: true })
}

const png = (r: number, g: number, b: number, width = 320, height = 200) =>
  sharp({ create: { width, height, channels: 3, background: { r, g, b } } })
    .png()
    .toBuffer()

async function snap(page: Page, name: string) {
  await page.screenshot({ path: join(ARTIFACTS, `${String(++shot).padStart(2, '0')}-${name}.png`), fullPage: true })
}

/** The rows of a field: display name and state, in order. */
const rows = (page: Page, field: string) =>
  page
    .locator(`${field} li`)
    .evaluateAll((lis) => lis.map((li) => `${li.querySelector('.name')?.textContent}:${(li as HTMLElement).dataset.state}`))

/** Watches the page for CSP violations and script errors. */
function watch(page: Page): string[] {
  const problems: string[] = []
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(m.text())
  })
  page.on('pageerror', (e) => problems.push(e.message))
  return problems
}

beforeAll(async () => {
  rmSync(ARTIFACTS, { recursive: true, force: true })
  mkdirSync(ARTIFACTS, { recursive: true })
  const launching = launchChromiumBrowser()
  try {
    srv = await start({ ATTACH_JWT_SECRET: DEV_SECRET })
  } finally {
    browser = await launching
  }
}, 60_000)

afterAll(async () => {
  await browser?.close()
  await srv?.close()
})

describe('the board page', () => {
  it('posts attachments through <attach-field>: input and drop, progress, reorder, remove, filter error, reload, ZIP, edit, delete', async () => {
    const context = await openBrowser()
    const page = await context.newPage()
    const problems = watch(page)
    const res = await page.goto(srv.base)
    expect(res?.status()).toBe(200)
    expect(res?.request().redirectedFrom()).toBeNull()
    expect(res?.headers()['content-security-policy']).toMatch(/script-src 'self'/)
    expect(res?.headers()['content-security-policy']).not.toContain('unsafe-inline')
    await expect.poll(() => page.locator('#auth').textContent()).toContain('development token')
    await page.locator('#post-list li').first().waitFor()
    await snap(page, 'empty-board')

    const files = 'attach-field[name="attachContainer"]'
    const images = 'attach-field[name="images"]'
    await page.fill('#new-post input[name="title"]', 'Holiday photos')
    await page.fill('#new-post textarea[name="body"]', 'Three files and two images.')
    // Through the file button.
    await page.locator(`${files} input[type=file]`).setInputFiles([
      { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('some notes\n') },
      { name: 'report.csv', mimeType: 'text/csv', buffer: Buffer.from('a,b\n1,2\n') },
      { name: 'sea.png', mimeType: 'image/png', buffer: await png(30, 120, 200) },
      { name: 'extra.txt', mimeType: 'text/plain', buffer: Buffer.from('to be removed') },
    ])
    // A synthetic drop of two images (and a text file named .png, which the image category refuses).
    const red = (await png(220, 40, 40)).toString('base64')
    const green = (await png(40, 180, 60)).toString('base64')
    await page.evaluate(
      ({ selector, red, green }) => {
        const bytes = (b64: string) => Uint8Array.from(atob(b64), (c) => c.charCodeAt(0))
        const dt = new DataTransfer()
        dt.items.add(new File([bytes(red)], 'red.png', { type: 'image/png' }))
        dt.items.add(new File([bytes(green)], 'green.png', { type: 'image/png' }))
        dt.items.add(new File(['not an image at all'], 'fake.png', { type: 'image/png' }))
        const target = document.querySelector(selector)!
        target.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }))
        target.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }))
      },
      { selector: images, red, green },
    )
    await expect.poll(() => rows(page, files)).toEqual(['notes.txt:done', 'report.csv:done', 'sea.png:done', 'extra.txt:done'])
    await expect.poll(() => rows(page, images)).toEqual(['red.png:done', 'green.png:done', 'fake.png:failed'])
    expect(await page.locator(`${files} li .status`).allTextContents()).toEqual(Array(4).fill('Uploaded, 100 %'))
    // The refused file shows the image filter's error on its row.
    const refused = page.locator(`${images} li[data-state=failed]`)
    await expect.poll(() => refused.getAttribute('aria-label')).toMatch(/fake\.png, 3 of 3, error: .+/)
    const refusedText = await refused.locator('.error').textContent()
    expect(refusedText).toBeTruthy()
    await snap(page, 'uploaded-with-filter-error')

    // Remove: the refused file and extra.txt.
    await refused.locator('button.remove').click()
    await page.locator(`${files} li`, { hasText: 'extra.txt' }).locator('button.remove').click()
    // Reorder by keyboard only: focus sea.png's row, Alt+ArrowUp twice puts it first.
    await page.locator(`${files} li`, { hasText: 'sea.png' }).focus()
    await page.keyboard.press('Alt+ArrowUp')
    await page.keyboard.press('Alt+ArrowUp')
    expect(await rows(page, files)).toEqual(['sea.png:done', 'notes.txt:done', 'report.csv:done'])
    // The focus stays on the moved row, and the live region says where it went.
    expect(await page.evaluate((s) => document.querySelector(s)!.shadowRoot!.activeElement?.textContent, files)).toContain('sea.png')
    expect(await page.locator(`${files} [role=status]`).textContent()).toBe('sea.png moved to position 1 of 3')
    // Reorder by drag: green.png onto red.png.
    await page.evaluate((selector) => {
      const lis = [...document.querySelector(selector)!.shadowRoot!.querySelectorAll('li')]
      const dt = new DataTransfer()
      lis[1]!.dispatchEvent(new DragEvent('dragstart', { dataTransfer: dt, bubbles: true }))
      lis[0]!.dispatchEvent(new DragEvent('dragover', { dataTransfer: dt, bubbles: true, cancelable: true }))
      lis[0]!.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }))
      lis[1]!.dispatchEvent(new DragEvent('dragend', { dataTransfer: dt, bubbles: true }))
    }, images)
    expect(await rows(page, images)).toEqual(['green.png:done', 'red.png:done'])
    const hidden = JSON.parse(await page.locator(`#new-post ${files} > input[type=hidden][name=attachContainer]`).inputValue())
    expect(hidden.refDomain).toBe('board')
    expect(hidden.default.map((e: { displayName: string }) => e.displayName)).toEqual(['sea.png', 'notes.txt', 'report.csv'])
    await snap(page, 'reordered')

    // Submit: the post's page shows each attachment with its name, in the chosen order.
    await page.click('#new-post button[type=submit]')
    await page.waitForURL(/#\/post\/\d+$/)
    // The post's page shows its pictures first, then the other files, each in its category's order
    // (the domain's categories in order: default, image).
    const order = () => page.locator('#attachments a.view').allTextContents()
    const expected = ['sea.png', 'green.png', 'red.png', 'notes.txt', 'report.csv']
    await expect.poll(order).toEqual(expected)
    expect(await page.locator('#attachments li[data-category=default] a.view').allTextContents()).toEqual([
      'sea.png',
      'notes.txt',
      'report.csv',
    ])
    expect(await page.locator('#attachments img').evaluateAll((imgs) => imgs.map((i) => (i as HTMLImageElement).alt))).toEqual([
      'sea.png',
      'green.png',
      'red.png',
    ])
    // Thumbnails come through the resize route and load.
    await expect
      .poll(() => page.locator('#attachments img').evaluateAll((imgs) => imgs.every((i) => (i as HTMLImageElement).naturalWidth > 0)))
      .toBe(true)
    expect(await page.locator('#attachments img').first().getAttribute('src')).toMatch(/\/assets\/storage\/attach\/view\/\d+\?w=640&h=640$/)
    await snap(page, 'post')
    await page.reload()
    await expect.poll(order).toEqual(expected)
    await snap(page, 'post-after-reload')

    // Download all: a ZIP with every file.
    const [download] = await Promise.all([page.waitForEvent('download'), page.click('#download-all')])
    expect(download.suggestedFilename()).toBe('Holiday photos.zip')
    const zip = readFileSync((await download.path())!)
    expect(zip.subarray(0, 2).toString()).toBe('PK')
    for (const name of expected) expect(zip.includes(Buffer.from(name))).toBe(true)

    // Edit: remove notes.txt, move report.csv first, add a file; save.
    await page.click('#edit-post')
    const editFiles = '#edit-post-form attach-field[category=default]'
    await expect.poll(() => rows(page, editFiles)).toEqual(['sea.png:saved', 'notes.txt:saved', 'report.csv:saved'])
    await page.locator(`${editFiles} li`, { hasText: 'notes.txt' }).locator('button.remove').click()
    await page.locator(`${editFiles} li`, { hasText: 'report.csv' }).locator('button.up').click()
    await page
      .locator(`${editFiles} input[type=file]`)
      .setInputFiles([{ name: 'later.txt', mimeType: 'text/plain', buffer: Buffer.from('added later') }])
    await expect.poll(() => rows(page, editFiles)).toEqual(['report.csv:saved', 'sea.png:saved', 'later.txt:done'])
    await snap(page, 'editing')
    await page.click('#edit-post-form button[type=submit]')
    const edited = ['sea.png', 'green.png', 'red.png', 'report.csv', 'later.txt']
    await expect.poll(order).toEqual(edited)
    await page.reload()
    await expect.poll(order).toEqual(edited)
    // The stored order of the default category: report.csv moved before sea.png.
    const stored = await page.evaluate(async (id) => {
      const { token } = await (await fetch('/page/dev-token')).json()
      const res = await fetch(`/api/storage/attach/board/${id}/default`, { headers: { authorization: `Bearer ${token}` } })
      return ((await res.json()).default as { displayName: string }[]).map((r) => r.displayName)
    }, page.url().split('/').pop()!)
    expect(stored).toEqual(['report.csv', 'sea.png', 'later.txt'])
    await snap(page, 'edited')

    // The board lists the post with a thumbnail.
    await page.click('text=← Board')
    await expect.poll(() => page.locator('#post-list a').allTextContents()).toEqual(['Holiday photos'])
    await expect.poll(() => page.locator('#post-list img').evaluate((i) => (i as HTMLImageElement).naturalWidth)).toBeGreaterThan(0)
    await snap(page, 'board')

    // Paging (10 a page, newest first): ten more posts put the first one on page 2.
    await page.evaluate(async () => {
      const { token } = await (await fetch('/page/dev-token')).json()
      for (let i = 1; i <= 10; i++) {
        await fetch('/board', {
          method: 'POST',
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
          body: JSON.stringify({ title: `Post ${i}` }),
        })
      }
    })
    await page.reload()
    await expect.poll(() => page.locator('#pager a').allTextContents()).toEqual(['1', '2'])
    expect(await page.locator('#post-list a').count()).toBe(10)
    await page.click('#pager a >> text=2')
    await expect.poll(() => page.locator('#post-list a').allTextContents()).toEqual(['Holiday photos'])
    expect(await page.locator('#pager a[aria-current=page]').textContent()).toBe('2')
    await snap(page, 'board-page-2')

    // Delete: the post and its files go.
    await page.locator('#post-list a').click()
    await page.locator('#delete-post').waitFor()
    page.once('dialog', (d) => void d.accept())
    await page.click('#delete-post')
    await page.waitForURL(/#\/$/)
    await expect.poll(() => page.locator('#post-list a').count()).toBe(10)
    expect(await page.locator('#post-list a').allTextContents()).not.toContain('Holiday photos')
    expect(await page.locator('#pager a').allTextContents()).toEqual(['1'])
    const left = await fetch(`${srv.base}/api/storage/attach?refDomain=board&refKeyList=1`, {
      headers: { authorization: `Bearer ${await page.evaluate(async () => (await (await fetch('/page/dev-token')).json()).token)}` },
    })
    expect(await left.json()).toEqual([])
    await snap(page, 'deleted')
    expect(problems).toEqual([])
    await context.close()
  }, 120_000)

  it('asks for a token when the server has its own JWT secret', async () => {
    const own = await start({})
    const context = await openBrowser()
    try {
      const page = await context.newPage()
      const problems = watch(page)
      expect((await page.goto(own.base))?.status()).toBe(200)
      const input = page.getByLabel('Bearer token')
      await input.waitFor()
      expect(await page.locator('#auth').textContent()).not.toContain('development token')
      expect(await page.locator('#post-list').textContent()).toContain('Sign in with a token')
      await snap(page, 'asks-for-a-token')
      await input.fill(await sign('3'))
      await page.click('#auth button[type=submit]')
      await expect.poll(() => page.locator('#post-list li').allTextContents()).toEqual(['No posts yet.'])
      // The refused token request is the one failed load the page expects.
      expect(problems.filter((p) => !p.includes('404'))).toEqual([])
    } finally {
      await context.close()
      await own.close()
    }
  })

  it('uploads 20 files of 5 MB with steady progress and at most 6 requests in flight', async () => {
    const context = await openBrowser()
    // Counts the page's uploads in flight and the progress each reports (the XHR the client opens).
    await context.addInitScript(() => {
      const w = window as unknown as { inflight: number; maxInflight: number; samples: Array<[number, number]> }
      let next = 0
      w.inflight = 0
      w.maxInflight = 0
      w.samples = []
      const send = XMLHttpRequest.prototype.send
      XMLHttpRequest.prototype.send = function (body) {
        w.inflight++
        w.maxInflight = Math.max(w.maxInflight, w.inflight)
        const id = next++
        this.upload.addEventListener('progress', (e) => w.samples.push([id, e.loaded / e.total]))
        this.addEventListener('loadend', () => w.inflight--)
        return send.call(this, body)
      }
    })
    const page = await context.newPage()
    const problems = watch(page)
    await page.goto(srv.base)
    await page.locator('#post-list li').first().waitFor()
    const files = 'attach-field[name="attachContainer"]'
    // The drop, then at once (uploads of 5 MB on loopback take a few milliseconds each): how many rows
    // wait for a slot, and a click on the last one's Cancel while it waits.
    const queuedAtDrop = await page.evaluate(async (selector) => {
      const dt = new DataTransfer()
      for (let i = 0; i < 20; i++) {
        const bytes = new Uint8Array(5 * 1024 * 1024)
        bytes.fill(i)
        dt.items.add(new File([bytes], `big-${String(i).padStart(2, '0')}.bin`, { type: 'application/octet-stream' }))
      }
      const field = document.querySelector(selector)!
      // Every change of the rows' states, as the page makes it: the done count after each one (a poll
      // every 50 ms misses most of them once 5 MB uploads take a few milliseconds).
      const root = field.shadowRoot ?? field
      const w = window as unknown as { doneCounts: number[] }
      w.doneCounts = []
      new MutationObserver(() => {
        w.doneCounts.push(root.querySelectorAll('li[data-state="done"]').length)
      }).observe(root, { subtree: true, childList: true, attributes: true, attributeFilter: ['data-state'] })
      field.dispatchEvent(new DragEvent('drop', { dataTransfer: dt, bubbles: true, cancelable: true }))
      await new Promise((r) => setTimeout(r, 0))
      const rows = [...(field.shadowRoot ?? field).querySelectorAll('li')] as HTMLElement[]
      const queued = rows.filter((li) => li.dataset.state === 'queued').length
      const last = rows.find((li) => li.textContent?.includes('big-19.bin'))
      ;(last?.querySelector('button.cancel') as HTMLButtonElement | null)?.click()
      return queued
    }, files)
    // The last one, cancelled while it waited, shows "Cancelled" with a Retry button.
    const last = page.locator(`${files} li`, { hasText: 'big-19.bin' })
    await expect.poll(() => last.getAttribute('data-state')).toBe('failed')
    expect(await last.locator('.error').textContent()).toBe('Cancelled')
    // While the rest runs: the done count only grows, and some rows wait while others upload.
    const seen: number[] = []
    let sawWaiting = queuedAtDrop > 0
    for (;;) {
      const states = await page.locator(`${files} li`).evaluateAll((lis) => lis.map((li) => (li as HTMLElement).dataset.state))
      seen.push(states.filter((s) => s === 'done').length)
      if (states.includes('queued')) sawWaiting = true
      if (seen.at(-1) === 19) break
      if (seen.length === 3) await snap(page, 'twenty-files-uploading')
      await page.waitForTimeout(50)
    }
    await snap(page, 'nineteen-done-one-cancelled')
    await last.locator('button.retry').click()
    await expect.poll(() => last.getAttribute('data-state')).toBe('done')
    await snap(page, 'twenty-files-done')
    const { maxInflight, samples, doneCounts } = await page.evaluate(() => {
      const w = window as unknown as { maxInflight: number; samples: Array<[number, number]>; doneCounts: number[] }
      return { maxInflight: w.maxInflight, samples: w.samples, doneCounts: w.doneCounts }
    })
    expect(maxInflight).toBeGreaterThan(1)
    expect(maxInflight).toBeLessThanOrEqual(6)
    expect(sawWaiting).toBe(true)
    expect(seen).toEqual([...seen].sort((a, b) => a - b))
    // Files finish one after another (the done count passes through many values), every upload's
    // progress only grows, and each reaches the whole file.
    expect(doneCounts).toEqual([...doneCounts].sort((a, b) => a - b))
    expect(new Set(doneCounts).size).toBeGreaterThanOrEqual(4)
    const byUpload = new Map<number, number[]>()
    for (const [id, f] of samples) byUpload.set(id, [...(byUpload.get(id) ?? []), f])
    const finished = [...byUpload.values()].filter((fs) => fs.at(-1) === 1)
    expect(finished.length).toBe(20)
    for (const fs of byUpload.values()) expect(fs).toEqual([...fs].sort((a, b) => a - b))
    expect(await page.locator(`${files} li .status`).allTextContents()).toEqual(Array(20).fill('Uploaded, 100 %'))
    expect(problems).toEqual([])
    await context.close()
  }, 180_000)
})

const HEIC = join(import.meta.dirname, '..', '..', '..', 'packages', 'attach-storage', 'test', 'fixtures', 'photo.heic')

interface Rec {
  id: number
  displayName: string
  url: string
  fileType: string
  media: { width: number; height: number; placeholder: string } | null
  focus?: { x: number; y: number } | null
  variants?: Record<string, string>
}

const call = async (path: string, init: RequestInit = {}) => {
  const headers = new Headers(init.headers)
  headers.set('authorization', `Bearer ${await sign('1', DEV_SECRET)}`)
  if (typeof init.body === 'string') headers.set('content-type', 'application/json')
  return fetch(srv.base + path, { ...init, headers })
}

/** A post in category `image` with the given files, through the API (uploads, then POST /board). */
async function post(title: string, files: Array<[Buffer, string]>): Promise<{ id: number; images: Rec[] }> {
  const image = []
  for (const [bytes, name] of files) {
    const fd = new FormData()
    fd.set('refDomain', 'board')
    fd.set('refCategory', 'image')
    fd.set('file', new Blob([new Uint8Array(bytes)]), name)
    const res = await call('/api/storage/attach/tmp', { method: 'POST', body: fd })
    expect(res.status).toBe(200)
    image.push({ savedName: (await res.json()).files[0].name, displayName: name })
  }
  const res = await call('/board', { method: 'POST', body: JSON.stringify({ title, attachContainer: { refDomain: 'board', image } }) })
  expect(res.status).toBe(201)
  const body = await res.json()
  return { id: body.id, images: body.attachContainer.image }
}

const images = async (id: number): Promise<Rec[]> => (await (await call(`/api/storage/attach/board/${id}/image`)).json()).image

/** A 1600×1000 JPEG with detail in it (its placeholder is not one flat colour). */
const photo = () =>
  sharp(
    Buffer.from(`<svg xmlns="http://www.w3.org/2000/svg" width="1600" height="1000">
      <defs><linearGradient id="s" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="#3b82f6"/><stop offset="1" stop-color="#fde68a"/></linearGradient></defs>
      <rect width="1600" height="1000" fill="url(#s)"/><rect y="640" width="1600" height="360" fill="#166534"/>
      <circle cx="1300" cy="300" r="120" fill="#f97316"/></svg>`),
  )
    .jpeg({ quality: 80 })
    .toBuffer()

/** Holds back every view of record `id` until `release()`: its placeholder stays on screen. */
async function holdBack(page: Page, id: number) {
  let release!: () => void
  const gate = new Promise<void>((r) => {
    release = r
  })
  await page.route(new RegExp(`/attach/view/${id}(\\?|$)`), async (route) => {
    await gate
    await route.continue().catch(() => {})
  })
  return release
}

describe('photos on the board page', () => {
  let context: BrowserContext
  beforeAll(async () => {
    context = await openBrowser()
  })
  afterAll(() => context?.close())

  it('shows a JPEG with width, height and srcset, its placeholder until it loads, and sets its focus by a click in the edit view', async () => {
    const { id, images: saved } = await post('A photo', [[await photo(), 'sunset.jpg']])
    const rec = saved[0]!
    expect(rec.media).toMatchObject({ width: 1600, height: 1000 })
    // The named variants of the srcset are made in the background, right after the save.
    let made: Rec | undefined
    for (const end = Date.now() + 30_000; Date.now() < end && !made?.variants?.medium; await new Promise((r) => setTimeout(r, 100))) {
      made = (await images(id))[0]
    }
    expect(made?.variants?.medium).toBeDefined()

    const page = await context.newPage()
    const problems: string[] = []
    page.on('pageerror', (e) => problems.push(e.message))
    const release = await holdBack(page, rec.id)
    await page.goto(`${srv.base}/#/post/${id}`)
    const img = page.locator('#attachments img').first()
    await img.waitFor()
    // Before the file has loaded: the placeholder, the size the layout keeps, and the candidates.
    const before = await img.evaluate((i: HTMLImageElement) => ({
      loaded: i.complete && i.naturalWidth > 0,
      placeholder: i.classList.contains('placeholder'),
      background: i.style.backgroundImage,
      width: i.getAttribute('width'),
      height: i.getAttribute('height'),
      shown: i.getBoundingClientRect().height,
      srcset: i.srcset,
      sizes: i.sizes,
      src: i.getAttribute('src'),
    }))
    expect(before.loaded).toBe(false)
    expect(before.placeholder).toBe(true)
    expect(before.background).toMatch(/^url\("data:image\/png;base64,[A-Za-z0-9+/=]+"\)$/)
    expect([before.width, before.height]).toEqual(['640', '400'])
    expect(before.shown).toBeGreaterThan(100) // the box is there before a byte of the file
    expect(before.srcset).toBe(
      `/assets/storage/attach/view/${rec.id}?variant=thumb 320w, /assets/storage/attach/view/${rec.id}?variant=medium 960w, ${made!.url} 1600w`,
    )
    expect(before.sizes).toMatch(/\d+px$/)
    expect(before.src).toBe(`/assets/storage/attach/view/${rec.id}?w=640&h=640`)
    // The post's cover: a crop of the exact box, its placeholder showing too.
    const cover = page.locator('#post-cover')
    expect(await cover.getAttribute('src')).toBe(`/assets/storage/attach/view/${rec.id}?w=800&h=300&fit=cover`)
    expect(await cover.evaluate((i) => i.classList.contains('placeholder'))).toBe(true)
    await page.screenshot({ path: join(ARTIFACTS, 'photos-1-placeholders.png') })
    release()
    await expect.poll(() => img.evaluate((i: HTMLImageElement) => i.complete && i.naturalWidth > 0)).toBe(true)
    expect(await img.evaluate((i) => [i.classList.contains('placeholder'), i.style.backgroundImage])).toEqual([false, ''])
    expect(await img.evaluate((i) => i.getBoundingClientRect().height)).toBeCloseTo(before.shown, 0)

    // The edit view: a click on the picture sets the focus there (PUT), the marker and the crops follow.
    await page.click('#edit-post')
    const item = page.locator(`#focus-list li[data-id="${rec.id}"]`)
    const picked = item.locator('.focus-picture img')
    await expect.poll(() => picked.evaluate((i: HTMLImageElement) => i.complete && i.naturalWidth > 0)).toBe(true)
    const wide = item.locator('img.cover-wide')
    const before1 = await wide.getAttribute('src')
    expect(before1).toBe(`/assets/storage/attach/view/${rec.id}?w=320&h=120&fit=cover`)
    expect(await item.locator('.marker').isHidden()).toBe(true)
    const box = (await picked.boundingBox())!
    await picked.click({ position: { x: box.width * 0.8, y: box.height * 0.3 } })
    await expect.poll(async () => (await images(id))[0]!.focus).toBeTruthy()
    const focus = (await images(id))[0]!.focus!
    expect(focus.x).toBeCloseTo(0.8, 2)
    expect(focus.y).toBeCloseTo(0.3, 2)
    await expect
      .poll(() => wide.getAttribute('src'))
      .toBe(`/assets/storage/attach/view/${rec.id}?w=320&h=120&fit=cover&v=${focus.x},${focus.y}`)
    await expect.poll(() => wide.evaluate((i: HTMLImageElement) => i.complete && i.naturalWidth)).toBe(320)
    expect(await item.locator('[role=status]').textContent()).toBe(`Focus ${focus.x.toFixed(2)}, ${focus.y.toFixed(2)}`)
    const marker = (await item.locator('.marker').boundingBox())!
    expect(marker.x + marker.width / 2 - box.x).toBeCloseTo(box.width * 0.8, -1)
    // The crop the page shows is the server's crop around the new focus: scaled to 320×200, the 120 rows
    // around y = 0.3 (rows 0..119), so the sun (centre 1300, 300 of 1600×1000) crosses its middle row.
    const crop = await (await fetch(srv.base + (await wide.getAttribute('src'))!)).arrayBuffer()
    const { data, info } = await sharp(Buffer.from(crop)).raw().toBuffer({ resolveWithObject: true })
    const orange = (x: number, y: number) => {
      const o = (y * info.width + x) * info.channels
      return data[o]! > 200 && data[o + 1]! < 160 && data[o + 2]! < 80
    }
    let seen = 0
    for (let x = 0; x < info.width; x += 4) if (orange(x, Math.floor(info.height / 2))) seen++
    expect(seen).toBeGreaterThan(0)
    await page.screenshot({ path: join(ARTIFACTS, 'photos-2-focus.png') })
    expect(problems).toEqual([])
    await page.close()
  }, 60_000)

  it('shows a HEIC photo as a picture whose address answers JPEG', async () => {
    const { id, images: saved } = await post('An iPhone photo', [[readFileSync(HEIC), 'IMG_0001.HEIC']])
    const rec = saved[0]!
    expect(rec.fileType).toBe('image/heic')
    const page = await context.newPage()
    await page.goto(`${srv.base}/#/post/${id}`)
    const img = page.locator('#attachments img').first()
    await expect.poll(() => img.evaluate((i: HTMLImageElement) => i.complete && i.naturalWidth > 0), { timeout: 20_000 }).toBe(true)
    const src = (await img.getAttribute('src'))!
    expect(src).not.toContain('/download/')
    const res = await fetch(srv.base + src)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('image/jpeg')
    for (const candidate of (await img.getAttribute('srcset'))?.split(', ') ?? []) expect(candidate).not.toContain('/download/')
    await page.screenshot({ path: join(ARTIFACTS, 'photos-3-heic.png') })
    await page.close()
  }, 60_000)
})
