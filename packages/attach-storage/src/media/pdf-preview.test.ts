import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import sharp from 'sharp'
import { describe, expect, it } from 'vitest'
import { type PdfKitOptions, writePdf } from '../testing/pdf-kit.js'
import { previewBounds, previewFailure, useToolFolder } from '../testing/preview-test-kit.js'
import { toolChildren } from '../testing/video-kit.js'
import { probePdf, renderPdfFirstPage } from './pdf-preview.js'
import { findPreviewTools } from './preview-tools.js'

const tools = findPreviewTools()
const BOUNDS = previewBounds({ maxInputPixels: 40_000_000, memoryBytes: 512 * 1024 * 1024 })
const folder = useToolFolder('attach-pdf-preview-', ['pdfinfo', 'pdftoppm', 'prlimit'])
const dir = (): string => folder.dir()

const pdf = (name: string, options: PdfKitOptions = {}) => writePdf(join(dir(), name), options)

describe('PDF previews with poppler (pdfinfo, pdftoppm)', () => {
  it('finds the tools on PATH, and a given path only when it is executable', () => {
    expect(tools.pdfinfo).toMatch(/\/pdfinfo$/)
    const found = findPreviewTools({ pdfinfo: '/nonexistent/pdfinfo', ffmpeg: '/etc/passwd' })
    expect(found.pdfinfo).toBeUndefined()
    expect(found.ffmpeg).toBeUndefined()
    expect(found.pdftoppm).toBe(tools.pdftoppm)
  })

  it('counts one page and renders it as a JPEG whose longest side is maxSide', async () => {
    const path = await pdf('one.pdf')
    expect(await probePdf(path, tools, BOUNDS)).toEqual({ pages: 1 })
    const started = performance.now()
    const page = await renderPdfFirstPage(path, tools, BOUNDS)
    const ms = performance.now() - started
    const meta = await sharp(page.jpeg).metadata()
    expect(meta.format).toBe('jpeg')
    // A4 portrait: 595 × 842 pt.
    expect([meta.width, meta.height]).toEqual([page.width, page.height])
    expect(page.height).toBe(1024)
    expect(page.width).toBe(Math.round((1024 * 595) / 842))
    // The page's red rectangle is there (0.1..0.6 of the width, 0.1..0.4 of the height from the bottom).
    const { data, info } = await sharp(page.jpeg).raw().toBuffer({ resolveWithObject: true })
    const at = (x: number, y: number) => Array.from(data.subarray((y * info.width + x) * 3, (y * info.width + x) * 3 + 3))
    const [r, g, b] = at(Math.round(info.width * 0.3), Math.round(info.height * 0.75))
    expect(r).toBeGreaterThan(200)
    expect(g).toBeLessThan(60)
    expect(b).toBeLessThan(60)
    console.log(`one-page PDF: first page rendered in ${ms.toFixed(0)} ms`)
  })

  it('counts three pages; a smaller maxSide gives a smaller image', async () => {
    const path = await pdf('three.pdf', { pages: 3, mediaBox: [842, 595] })
    expect(await probePdf(path, tools, BOUNDS)).toEqual({ pages: 3 })
    const page = await renderPdfFirstPage(path, tools, { ...BOUNDS, maxSide: 200 })
    // 842 × 595 pt at 200 pixels wide: 141.3 high, rounded up by pdftoppm.
    expect(await sharp(page.jpeg).metadata()).toMatchObject({ format: 'jpeg', width: 200, height: 142 })
    expect(page).toMatchObject({ width: 200, height: 142 })
  })

  it('refuses a text file named .pdf: corrupt', async () => {
    const path = join(dir(), 'notes.pdf')
    writeFileSync(path, 'These are my notes, not a PDF.\n'.repeat(50))
    const err = await previewFailure(probePdf(path, tools, BOUNDS))
    expect(err.code).toBe('corrupt')
    expect(err.permanent).toBe(true)
    expect(err.message).toMatch(/^not a readable PDF: .*(PDF|header|xref|trailer)/i)
    expect((await previewFailure(renderPdfFirstPage(path, tools, BOUNDS))).code).toBe('corrupt')
  })

  it('refuses a PDF that needs a user password: encrypted; one with an owner password only renders', async () => {
    const locked = await pdf('locked.pdf', { encrypt: { userPassword: 'secret', ownerPassword: 'owner' } })
    const err = await previewFailure(probePdf(locked, tools, BOUNDS))
    expect(err).toMatchObject({ code: 'encrypted', permanent: true, message: 'the PDF is encrypted with a password' })
    expect((await previewFailure(renderPdfFirstPage(locked, tools, BOUNDS))).code).toBe('encrypted')

    // Restrictions only (an empty user password): opens in any viewer, and here.
    const restricted = await pdf('restricted.pdf', { encrypt: { userPassword: '', ownerPassword: 'owner' } })
    expect(await probePdf(restricted, tools, BOUNDS)).toEqual({ pages: 1 })
    const page = await renderPdfFirstPage(restricted, tools, BOUNDS)
    expect(page.height).toBe(1024)
  })

  it('refuses 100,000 real pages, and a /Count claiming 100,000, with pdfinfo: too-many-pages', async () => {
    const real = await pdf('100k.pdf', { pages: 100_000 })
    let started = performance.now()
    const err = await previewFailure(probePdf(real, tools, BOUNDS))
    const realMs = performance.now() - started
    expect(err).toMatchObject({ code: 'too-many-pages', permanent: true, message: 'the PDF has 100000 pages, more than the 10000 allowed' })
    expect(realMs).toBeLessThan(5000)
    // pdftoppm alone opens it the same way and renders page 1 only: no slower than the count.
    started = performance.now()
    expect((await renderPdfFirstPage(real, tools, BOUNDS)).height).toBe(1024)
    const renderMs = performance.now() - started
    expect(renderMs).toBeLessThan(5000)

    const lying = await pdf('lying.pdf', { claimedCount: 100_000 })
    started = performance.now()
    expect((await previewFailure(probePdf(lying, tools, BOUNDS))).code).toBe('too-many-pages')
    const lyingMs = performance.now() - started
    console.log(
      `100,000 pages: refused in ${realMs.toFixed(0)} ms (real page tree), ${lyingMs.toFixed(0)} ms (/Count); first page rendered in ${renderMs.toFixed(0)} ms`,
    )

    // A count its objects cannot hold: poppler calls the file broken.
    const short = await pdf('short-count.pdf', { claimedCount: 100_000, padXref: false })
    const broken = await previewFailure(probePdf(short, tools, BOUNDS))
    expect(broken.code).toBe('corrupt')
    expect(broken.message).toMatch(/^not a readable PDF/)
  })

  it('a Title that prints a fake "Pages: 1" line before pdfinfo\'s own does not hide the real count', async () => {
    const path = await pdf('title.pdf', { pages: 20_000, title: 'Report\nPages:           1\nEncrypted:       no' })
    const err = await previewFailure(probePdf(path, tools, BOUNDS))
    expect(err).toMatchObject({ code: 'too-many-pages', message: 'the PDF has 20000 pages, more than the 10000 allowed' })
  })

  it('a Title of 2 MB makes pdfinfo say more than its 1 MiB output cap: corrupt, not retried', async () => {
    const path = await pdf('long-title.pdf', { title: 'x'.repeat(2 * 1024 * 1024) })
    const err = await previewFailure(probePdf(path, tools, BOUNDS))
    expect(err).toMatchObject({ code: 'corrupt', permanent: true, message: 'pdfinfo wrote more than 1048576 bytes' })
  })

  it('an array nested 1,000,000 deep: bounded by memory (corrupt) or by time (timeout), the tool gone', async () => {
    const path = await pdf('nested.pdf', { nestDepth: 1_000_000 })
    let started = performance.now()
    const memory = await previewFailure(probePdf(path, tools, { ...BOUNDS, memoryBytes: 64 * 1024 * 1024 }))
    const memoryMs = performance.now() - started
    expect(memory).toMatchObject({ code: 'corrupt', permanent: true, message: 'pdfinfo ran out of memory on this file (bound 64 MiB)' })

    const deeper = await pdf('nested-deeper.pdf', { nestDepth: 4_000_000 })
    started = performance.now()
    const slow = await previewFailure(renderPdfFirstPage(deeper, tools, { ...BOUNDS, timeoutSeconds: 1 }))
    const slowMs = performance.now() - started
    expect(slow).toMatchObject({ code: 'timeout', permanent: false, message: 'pdftoppm did not finish within 1 s' })
    expect(slowMs).toBeLessThan(3000)
    console.log(`nested 1e6: out of memory after ${memoryMs.toFixed(0)} ms; nested 4e6: killed at ${slowMs.toFixed(0)} ms`)
    expect(toolChildren(['pdfinfo', 'pdftoppm'])).toEqual([])
  })

  it('a 14400 pt and a 1e9 pt MediaBox still render at most maxSide pixels a side', async () => {
    for (const box of [
      [14_400, 14_400],
      [1e9, 1e9],
      [1e9, 10],
    ] as Array<[number, number]>) {
      const path = await pdf(`box-${box[0]}-${box[1]}.pdf`, { mediaBox: box })
      const started = performance.now()
      const page = await renderPdfFirstPage(path, tools, BOUNDS)
      const ms = performance.now() - started
      expect(Math.max(page.width, page.height)).toBe(1024)
      expect(page.width * page.height).toBeLessThanOrEqual(1024 * 1024)
      expect(page.jpeg.length).toBeLessThan(1024 * 1024)
      console.log(`MediaBox ${box.join(' x ')} pt: ${page.width} x ${page.height} in ${ms.toFixed(0)} ms`)
    }
  })

  it('refuses a maxSide whose render would be over maxInputPixels: too-many-pixels', async () => {
    const path = await pdf('square.pdf', { mediaBox: [1000, 1000] })
    const err = await previewFailure(renderPdfFirstPage(path, tools, { ...BOUNDS, maxInputPixels: 1000 * 1000 }))
    expect(err).toMatchObject({
      code: 'too-many-pixels',
      message: 'a preview of 1024 pixels a side may have 1048576 pixels, more than the 1000000 allowed',
    })
  })
})
