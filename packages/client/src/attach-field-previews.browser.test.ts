/**
 * `<attach-field>` and PDFs, videos and virus scans in a real browser (browser-kit.ts), against
 * attach-storage with previews on (Debian's ffmpeg and poppler, which test/global-setup.ts installs) and
 * a real clamd on the tests' own signature (clamd-kit.ts): a saved video and PDF show the spinner while
 * their previews are being made, then the previews with the video's length and the PDF's pages; a file
 * the scan refuses says so on its row. Screenshots go to packages/client/test-artifacts/ (gitignored).
 */
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { AttachmentView } from 'attach-storage'
import type { Page } from 'playwright-core'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { startClamd, TEST_SIGNATURE, TEST_VIRUS_MARKER, type TestClamd } from '../../attach-storage/src/testing/clamd-kit.js'
import { pdfBytes } from '../../attach-storage/src/testing/pdf-kit.js'
import { makeVideo } from '../../attach-storage/src/testing/video-kit.js'
import { ARTIFACTS, type FieldPages, setSaved, startFieldPages } from './browser-kit.js'
import { AttachContainerBuilder } from './container.js'

let pages: FieldPages
let clamd: TestClamd
let dir: string
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'attach-field-previews-'))
  clamd = await startClamd()
  pages = await startFieldPages({ media: {}, scanned: { scan: { clamd: clamd.tcp } } })
}, 120_000)
afterAll(async () => {
  await pages?.close()
  await clamd?.stop()
  await rm(dir, { recursive: true, force: true })
})

/** Each row as it shows: its picture (an image's tag and width, or an icon's text), its badge, whether it spins, its status, its error. */
const rows = (page: Page) =>
  page.locator('attach-field li').evaluateAll((lis) =>
    lis.map((li) => {
      const visual = li.firstElementChild as HTMLElement
      const img = visual.querySelector('img') ?? (visual instanceof HTMLImageElement ? visual : null)
      return {
        state: li.dataset.state,
        picture: img
          ? `img ${img.naturalWidth > 0 && 'loaded' in img.dataset ? 'loaded' : 'loading'}`
          : `icon ${visual.textContent?.slice(0, 5)}`,
        badge: visual.querySelector('.badge')?.textContent ?? '',
        pending: visual.classList.contains('pending'),
        status: li.querySelector('.status')?.textContent ?? '',
      }
    }),
  )

it('<attach-field> shows a saved video’s and PDF’s previews, with the length and the pages, once they are made', async () => {
  const video = new File([await readFile(await makeVideo(join(dir, 'clip.mp4'), { seconds: 3 }))], 'clip.mp4', { type: 'video/mp4' })
  const pdf = new File([new Uint8Array(pdfBytes({ pages: 3 }))], 'report.pdf', { type: 'application/pdf' })
  const { client } = pages.srv
  const temporaries = []
  for (const file of [video, pdf]) {
    const up = await client.upload(file, { refDomain: 'demo', refCategory: 'media' })
    if (!up.ok) throw new Error(up.error.message)
    temporaries.push({ temporary: up.value })
  }
  const saved = await client.save('demo', 'v1', new AttachContainerBuilder('demo').category('media', temporaries).build())
  if (!saved.ok) throw new Error(saved.error.message)
  // Right after the save the previews are still to be made, in the background.
  const records = saved.value.attachList
  expect(records.map((r) => [r.displayName, r.preview])).toEqual([
    ['clip.mp4', 'pending'],
    ['report.pdf', 'pending'],
  ])

  const page = await pages.open()
  const lookups: string[] = []
  page.on('request', (r) => {
    if (r.url().includes('/api/storage/attach/demo/v1/')) lookups.push(r.url())
  })
  const thumbs = new Map<string, { status: number; type: string }>()
  page.on('response', (r) => {
    if (r.url().includes('/attach/view/'))
      thumbs.set(new URL(r.url()).pathname + new URL(r.url()).search, { status: r.status(), type: r.headers()['content-type'] ?? '' })
  })
  await page.evaluate(() => {
    const field = customElements.get('attach-field') as unknown as { previewRetryDelays: number[] }
    field.previewRetryDelays = [500, 1000, 2000, 4000, 8000]
  })
  await setSaved(page, records)
  // Meanwhile: the extension with a spinner, and the status says so.
  expect(await rows(page)).toEqual([
    { state: 'saved', picture: 'icon MP4', badge: '', pending: true, status: `${(video.size / 1024).toFixed(1)} KB · preview being made` },
    { state: 'saved', picture: 'icon PDF', badge: '', pending: true, status: `${pdf.size} B · preview being made` },
  ])
  await page.locator('attach-field').screenshot({ path: join(ARTIFACTS, 'field-previews-pending.png') })

  // The field looks the reference up again until both are made: then the previews load, with badges.
  await expect
    .poll(() => rows(page), { timeout: 30_000 })
    .toEqual([
      { state: 'saved', picture: 'img loaded', badge: '0:03', pending: false, status: `${(video.size / 1024).toFixed(1)} KB · 0:03` },
      { state: 'saved', picture: 'img loaded', badge: '3 p.', pending: false, status: `${pdf.size} B · 3 pages` },
    ])
  // Each thumbnail is a 96-pixel resize of the preview, a JPEG, through the view route by id.
  for (const r of records) expect(thumbs.get(`/assets/storage/attach/view/${r.id}?w=96&h=96`)).toEqual({ status: 200, type: 'image/jpeg' })
  // Once nothing is pending the lookups stop (a lookup of the reference's category each time).
  const looked = lookups.length
  expect(looked).toBeGreaterThanOrEqual(1)
  expect(lookups.every((u) => u.endsWith('/api/storage/attach/demo/v1/media'))).toBe(true)
  await new Promise((r) => setTimeout(r, 2500))
  expect(lookups.length).toBe(looked)
  await page.locator('attach-field').screenshot({ path: join(ARTIFACTS, 'field-previews.png') })

  // A file refused by the virus scan says so on its row, with no Retry (it would be refused again); a
  // clean one beside it is uploaded.
  await page.locator('attach-field').evaluate((field) => {
    field.setAttribute('category', 'scanned')
    field.removeAttribute('accept')
  })
  await page.locator('attach-field input[type=file]').setInputFiles([
    { name: 'invoice.pdf.exe', mimeType: 'application/octet-stream', buffer: Buffer.from(`MZ…${TEST_VIRUS_MARKER}…`) },
    { name: 'notes.txt', mimeType: 'text/plain', buffer: Buffer.from('Nothing to see here.\n') },
  ])
  await expect.poll(async () => (await rows(page)).slice(2).map((r) => r.state), { timeout: 30_000 }).toEqual(['failed', 'done'])
  const infected = page.locator('attach-field li').nth(2)
  expect(await infected.locator('.error').textContent()).toBe(`Refused: a virus was found (${TEST_SIGNATURE})`)
  expect(await infected.getAttribute('aria-label')).toContain(`error: Refused: a virus was found (${TEST_SIGNATURE})`)
  expect(await infected.locator('button.retry').count()).toBe(0)
  expect(await infected.getAttribute('class')).toBe('failed')
  await page.locator('attach-field').screenshot({ path: join(ARTIFACTS, 'field-previews-infected.png') })
  // Under the reference server's Content-Security-Policy: no violation, no script error.
  expect(pages.problems).toEqual([])
  await page.close()
}, 120_000)

it('<attach-field> keeps the icon of a file whose preview failed, and stops looking it up', async () => {
  // Not a PDF inside: the save keeps it (no filter), the preview job fails.
  const broken = new File([new TextEncoder().encode('%PDF-1.7\nnot a PDF at all\n')], 'broken.pdf', { type: 'application/pdf' })
  const record: AttachmentView = await pages.srv.save(broken, 'b1', 'media')
  expect(record.fileType).toBe('application/pdf')
  expect(record.preview).toBe('failed')
  const page = await pages.open()
  await setSaved(page, [record])
  expect(await rows(page)).toEqual([{ state: 'saved', picture: 'icon PDF', badge: '', pending: false, status: `${broken.size} B` }])
  expect(pages.problems).toEqual([])
  await page.close()
}, 60_000)
