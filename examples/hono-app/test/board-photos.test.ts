/**
 * Photos on the board page, in Debian's Chromium (playwright-core) against the reference server on a SQLite
 * file and a local folder: each picture shows its ThumbHash placeholder until it has loaded, with width and
 * height from the record's `media` and a srcset of the named variants; a click in the edit view sets the
 * record's focus (PUT) and the cover crops follow it; a HEIC photo shows as a picture (a view that answers
 * JPEG). Screenshots go to examples/hono-app/test-artifacts/board-photos/ (gitignored).
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { BrowserContext, Page } from 'playwright-core'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DEV_SECRET } from '@attach-storage/example-reference'
import { launchChromium, sign, start, type Running } from './helpers.js'

const ARTIFACTS = join(import.meta.dirname, '..', 'test-artifacts', 'board-photos')
const HEIC = join(import.meta.dirname, '..', '..', '..', 'packages', 'attach-storage', 'test', 'fixtures', 'photo.heic')

let srv: Running
let context: BrowserContext
let profile: string
let token: string

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
  headers.set('authorization', `Bearer ${token}`)
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

beforeAll(async () => {
  rmSync(ARTIFACTS, { recursive: true, force: true })
  mkdirSync(ARTIFACTS, { recursive: true })
  srv = await start({ ATTACH_JWT_SECRET: DEV_SECRET })
  token = await sign('1', DEV_SECRET)
  profile = mkdtempSync(join(tmpdir(), 'attach-chromium-'))
  context = await launchChromium(profile, { viewport: { width: 1000, height: 900 } })
}, 60_000)

afterAll(async () => {
  await context?.close()
  await srv?.close()
  if (profile) rmSync(profile, { recursive: true, force: true })
})

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
    await page.screenshot({ path: join(ARTIFACTS, '01-placeholders.png') })
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
    await page.screenshot({ path: join(ARTIFACTS, '02-focus.png') })
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
    await page.screenshot({ path: join(ARTIFACTS, '03-heic.png') })
    await page.close()
  }, 60_000)
})
