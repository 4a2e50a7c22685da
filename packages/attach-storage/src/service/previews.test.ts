/**
 * Previews and media of PDFs, videos and audio through the whole service (SQLite, local store, the
 * in-process queue, real pdftoppm/pdfinfo/ffmpeg/ffprobe): the lookup says pending, then the media and a
 * `thumbnailUrl`; boxes and named variants are made from the preview; `view`/`download` answer the file;
 * a file the tools refuse is recorded as failed (never retried for ever); a hanging tool is retried and
 * then recorded as failed; missing tools turn the kind off with one warning and a line in `/readyz`.
 */
import { execFile } from 'node:child_process'
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createHealthHandlers } from '../http/health.js'
import { type Kit, makeKit, png, saveFile } from '../testing/handler-kit.js'
import { pdfBytes } from '../testing/pdf-kit.js'

const run = promisify(execFile)
const API = '/api/storage'
const pdf = (pages: number) => new Blob([new Uint8Array(pdfBytes({ pages }))], { type: 'application/pdf' })
const lookup = async (kit: Kit, refKey: string, category = 'default') =>
  (await (await kit.call(`${API}/attach/demo/${refKey}/${category}`)).json())[category]
const get = (kit: Kit, url: string) => kit.call(url, { user: null })
const imageOf = async (res: Response) => sharp(Buffer.from(await res.arrayBuffer())).metadata()

let work: string
let video: Blob
let audio: Blob
beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'attach-previews-'))
  const mp4 = join(work, 'clip.mp4')
  const m4a = join(work, 'tone.m4a')
  const ff = ['-hide_banner', '-v', 'error', '-y']
  await run('ffmpeg', [
    ...ff,
    '-f',
    'lavfi',
    '-i',
    'testsrc=size=320x240:rate=10:duration=4',
    '-pix_fmt',
    'yuv420p',
    '-movflags',
    '+faststart',
    mp4,
  ])
  await run('ffmpeg', [...ff, '-f', 'lavfi', '-i', 'sine=frequency=440:duration=3', '-c:a', 'aac', m4a])
  video = new Blob([new Uint8Array(await readFile(mp4))], { type: 'video/mp4' })
  audio = new Blob([new Uint8Array(await readFile(m4a))], { type: 'audio/mp4' })
})
afterAll(() => rm(work, { recursive: true, force: true }))

describe('previews with the tools present', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      config: { previews: { 'max-side': 256 } },
      registrar: (registry) => {
        registry.registerCategory('demo', 'docs', { variants: { thumb: { w: 64, h: 64 } } })
      },
    })
  })
  afterAll(() => kit?.cleanup())

  it('a PDF: media {pages}, a preview, boxes and named variants made from it; view and download answer the PDF', async () => {
    const bytes = pdfBytes({ pages: 3 })
    const rec = await saveFile(kit, pdf(3), 'report.pdf', 'p1', 'docs')
    await kit.storage.variantJobsIdle()
    const [item] = await lookup(kit, 'p1', 'docs')
    expect(item.media).toEqual({ pages: 3 })
    expect(item.preview).toBe('made')
    expect(item.thumbnailUrl).toBe(`/assets/storage/attach/view/${rec.id}?preview=1`)
    const thumb = await get(kit, item.thumbnailUrl)
    expect(thumb.status).toBe(200)
    expect(thumb.headers.get('content-type')).toBe('image/jpeg')
    const t = await imageOf(thumb)
    expect([t.format, Math.max(t.width!, t.height!)]).toEqual(['jpeg', 256])
    // A4 is portrait: the preview is too.
    expect(t.height! > t.width!).toBe(true)

    const small = await get(kit, `/assets/storage/attach/view/${rec.id}?w=100`)
    expect(small.status).toBe(200)
    expect(small.headers.get('content-type')).toBe('image/jpeg')
    expect(small.headers.get('content-disposition')).toContain('report.jpg')
    expect((await imageOf(small)).width).toBe(100)
    const webp = await get(kit, `/assets/storage/attach/view/${rec.id}?w=80&format=webp`)
    expect(webp.headers.get('content-type')).toBe('image/webp')

    expect(Object.keys(item.variants)).toEqual(['thumb'])
    const named = await get(kit, item.variants.thumb)
    expect(named.status).toBe(200)
    expect((await imageOf(named)).height).toBe(64)

    const original = await get(kit, `/assets/storage/attach/view/${rec.id}`)
    expect(original.headers.get('content-type')).toBe('application/pdf')
    expect(Buffer.from(await original.arrayBuffer()).equals(bytes)).toBe(true)
    const download = await get(kit, `/assets/storage/attach/download/${rec.id}`)
    expect(Buffer.from(await download.arrayBuffer()).equals(bytes)).toBe(true)
  })

  it('a video: media {width, height, durationMs} and a frame as its preview; audio: media {durationMs}, no preview', async () => {
    const v = await saveFile(kit, video, 'clip.mp4', 'v1')
    const a = await saveFile(kit, audio, 'tone.m4a', 'v1')
    await kit.storage.variantJobsIdle()
    const [clip, tone] = await lookup(kit, 'v1')
    expect(clip.id).toBe(v.id)
    expect(clip.media).toMatchObject({ width: 320, height: 240 })
    expect(Math.abs(clip.media.durationMs - 4000)).toBeLessThan(150)
    expect(clip.preview).toBe('made')
    // A box the preview fits in already answers the preview itself, never the video.
    for (const box of ['w=256', 'w=640', 'w=256&h=192']) {
      const within = await get(kit, `/assets/storage/attach/view/${v.id}?${box}`)
      expect([within.status, within.headers.get('content-type')], box).toEqual([200, 'image/jpeg'])
    }
    const frame = await get(kit, clip.thumbnailUrl)
    expect(frame.headers.get('content-type')).toBe('image/jpeg')
    const f = await imageOf(frame)
    expect([f.width, f.height]).toEqual([256, 192])
    expect(tone.id).toBe(a.id)
    expect(Math.abs(tone.media.durationMs - 3000)).toBeLessThan(150)
    expect(tone.preview).toBeUndefined()
    expect(tone.thumbnailUrl).toBeUndefined()
    const none = await get(kit, `/assets/storage/attach/view/${a.id}?preview=1`)
    expect([none.status, (await none.json()).code]).toEqual([404, 'no-preview'])
    // An audio file with a box is served as it is (no picture to resize).
    expect((await get(kit, `/assets/storage/attach/view/${a.id}?w=50`)).headers.get('content-type')).toMatch(/^audio\//)
  })

  it('a "video" without a video stream: its length is its media, its preview failed (no-video-stream)', async () => {
    const mp4 = join(work, 'sound-only.mp4')
    await run('ffmpeg', [
      '-hide_banner',
      '-v',
      'error',
      '-y',
      '-f',
      'lavfi',
      '-i',
      'sine=frequency=220:duration=2',
      '-c:a',
      'aac',
      '-f',
      'mp4',
      mp4,
    ])
    const rec = await saveFile(kit, new Blob([new Uint8Array(await readFile(mp4))], { type: 'video/mp4' }), 'sound-only.mp4', 'ns1')
    expect(rec.fileType).toBe('video/mp4')
    await kit.storage.variantJobsIdle()
    const [item] = await lookup(kit, 'ns1')
    expect(Object.keys(item.media)).toEqual(['durationMs'])
    expect(Math.abs(item.media.durationMs - 2000)).toBeLessThan(150)
    expect(item.preview).toBe('failed')
    const res = await get(kit, `/assets/storage/attach/view/${rec.id}?preview=1`)
    expect(await res.json()).toMatchObject({ code: 'preview-failed', message: expect.stringContaining('no-video-stream') })
  })

  it('a file the tools refuse: recorded as failed once (no retry), 404 preview-failed, the file still served', async () => {
    const jobsBefore = kit.warnings.length
    const fake = new Blob([new Uint8Array(Buffer.from('%PDF-1.4\nthis is no PDF at all\n'))], { type: 'application/pdf' })
    const rec = await saveFile(kit, fake, 'broken.pdf', 'f1')
    await kit.storage.variantJobsIdle()
    const [item] = await lookup(kit, 'f1')
    expect(item.preview).toBe('failed')
    expect(item.thumbnailUrl).toBeUndefined()
    expect(item.media).toBeNull()
    const res = await get(kit, `/assets/storage/attach/view/${rec.id}?w=100`)
    expect(res.status).toBe(404)
    expect(await res.json()).toMatchObject({ code: 'preview-failed', message: expect.stringContaining('corrupt') })
    expect((await get(kit, `/assets/storage/attach/view/${rec.id}`)).status).toBe(200)
    expect(kit.warnings.slice(jobsBefore).filter((w) => w.includes('could not be previewed'))).toHaveLength(1)
  })

  it('bad queries: ?preview=1 with a box is 400, on an image 404 no-preview', async () => {
    const img = await saveFile(kit, await png(20, 20), 'dot.png', 'q1')
    const both = await get(kit, `/assets/storage/attach/view/${img.id}?preview=1&w=10`)
    expect([both.status, (await both.json()).code]).toEqual([400, 'bad-request'])
    const wrong = await get(kit, `/assets/storage/attach/view/${img.id}?preview=yes`)
    expect(wrong.status).toBe(400)
    const none = await get(kit, `/assets/storage/attach/view/${img.id}?preview=1`)
    expect([none.status, (await none.json()).code]).toEqual([404, 'no-preview'])
  })

  it('reports each kind on in the readiness details', async () => {
    expect((await kit.storage.readiness()).previews).toEqual({ pdf: 'on', video: 'on', audio: 'on' })
  })
})

describe('a preview not made yet', () => {
  let kit: Kit
  beforeAll(async () => {
    // No background work: the job is never run, so the preview stays pending.
    kit = await makeKit('sqlite', { backgroundWork: false })
  })
  afterAll(() => kit?.cleanup())

  it('the lookup says pending; a box answers 503 preview-pending with Retry-After', async () => {
    const rec = await saveFile(kit, pdf(1), 'later.pdf', 'n1')
    expect(rec.preview).toBe('pending')
    expect(rec.media).toBeNull()
    const res = await get(kit, `/assets/storage/attach/view/${rec.id}?w=100`)
    expect(res.status).toBe(503)
    expect(res.headers.get('retry-after')).toBe('2')
    expect((await res.json()).code).toBe('preview-pending')
    expect((await get(kit, `/assets/storage/attach/view/${rec.id}?preview=1`)).status).toBe(503)
  })
})

describe('tools missing or hanging', () => {
  let bin: string
  beforeAll(async () => {
    bin = join(work, 'bin')
    await run('mkdir', ['-p', bin])
    await writeFile(join(bin, 'ffmpeg'), '#!/bin/sh\nsleep 60\n')
    await chmod(join(bin, 'ffmpeg'), 0o755)
  })

  it('a missing pdftoppm turns PDF previews off: one warning, /readyz says why, uploads still work', async () => {
    const kit = await makeKit('sqlite', { config: { previews: { pdftoppm: join(work, 'no-such-pdftoppm') } } })
    try {
      expect(kit.warnings.filter((w) => w.includes('pdftoppm'))).toHaveLength(1)
      const readiness = await kit.storage.readiness()
      expect(readiness.ready).toBe(true)
      expect(readiness.previews.pdf).toMatch(/^off: pdftoppm not found/)
      expect(readiness.previews.video).toBe('on')
      const rec = await saveFile(kit, pdf(1), 'off.pdf', 'o1')
      await kit.storage.variantJobsIdle()
      const [item] = await lookup(kit, 'o1')
      expect(item.preview).toBe('off')
      expect(item.media).toBeNull()
      const res = await get(kit, `/assets/storage/attach/view/${rec.id}?w=100`)
      expect([res.status, (await res.json()).code]).toEqual([404, 'previews-off'])
      const health = await createHealthHandlers(kit.storage).readyz()
      expect(health.status).toBe(200)
      expect((await health.json()).previews.pdf).toMatch(/^off: pdftoppm not found/)
    } finally {
      await kit.cleanup()
    }
  })

  it('an ffmpeg that hangs: killed at the timeout, tried again, then recorded as failed (timeout)', async () => {
    const kit = await makeKit('sqlite', {
      config: { previews: { ffmpeg: join(bin, 'ffmpeg'), timeout: '1s' }, 'variant-jobs': { 'retry-limit': 1 } },
    })
    try {
      const started = Date.now()
      const rec = await saveFile(kit, video, 'hang.mp4', 'h1')
      await kit.storage.variantJobsIdle()
      const [item] = await lookup(kit, 'h1')
      // Its media came from ffprobe before the frame was asked of the hanging ffmpeg.
      expect(item.media).toMatchObject({ width: 320, height: 240 })
      expect(item.preview).toBe('failed')
      const res = await get(kit, `/assets/storage/attach/view/${rec.id}?preview=1`)
      expect(await res.json()).toMatchObject({ code: 'preview-failed', message: expect.stringContaining('timeout') })
      // Two tries of 1 s and a retry delay of 1 s: well within 20 s.
      expect(Date.now() - started).toBeLessThan(20_000)
      const { stdout } = await run('ps', ['-eo', 'args'])
      expect(stdout).not.toContain(join(bin, 'ffmpeg'))
    } finally {
      await kit.cleanup()
    }
  })
})
