/**
 * `<attach-field>`'s pictures in a real browser (Debian's Chromium, driven by playwright-core), the page
 * served beside attach-storage's handlers (browser-kit.ts): a saved image shows its ThumbHash placeholder
 * until its thumbnail has loaded. Screenshots go to packages/client/test-artifacts/ (gitignored).
 */
import { join } from 'node:path'
import type { AttachmentView } from 'attach-storage'
import type { Route } from 'playwright-core'
import sharp from 'sharp'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { ARTIFACTS, type FieldPages, pictures, setSaved, startFieldPages } from './browser-kit.js'

let pages: FieldPages
beforeAll(async () => {
  pages = await startFieldPages()
}, 120_000)
afterAll(() => pages?.close())

/** A picture with something to blur: a diagonal gradient from `a` to `b`, with a bright disc. */
async function photo(a: number[], b: number[], width = 400, height = 300): Promise<Buffer> {
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" width="${width}" height="${height}">
    <defs><linearGradient id="g" x2="1" y2="1"><stop offset="0" stop-color="rgb(${a})"/><stop offset="1" stop-color="rgb(${b})"/></linearGradient></defs>
    <rect width="100%" height="100%" fill="url(#g)"/><circle cx="${width * 0.65}" cy="${height * 0.4}" r="${height / 5}" fill="#fde68a"/></svg>`
  return sharp(Buffer.from(svg)).jpeg().toBuffer()
}

it('<attach-field> shows each saved image’s placeholder until its thumbnail has loaded', async () => {
  const colours = [
    [
      [14, 116, 144],
      [190, 24, 93],
    ],
    [
      [22, 101, 52],
      [250, 204, 21],
    ],
    [
      [30, 41, 59],
      [249, 115, 22],
    ],
  ]
  for (const [i, [a, b]] of colours.entries()) {
    await pages.srv.save(new File([new Uint8Array(await photo(a!, b!))], `photo-${i + 1}.jpg`, { type: 'image/jpeg' }), 'p1', 'photo')
  }
  const looked = await pages.srv.client.lookup('demo', 'p1', 'photo')
  if (!looked.ok) throw new Error(looked.error.message)
  const records = looked.value.photo as AttachmentView[]
  expect(records.map((r) => typeof (r.media as { placeholder?: string } | null)?.placeholder)).toEqual(['string', 'string', 'string'])

  const page = await pages.open()
  // The thumbnails are held back until released: what shows meanwhile is the placeholder.
  const held: Route[] = []
  await page.route('**/attach/view/**', (route) => void held.push(route))
  await setSaved(page, records)
  await expect.poll(() => held.length, { timeout: 30_000 }).toBe(3)
  expect(held.map((r) => new URL(r.request().url()).search)).toEqual(['?w=96&h=96', '?w=96&h=96', '?w=96&h=96'])
  expect(await pictures(page)).toEqual(
    Array(3).fill({ tag: 'img', text: '', loaded: false, background: 'url("data:image/png;base64,', naturalWidth: 0 }),
  )
  await page.locator('attach-field').screenshot({ path: join(ARTIFACTS, 'field-placeholders.png') })

  // Released: each thumbnail loads, and its placeholder goes.
  for (const route of held) await route.continue()
  await expect
    .poll(() => pictures(page), { timeout: 30_000 })
    .toEqual(Array(3).fill({ tag: 'img', text: '', loaded: true, background: '', naturalWidth: 96 }))
  await page.locator('attach-field').screenshot({ path: join(ARTIFACTS, 'field-loaded.png') })
  // Under the reference server's Content-Security-Policy: no violation, no script error.
  expect(pages.problems).toEqual([])
  await page.close()
})
