/**
 * `<attach-field>` and HEIC/HEIF photos (what iPhones take) in a real browser (browser-kit.ts): a photo
 * chosen from disk shows its name and icon while it uploads, never a broken local `<img>` (Chromium does
 * not decode HEIC), then the server's JPEG of the temporary file; a saved one shows the server's JPEG resize. The photo is attach-storage's HEIC test fixture.
 */
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, expect, it } from 'vitest'
import { ARTIFACTS, type FieldPages, pictures, setSaved, startFieldPages } from './browser-kit.js'

const HEIC = fileURLToPath(new URL('../../attach-storage/test/fixtures/photo.heic', import.meta.url))

let pages: FieldPages
beforeAll(async () => {
  pages = await startFieldPages()
}, 120_000)
afterAll(() => pages?.close())

it('<attach-field> shows a chosen HEIC photo as its name and icon, a saved one as the server’s JPEG', async () => {
  const heic = readFileSync(HEIC)
  const page = await pages.open()
  const failed: string[] = []
  page.on('requestfailed', (r) => failed.push(r.url()))
  // Every <img> the field puts in its rows, in order.
  await page.locator('attach-field').evaluate((field) => {
    const seen: string[] = []
    Object.assign(window, { imgs: seen })
    new MutationObserver((changes) => {
      for (const c of changes)
        for (const n of c.addedNodes) {
          if (n instanceof HTMLImageElement) seen.push(n.src)
          else if (n instanceof Element) for (const img of n.querySelectorAll('img')) seen.push(img.src)
        }
    }).observe(field.shadowRoot!, { childList: true, subtree: true })
  })
  const imgs = () => page.evaluate(() => (window as unknown as { imgs: string[] }).imgs)
  // Chosen from disk: shown as its extension while it uploads (no local <img>: Chromium cannot decode
  // it), then as the server's JPEG of the temporary file.
  const tempThumb = page.waitForResponse((r) => r.url().includes('/attach-temp/view/') && r.url().includes('w=96&h=96'))
  await page.locator('attach-field input[type=file]').setInputFiles([{ name: 'IMG_0001.HEIC', mimeType: 'image/heic', buffer: heic }])
  expect((await pictures(page))[0]).toMatchObject({ tag: 'span', text: 'HEIC' })
  await expect.poll(() => page.locator('attach-field li').getAttribute('data-state'), { timeout: 30_000 }).toBe('done')
  const tempAnswer = await tempThumb
  expect(tempAnswer.status()).toBe(200)
  expect(tempAnswer.headers()['content-type']).toBe('image/jpeg')
  await expect.poll(async () => (await pictures(page))[0], { timeout: 30_000 }).toMatchObject({ tag: 'img', loaded: true })
  // A HEIC file the system gives no type is known by its extension (accept="image/*" lets it in).
  await page.locator('attach-field input[type=file]').setInputFiles([{ name: 'IMG_0002.heif', mimeType: '', buffer: heic }])
  await expect.poll(() => page.locator('attach-field li').nth(1).getAttribute('data-state'), { timeout: 30_000 }).toBe('done')
  await expect.poll(async () => (await pictures(page))[1], { timeout: 30_000 }).toMatchObject({ tag: 'img', loaded: true })
  // Only server addresses, never a blob: of the HEIC file.
  const chosen = new Set(await imgs())
  expect(chosen.size).toBe(2)
  for (const src of chosen)
    expect(src).toMatch(
      /\/attach-temp\/view\/demo\/photo\/[^/?]+\.heic\?w=96&h=96$|\/attach-temp\/view\/demo\/photo\/[^/?]+\.heif\?w=96&h=96$/,
    )
  await page.locator('attach-field').screenshot({ path: join(ARTIFACTS, 'field-heic-chosen.png') })

  // Saved: the 96-pixel view answers a JPEG, which the field shows.
  const record = await pages.srv.save(new File([heic], 'IMG_0003.HEIC', { type: 'image/heic' }), 'h1', 'photo')
  expect(record.fileType).toBe('image/heic')
  const thumb = page.waitForResponse((r) => r.url().includes(`/attach/view/${record.id}?w=96&h=96`))
  await setSaved(page, [record])
  const answer = await thumb
  expect(answer.status()).toBe(200)
  expect(answer.headers()['content-type']).toBe('image/jpeg')
  await expect.poll(async () => (await pictures(page))[0], { timeout: 30_000 }).toMatchObject({ tag: 'img', loaded: true, background: '' })
  expect((await pictures(page))[0]!.naturalWidth).toBeGreaterThan(0)
  expect(failed).toEqual([])
  expect((await imgs()).at(-1)).toContain(`/attach/view/${record.id}?w=96&h=96`)
  await page.locator('attach-field').screenshot({ path: join(ARTIFACTS, 'field-heic.png') })
  // Under the reference server's Content-Security-Policy: no violation, no script error.
  expect(pages.problems).toEqual([])
  await page.close()
})
