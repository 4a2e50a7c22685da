/**
 * Makes the README's opening screenshot (docs/images/board.png): the board page of a real reference server
 * (SQLite file and local folder in a temporary directory) with real uploads through its API, in Debian's
 * Chromium driven by playwright-core. The post has three photos (two JPEGs and an iPhone-style HEIC, drawn
 * here from SVG scenes, so the repository holds no photo of unknown origin) and a text file; the harbour's
 * focus is set on its lighthouse, so the post's cover crop keeps it; one photo is held back so its
 * ThumbHash placeholder shows.
 *
 *   node --conditions=@attach-storage/source --import tsx scripts/screenshot-board.mjs [out.png] [--notes dir] [--previews]
 *
 * With `--notes dir` it also saves the placeholders, the HEIC photo and the edit view's cover crops as
 * dir/shot-board-*.png. Needs /usr/bin/chromium and heif-enc (Debian's libheif-examples) for the HEIC.
 * With `--previews` (and `--notes dir`) a second post holds a video (ffmpeg's test pattern, 12 s) and a
 * 12-page PDF (drawn by the tests' PDF kit): dir/shot-previews-*.png show it while its previews are being
 * made (when the shot is quick enough to catch that), once they are, with the video playing, in the edit
 * form and in the board's list. Needs ffmpeg and poppler-utils (docs/previews.md).
 */
import { execFileSync } from 'node:child_process'
import { mkdirSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import { serve } from '@hono/node-server'
import { DEV_SECRET, signDevToken } from '@attach-storage/example-reference'
import { chromium } from 'playwright-core'
import sharp from 'sharp'
import { createReferenceApp } from '../examples/hono-app/src/app.ts'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const args = process.argv.slice(2)
const notesAt = args.indexOf('--notes')
const notes = notesAt >= 0 ? args.splice(notesAt, 2)[1] : undefined
const previewsAt = args.indexOf('--previews')
const previews = previewsAt >= 0 && args.splice(previewsAt, 1).length > 0
const out = resolve(args[0] ?? join(root, 'docs', 'images', 'board.png'))

/** A harbour at sunset, its lighthouse on the right: the subject a centred crop would cut off. */
const harbour = (w, h) => `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 1600 1067">
<defs>
  <linearGradient id="sky" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="#2b2d6e"/><stop offset="0.45" stop-color="#c2456e"/><stop offset="0.75" stop-color="#f59e4c"/><stop offset="1" stop-color="#fcd58a"/></linearGradient>
  <linearGradient id="sea" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="#e0875a"/><stop offset="0.3" stop-color="#6b3f6e"/><stop offset="1" stop-color="#1c1f45"/></linearGradient>
  <radialGradient id="sun" cx="0.5" cy="0.5" r="0.5"><stop offset="0" stop-color="#fff7d6"/><stop offset="0.6" stop-color="#ffd27a"/><stop offset="1" stop-color="#ffd27a" stop-opacity="0"/></radialGradient>
</defs>
<rect width="1600" height="640" fill="url(#sky)"/>
<circle cx="520" cy="600" r="150" fill="url(#sun)"/>
<rect y="620" width="1600" height="447" fill="url(#sea)"/>
<g fill="#ffe2a8" opacity="0.55">${Array.from({ length: 14 }, (_, i) => `<rect x="${470 - i * 6}" y="${640 + i * 26}" width="${100 + i * 12}" height="5" rx="2"/>`).join('')}</g>
<path d="M0 640 L180 560 L330 600 L420 585 L560 640 Z" fill="#3b2450" opacity="0.8"/>
<path d="M1080 640 L1180 590 L1600 560 L1600 660 Z" fill="#24183a"/>
<g transform="translate(1300 330)">
  <path d="M-34 300 L-22 0 L22 0 L34 300 Z" fill="#f4efe8"/>
  <path d="M-30 220 L30 220 L32 260 L-32 260 Z M-26 110 L26 110 L28 150 L-28 150 Z" fill="#c0392b"/>
  <rect x="-30" y="-34" width="60" height="34" fill="#2d2a32"/><rect x="-20" y="-30" width="40" height="26" fill="#ffe8a3"/>
  <path d="M-38 -34 L0 -70 L38 -34 Z" fill="#c0392b"/>
  <path d="M20 -18 L520 -120 L520 60 Z" fill="#fff3c4" opacity="0.18"/>
</g>
<path d="M1230 640 L1600 640 L1600 700 L1200 700 Z" fill="#1d1430"/>
<g transform="translate(860 760)"><path d="M-90 0 L90 0 L60 34 L-64 34 Z" fill="#1b1533"/><path d="M0 -150 L0 0 M0 -140 L70 -10 L0 -10 Z" stroke="#1b1533" stroke-width="6" fill="#f6e7d0"/></g>
</svg>`

/** Rolling hills in the morning, a red barn and a tree on the left third. */
const hills = (w, h) => `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 1600 1067">
<defs>
  <linearGradient id="sky" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="#4f8fd6"/><stop offset="1" stop-color="#cfe6f5"/></linearGradient>
  <linearGradient id="h1" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="#8fbf5a"/><stop offset="1" stop-color="#4d7f2c"/></linearGradient>
  <linearGradient id="h2" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="#6da443"/><stop offset="1" stop-color="#2f5e1f"/></linearGradient>
</defs>
<rect width="1600" height="1067" fill="url(#sky)"/>
<g fill="#fff" opacity="0.85"><ellipse cx="300" cy="170" rx="140" ry="36"/><ellipse cx="390" cy="150" rx="100" ry="40"/><ellipse cx="1180" cy="230" rx="180" ry="34"/><ellipse cx="1260" cy="210" rx="90" ry="36"/></g>
<path d="M0 560 C 300 420, 600 470, 900 540 S 1400 430, 1600 500 L1600 1067 L0 1067 Z" fill="#9cb98a"/>
<path d="M0 700 C 260 560, 640 600, 980 690 S 1420 620, 1600 660 L1600 1067 L0 1067 Z" fill="url(#h1)"/>
<g transform="translate(470 610)">
  <rect x="-70" y="0" width="140" height="95" fill="#b03a2e"/><path d="M-82 2 L0 -62 L82 2 Z" fill="#6e2219"/>
  <rect x="-20" y="40" width="40" height="55" fill="#f3e3c3"/><path d="M-20 40 L20 95 M20 40 L-20 95" stroke="#b03a2e" stroke-width="5"/>
</g>
<g transform="translate(640 650)"><rect x="-9" y="-10" width="18" height="90" fill="#5b3a1e"/><circle cx="0" cy="-60" r="70" fill="#2f6b27"/><circle cx="-40" cy="-30" r="46" fill="#3b7d2f"/><circle cx="42" cy="-34" r="50" fill="#356f2a"/></g>
<path d="M0 860 C 400 760, 800 800, 1200 880 S 1500 860, 1600 840 L1600 1067 L0 1067 Z" fill="url(#h2)"/>
<path d="M760 1067 C 800 960, 900 880, 1040 820" stroke="#d8c79a" stroke-width="26" fill="none" opacity="0.9"/>
</svg>`

/** A mountain lake, portrait, as a phone takes it. */
const alpine = (w, h) => `<svg xmlns="http://www.w3.org/2000/svg" width="${w}" height="${h}" viewBox="0 0 1200 1600">
<defs>
  <linearGradient id="sky" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="#1f4e8c"/><stop offset="1" stop-color="#9cc6e8"/></linearGradient>
  <linearGradient id="lake" x1="0" y1="0" x2="0" y2="1"><stop offset="0" stop-color="#3d8db5"/><stop offset="1" stop-color="#0f3b57"/></linearGradient>
</defs>
<rect width="1200" height="1600" fill="url(#sky)"/>
<path d="M-50 900 L300 380 L470 610 L640 300 L900 700 L1040 560 L1250 900 Z" fill="#5d6b7e"/>
<path d="M300 380 L370 480 L330 470 L290 520 L250 460 Z M640 300 L720 420 L670 410 L640 460 L600 420 L570 430 Z M1040 560 L1090 630 L1040 620 L1010 650 Z" fill="#f4f7fb"/>
<path d="M-50 900 L200 760 L420 880 L700 780 L980 870 L1250 820 L1250 1000 L-50 1000 Z" fill="#2f5a3a"/>
<rect y="980" width="1200" height="620" fill="url(#lake)"/>
<path d="M-50 980 L300 1420 L470 1200 L640 1530 L900 1130 L1040 1260 L1250 980 Z" fill="#5d6b7e" opacity="0.35"/>
<path d="M0 1480 C 300 1420, 700 1440, 1200 1400 L1200 1600 L0 1600 Z" fill="#c8b58c"/>
</svg>`

const photo = (svg, w, h) => sharp(Buffer.from(svg(w, h)))

async function main() {
  const dataDir = mkdtempSync(join(tmpdir(), 'attach-shot-'))
  const ref = await createReferenceApp(
    { ATTACH_DATA_DIR: dataDir, ATTACH_JWT_SECRET: DEV_SECRET },
    { info() {}, warn() {}, error: console.error },
  )
  const server = serve({ fetch: ref.app.fetch, port: 0, hostname: '127.0.0.1' })
  await new Promise((r) => server.once('listening', r))
  const base = `http://127.0.0.1:${server.address().port}`
  const token = signDevToken(DEV_SECRET)
  const call = async (path, init = {}) => {
    const headers = new Headers(init.headers)
    headers.set('authorization', `Bearer ${token}`)
    if (typeof init.body === 'string') headers.set('content-type', 'application/json')
    const res = await fetch(base + path, { ...init, headers })
    if (!res.ok) throw new Error(`${init.method ?? 'GET'} ${path}: ${res.status} ${await res.text()}`)
    return res.json()
  }
  const upload = async (bytes, name, category) => {
    const fd = new FormData()
    fd.set('refDomain', 'board')
    fd.set('refCategory', category)
    fd.set('file', new Blob([new Uint8Array(bytes)]), name)
    return (await call('/api/storage/attach/tmp', { method: 'POST', body: fd })).files[0]
  }
  const work = mkdtempSync(join(tmpdir(), 'attach-shot-heic-'))
  let browser
  try {
    const harbourJpg = await photo(harbour, 2400, 1600).jpeg({ quality: 86 }).toBuffer()
    const hillsJpg = await photo(hills, 2400, 1600).jpeg({ quality: 86 }).toBuffer()
    // An iPhone-style HEIC through Debian's libheif encoder (sharp's prebuilt libvips cannot write HEVC).
    const alpinePng = join(work, 'alpine.png')
    await photo(alpine, 1200, 1600).png().toFile(alpinePng)
    execFileSync('heif-enc', ['-q', '60', '-o', join(work, 'alpine.heic'), alpinePng], { stdio: 'ignore' })
    const alpineHeic = await import('node:fs/promises').then((fs) => fs.readFile(join(work, 'alpine.heic')))

    const items = [
      [await upload(harbourJpg, 'harbour-at-dusk.jpg', 'image'), 'harbour-at-dusk.jpg'],
      [await upload(alpineHeic, 'IMG_4127.HEIC', 'image'), 'IMG_4127.HEIC'],
      [await upload(hillsJpg, 'red-barn.jpg', 'image'), 'red-barn.jpg'],
    ]
    const notesTxt = await upload(Buffer.from('Ferry at 9:40, back by the coast road.\n'), 'itinerary.txt', 'default')
    const post = await call('/board', {
      method: 'POST',
      body: JSON.stringify({
        title: 'Weekend on the coast',
        body: 'Three photos from the trip (one straight off an iPhone, in HEIC) and the itinerary.',
        attachContainer: {
          refDomain: 'board',
          image: items.map(([f, displayName]) => ({ savedName: f.name, displayName })),
          default: [{ savedName: notesTxt.name, displayName: 'itinerary.txt' }],
        },
      }),
    })
    const images = post.attachContainer.image
    // The lighthouse: a cover crop around it keeps it in the banner.
    await call('/api/storage/attach/', { method: 'PUT', body: JSON.stringify([{ id: images[0].id, focus: { x: 0.81, y: 0.45 } }]) })
    // The named variants (srcset) are made in the background: wait for them.
    for (const end = Date.now() + 30_000; Date.now() < end; await new Promise((r) => setTimeout(r, 200))) {
      const bag = await call(`/api/storage/attach/board/${post.id}/image`)
      if (bag.image.every((r) => r.variants?.medium)) break
    }

    browser = await chromium.launch({ executablePath: '/usr/bin/chromium', headless: true, args: ['--no-sandbox', '--disable-gpu'] })
    const context = await browser.newContext({ viewport: { width: 960, height: 900 }, deviceScaleFactor: 1 })
    const page = await context.newPage()
    // The red barn's files are held back until the shots are taken: its placeholder shows.
    const held = images[2].id
    let release
    const gate = new Promise((r) => (release = r))
    await page.route(new RegExp(`/attach/view/${held}(\\?|$)`), async (route) => {
      await gate
      await route.continue().catch(() => {})
    })
    await page.goto(`${base}/#/post/${post.id}`)
    await page.locator('#attachments img').nth(2).waitFor()
    await page.waitForFunction(
      (held) => [...document.querySelectorAll('#attachments img, #post-cover')].every((i) => i.complete || i.src.includes(`/view/${held}`)),
      held,
    )
    const view = page.locator('#post-view')
    // The page from its header to the end of the post.
    const box = await view.boundingBox()
    await page.screenshot({ path: out, clip: { x: 0, y: 0, width: 960, height: Math.ceil(box.y + box.height + 16) }, fullPage: true })
    // Keep it small: a palette PNG.
    const png = await sharp(out).png({ palette: true, quality: 90, effort: 10 }).toBuffer()
    writeFileSync(out, png)
    console.log(`${out}: ${statSync(out).size} bytes`)

    if (notes) {
      mkdirSync(notes, { recursive: true })
      await view.screenshot({ path: join(notes, 'shot-board-placeholders.png') })
      release()
      await page.waitForFunction(() => [...document.querySelectorAll('#attachments img')].every((i) => i.complete))
      await page
        .locator('#attachments li')
        .nth(1)
        .screenshot({ path: join(notes, 'shot-board-heic.png') })
      await view.screenshot({ path: join(notes, 'shot-board-post.png') })
      await page.click('#edit-post')
      await page.locator('#focus-list li').first().waitFor()
      await page.waitForFunction(() => [...document.querySelectorAll('#focus-list img')].every((i) => i.complete))
      await page.locator('.focus').screenshot({ path: join(notes, 'shot-board-cover-crops.png') })
      await page.goto(`${base}/#/`)
      // The list is drawn once its lookup answers: wait for its picture, not only for the pictures there are.
      await page.waitForFunction(() => {
        const imgs = [...document.querySelectorAll('#post-list img')]
        return imgs.length > 0 && imgs.every((i) => i.complete && i.naturalWidth > 0)
      })
      await page
        .locator('#posts-title')
        .locator('..')
        .screenshot({ path: join(notes, 'shot-board-list.png') })
      console.log(`notes: ${notes}/shot-board-*.png`)
    }
    release()
    if (previews && notes) await previewShots({ page, base, work, upload, call, notes })
  } finally {
    await browser?.close()
    await new Promise((r) => server.close(() => r()))
    await ref.close()
    rmSync(dataDir, { recursive: true, force: true })
    rmSync(work, { recursive: true, force: true })
  }
}

/** A post with a video and a PDF: its previews being made, made, the video playing, the edit form, the list. */
async function previewShots({ page, base, work, upload, call, notes }) {
  const { makeVideo } = await import('../packages/attach-storage/src/testing/video-kit.ts')
  const { pdfBytes } = await import('../packages/attach-storage/src/testing/pdf-kit.ts')
  const { readFile } = await import('node:fs/promises')
  const video = await readFile(await makeVideo(join(work, 'ferry.mp4'), { seconds: 12, width: 640, height: 360, audio: true }))
  const files = [
    [await upload(video, 'ferry-crossing.mp4', 'default'), 'ferry-crossing.mp4'],
    [await upload(pdfBytes({ pages: 12 }), 'timetable.pdf', 'default'), 'timetable.pdf'],
  ]
  const post = await call('/board', {
    method: 'POST',
    body: JSON.stringify({
      title: 'Ferry crossing',
      body: 'The crossing filmed from the deck, and the summer timetable.',
      attachContainer: { refDomain: 'board', default: files.map(([f, displayName]) => ({ savedName: f.name, displayName })) },
    }),
  })
  const view = page.locator('#post-view')
  await page.goto('about:blank')
  await page.goto(`${base}/#/post/${post.id}`)
  await page.locator('#attachments li').first().waitFor()
  if (await page.locator('#attachments li[data-preview=pending]').count())
    await view.screenshot({ path: join(notes, 'shot-previews-pending.png') })
  // The page looks the post up again until both previews are made.
  await page.waitForFunction(
    () =>
      document.querySelectorAll('#attachments li[data-preview=made]').length === 2 &&
      [...document.querySelectorAll('#attachments img')].every((i) => i.complete && i.naturalWidth > 0),
    undefined,
    { timeout: 90_000 },
  )
  await view.screenshot({ path: join(notes, 'shot-previews-board.png') })
  await page.locator('#attachments button.play').click()
  await page.waitForFunction(() => (document.querySelector('#attachments video')?.readyState ?? 0) >= 2, undefined, { timeout: 30_000 })
  await page.evaluate(() => document.querySelector('#attachments video').pause())
  await page
    .locator('#attachments li')
    .first()
    .screenshot({ path: join(notes, 'shot-previews-video-playing.png') })
  await page.click('#edit-post')
  await page.locator('#edit-post-form fieldset').nth(1).waitFor()
  await page.waitForFunction(() =>
    [...document.querySelectorAll('attach-field')].every((f) => [...f.shadowRoot.querySelectorAll('img')].every((i) => i.complete)),
  )
  await page
    .locator('#edit-post-form fieldset')
    .nth(1)
    .screenshot({ path: join(notes, 'shot-previews-edit.png') })
  await page.goto(`${base}/#/`)
  // Both posts with their pictures: the ferry's is its video's preview, cropped.
  await page.waitForFunction(() => {
    const imgs = [...document.querySelectorAll('#post-list img')]
    return imgs.length === 2 && imgs.every((i) => i.complete && i.naturalWidth > 0)
  })
  await page
    .locator('#posts-title')
    .locator('..')
    .screenshot({ path: join(notes, 'shot-previews-list.png') })
  console.log(`notes: ${notes}/shot-previews-*.png`)
}

await main()
