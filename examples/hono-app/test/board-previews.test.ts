/**
 * PDFs and videos on the board page in a real browser (Debian's Chromium, playwright-core), against the
 * reference server with previews on (Debian's ffmpeg and poppler, which test/global-setup.ts installs): a
 * post's video and PDF show their preview images with the video's length and the PDF's page count, a
 * neutral box while a preview is being made (the page looks the post up again until it is made), the
 * video plays in place and the PDF opens; the board's list shows the video's preview for a post without
 * pictures. Screenshots go to examples/hono-app/test-artifacts/board-previews/ (gitignored).
 */
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { BrowserContext } from 'playwright-core'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { DEV_SECRET } from '@attach-storage/example-reference'
import { pdfBytes } from '../../../packages/attach-storage/src/testing/pdf-kit.js'
import { makeVideo } from '../../../packages/attach-storage/src/testing/video-kit.js'
import { launchChromium, type Running, sign, start } from './helpers.js'

const ARTIFACTS = join(import.meta.dirname, '..', 'test-artifacts', 'board-previews')

let srv: Running
let context: BrowserContext
let dir: string
beforeAll(async () => {
  rmSync(ARTIFACTS, { recursive: true, force: true })
  mkdirSync(ARTIFACTS, { recursive: true })
  dir = mkdtempSync(join(tmpdir(), 'attach-board-previews-'))
  srv = await start({ ATTACH_JWT_SECRET: DEV_SECRET })
  context = await launchChromium(join(dir, 'profile'), { viewport: { width: 1000, height: 900 } })
}, 60_000)
afterAll(async () => {
  await context?.close()
  await srv?.close()
  rmSync(dir, { recursive: true, force: true })
})

const call = async (path: string, init: RequestInit = {}) => {
  const headers = new Headers(init.headers)
  headers.set('authorization', `Bearer ${await sign('1', DEV_SECRET)}`)
  if (typeof init.body === 'string') headers.set('content-type', 'application/json')
  return fetch(srv.base + path, { ...init, headers })
}

it('shows a post’s video and PDF as previews with the length and the pages; the video plays, the PDF opens', async () => {
  const video = await readFile(await makeVideo(join(dir, 'clip.mp4'), { seconds: 3 }))
  const files: Array<[Uint8Array<ArrayBuffer>, string]> = [
    [new Uint8Array(video), 'clip.mp4'],
    [new Uint8Array(pdfBytes({ pages: 3 })), 'report.pdf'],
  ]
  const entries = []
  for (const [bytes, name] of files) {
    const fd = new FormData()
    fd.set('refDomain', 'board')
    fd.set('refCategory', 'default')
    fd.set('file', new Blob([bytes]), name)
    const res = await call('/api/storage/attach/tmp', { method: 'POST', body: fd })
    expect(res.status).toBe(200)
    entries.push({ savedName: (await res.json()).files[0].name, displayName: name })
  }
  const res = await call('/board', {
    method: 'POST',
    body: JSON.stringify({ title: 'Ferry', body: 'A clip and the timetable.', attachContainer: { refDomain: 'board', default: entries } }),
  })
  expect(res.status).toBe(201)
  const post = await res.json()
  const [clip, report] = post.attachContainer.default as Array<{ id: number; preview?: string }>
  expect([clip!.preview, report!.preview]).toEqual(['pending', 'pending'])

  const page = await context.newPage()
  const problems: string[] = []
  page.on('console', (m) => {
    if (m.type() === 'error') problems.push(m.text())
  })
  page.on('pageerror', (e) => problems.push(e.message))
  const lookups: string[] = []
  page.on('request', (r) => {
    if (r.url().endsWith(`/api/storage/attach/board/${post.id}`)) lookups.push(r.url())
  })
  await page.goto(`${srv.base}/#/post/${post.id}`)
  await page.locator('#attachments li').first().waitFor()
  const firstStates = await page.locator('#attachments li').evaluateAll((lis) => lis.map((li) => (li as HTMLElement).dataset.preview))
  if (firstStates.includes('pending')) {
    // Caught while a preview is being made: a neutral box naming the kind of file.
    expect(await page.locator('#attachments li[data-preview=pending] .preview.pending .kind').first().textContent()).toMatch(
      /^(VIDEO|PDF)$/,
    )
    await page.locator('#post-view').screenshot({ path: join(ARTIFACTS, 'pending.png') })
  }
  // The page looks the post up again until both are made; no reload.
  const tiles = () =>
    page.locator('#attachments li').evaluateAll((lis) =>
      lis.map((li) => {
        const img = li.querySelector<HTMLImageElement>('.preview img')
        return {
          name: li.querySelector('a.view')?.textContent,
          preview: (li as HTMLElement).dataset.preview,
          loaded: !!img && img.complete && img.naturalWidth > 0,
          badge: li.querySelector('.badge')?.textContent,
        }
      }),
    )
  await expect.poll(tiles, { timeout: 60_000 }).toEqual([
    { name: 'clip.mp4', preview: 'made', loaded: true, badge: '0:03' },
    { name: 'report.pdf', preview: 'made', loaded: true, badge: '3 pages' },
  ])
  if (firstStates.includes('pending')) expect(lookups.length).toBeGreaterThan(0)
  // The preview image is the server's JPEG of the file (a resize of it, or the preview itself).
  const shown = await page.locator('#attachments .preview img').evaluateAll((imgs) => imgs.map((i) => (i as HTMLImageElement).currentSrc))
  for (const [i, src] of shown.entries()) {
    const answer = await fetch(src)
    expect(answer.status).toBe(200)
    expect(answer.headers.get('content-type')).toBe('image/jpeg')
    expect(src).toContain(`/attach/view/${[clip, report][i]!.id}`)
  }
  // The video's frame keeps its shape: width and height from its media.
  expect(
    await page
      .locator('#attachments li')
      .first()
      .locator('img')
      .evaluate((i: HTMLImageElement) => [i.width, i.height].join('x')),
  ).not.toBe('0x0')
  await page.locator('#post-view').screenshot({ path: join(ARTIFACTS, 'made.png') })

  // The PDF opens in a new tab; the video plays in place.
  expect(await page.locator('#attachments li').nth(1).locator('a.open').getAttribute('href')).toBe(
    `/assets/storage/attach/view/${report!.id}`,
  )
  expect(await page.locator('#attachments li').nth(1).locator('a.open').getAttribute('target')).toBe('_blank')
  await page.locator('#attachments button.play').click()
  const player = page.locator('#attachments video')
  expect(await player.getAttribute('src')).toBe(`/assets/storage/attach/view/${clip!.id}`)
  expect(await player.getAttribute('controls')).not.toBeNull()
  await expect.poll(() => player.evaluate((v: HTMLVideoElement) => v.readyState), { timeout: 30_000 }).toBeGreaterThanOrEqual(1)
  expect(await player.evaluate((v: HTMLVideoElement) => Math.round(v.duration))).toBe(3)

  // The board's list: a post without pictures shows its video's preview.
  await page.goto(`${srv.base}/#/`)
  await expect
    .poll(() => page.locator('#post-list img').evaluateAll((imgs) => imgs.map((i) => (i as HTMLImageElement).naturalWidth)), {
      timeout: 30_000,
    })
    .toEqual([128])
  expect(await page.locator('#post-list img').getAttribute('src')).toBe(`/assets/storage/attach/view/${clip!.id}?w=128&h=128&fit=cover`)
  expect(problems).toEqual([])
  await page.close()
}, 120_000)
