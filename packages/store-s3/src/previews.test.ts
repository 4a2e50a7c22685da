/**
 * PDF and video previews of files kept on s3rver: ffprobe and ffmpeg read the video in place through a
 * short-lived presigned address (range requests, never the whole object: counted at s3rver), pdftoppm a
 * temporary copy of the PDF; the records get their media and a preview, and boxes are made from it.
 */
import { execFile } from 'node:child_process'
import { mkdtemp, readFile, rm } from 'node:fs/promises'
import { createServer, request as httpRequest, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { promisify } from 'node:util'
import { type AttachHandler, type AttachStorage, createAttachHandler, createAttachStorage } from 'attach-storage'
import { pdfBytes } from '../../attach-storage/src/testing/pdf-kit.js'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startS3rver, type TestS3Server } from './test-server.js'

const run = promisify(execFile)
const API = 'http://x/api/storage'

/** A relay in front of s3rver counting the bytes it answers for GETs of objects, and the ranges asked. */
async function countingRelay(target: string): Promise<{ url: string; bytes: () => number; ranges: string[]; close(): Promise<void> }> {
  const to = new URL(target)
  let bytes = 0
  const ranges: string[] = []
  const server: Server = createServer((req, res) => {
    if (req.method === 'GET' && req.headers.range) ranges.push(req.headers.range)
    const upstream = httpRequest(
      { host: to.hostname, port: to.port, method: req.method, path: req.url, headers: req.headers },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, answer.headers)
        // Counted as it is written to the reader; a reader that hangs up stops the object's transfer.
        answer.on('data', (chunk: Buffer) => {
          if (req.method === 'GET') bytes += chunk.length
          if (!res.write(chunk)) answer.pause()
        })
        res.on('drain', () => answer.resume())
        answer.on('end', () => res.end())
        res.on('close', () => answer.destroy())
      },
    )
    upstream.on('error', () => res.destroy())
    req.pipe(upstream)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    bytes: () => bytes,
    ranges,
    close: () => new Promise((resolve) => server.close(() => resolve())),
  }
}

describe('previews of files on s3rver', () => {
  let s3: TestS3Server
  let relay: Awaited<ReturnType<typeof countingRelay>>
  let dir: string
  let storage: AttachStorage
  let handler: AttachHandler
  let video: Buffer

  beforeAll(async () => {
    s3 = await startS3rver('attach-previews', { verifyPresigned: true })
    relay = await countingRelay(s3.endpoint)
    dir = await mkdtemp(join(tmpdir(), 'attach-s3-previews-'))
    // 30 s of noise at a high bitrate (about 10 MB), its index at the front: a frame needs a few ranges.
    const mp4 = join(dir, 'clip.mp4')
    await run('ffmpeg', [
      ...['-hide_banner', '-v', 'error', '-y', '-f', 'lavfi', '-i', 'nullsrc=s=320x240:r=10:d=30,geq=random(1)*255:128:128'],
      ...['-c:v', 'mpeg4', '-q:v', '2', '-movflags', '+faststart', mp4],
    ])
    video = await readFile(mp4)
    storage = await createAttachStorage({
      config: {
        directory: { baseDir: join(dir, 'files'), tmpDir: join(dir, 'tmp') },
        stores: { s3: { ...s3.settings, endpoint: relay.url } },
        defaultStore: 's3',
        previews: { 'max-side': 200 },
        domains: { demo: { categories: { default: {} } } },
      },
      logger: { info: () => {}, warn: () => {}, error: () => {} },
      authenticate: () => ({ id: 1 }),
    })
    handler = createAttachHandler(storage)
  }, 120_000)
  afterAll(async () => {
    await storage?.close()
    await relay?.close()
    await s3?.close()
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  const save = async (bytes: Buffer, name: string, type: string, refKey: string) => {
    const form = new FormData()
    form.append('refDomain', 'demo')
    form.append('refCategory', 'default')
    form.append('file', new Blob([new Uint8Array(bytes)], { type }), name)
    const up = await handler.fetch(new Request(`${API}/attach/tmp`, { method: 'POST', body: form }))
    const answer = await up.json()
    const item = answer.files?.[0]
    if (!item?.name) throw new Error(`temporary upload answered ${up.status}: ${JSON.stringify(answer)}`)
    const res = await handler.fetch(
      new Request(`${API}/attach/demo/${refKey}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ default: [{ savedName: item.name, displayName: name }] }),
      }),
    )
    expect(res.status).toBe(200)
    return (await res.json()).attachList.at(-1)
  }
  const lookup = async (refKey: string) => (await (await handler.fetch(new Request(`${API}/attach/demo/${refKey}/default`))).json()).default

  it('a video: ffmpeg reads a few ranges of the object through a presigned address, not the whole file', async () => {
    await save(video, 'noise.mp4', 'video/mp4', 'v1')
    const before = relay.bytes()
    relay.ranges.length = 0
    await storage.variantJobsIdle()
    const [item] = await lookup('v1')
    expect(item.media).toMatchObject({ width: 320, height: 240 })
    expect(Math.abs(item.media.durationMs - 30_000)).toBeLessThan(200)
    expect(item.preview).toBe('made')
    const read = relay.bytes() - before
    // The preview's own upload and the thumbnail are not GETs of the video; the probe and the frame are.
    expect(relay.ranges.length).toBeGreaterThan(0)
    expect(read).toBeLessThan(video.length / 2)
    const thumb = await handler.fetch(new Request(`http://x${item.thumbnailUrl}`))
    expect(thumb.headers.get('content-type')).toBe('image/jpeg')
    const meta = await sharp(Buffer.from(await thumb.arrayBuffer())).metadata()
    expect([meta.width, meta.height]).toEqual([200, 150])
  })

  it('a PDF: rendered from a temporary copy of the object; a box is made from the preview', async () => {
    const rec = await save(pdfBytes({ pages: 2 }), 'two.pdf', 'application/pdf', 'p1')
    await storage.variantJobsIdle()
    const [item] = await lookup('p1')
    expect(item.media).toEqual({ pages: 2 })
    expect(item.preview).toBe('made')
    const small = await handler.fetch(new Request(`${API.replace('/api/', '/assets/')}/attach/view/${rec.id}?w=50`))
    expect(small.headers.get('content-type')).toBe('image/jpeg')
    expect((await sharp(Buffer.from(await small.arrayBuffer())).metadata()).width).toBe(50)
  })
})
