import { randomBytes } from 'node:crypto'
import { mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LocalStore } from '../stores/local-store.js'
import type { PresignGetOptions, Store } from '../stores/store.js'
import { makeVideo } from '../testing/video-kit.js'
import { toolFile, toolInput } from './preview-source.js'
import { findPreviewTools, PreviewError } from './preview-tools.js'
import { probeAv, videoFrame } from './video-preview.js'

let dir: string
let local: LocalStore
const BYTES = randomBytes(100_000)
const KEY = 'demo/2026/11/file.bin'

/** The local store seen as a remote one: no localPath, no presignGet (what an SFTP or FTP store is). */
function remoteView(store: Store): Store {
  return {
    name: 'remote',
    type: 'sftp',
    put: (key, body, options) => store.put(key, body, options),
    get: (key, range) => store.get(key, range),
    stat: (key) => store.stat(key),
    exists: (key) => store.exists(key),
    move: (from, to) => store.move(from, to),
    copy: (from, to) => store.copy(from, to),
    delete: (key) => store.delete(key),
    list: (prefix) => store.list(prefix),
    close: async () => {},
  }
}

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'attach-preview-source-'))
  local = new LocalStore('local', { baseDir: join(dir, 'store') })
  await local.put(KEY, BYTES)
})
afterAll(async () => {
  await local.close()
  await rm(dir, { recursive: true, force: true })
})

describe('where a preview tool reads a stored file', () => {
  it('a local store: the file itself, for toolInput and toolFile', async () => {
    const source = await toolInput(local, KEY, BYTES.length, { ttlSeconds: 60 })
    expect(source).toMatchObject({ kind: 'path', input: local.localPath(KEY) })
    await source.close()
    const file = await toolFile(local, KEY, BYTES.length, { maxBytes: 10 })
    expect(file.path).toBe(local.localPath(KEY))
    await file.close()
    expect(readFileSync(local.localPath(KEY))).toEqual(BYTES)
  })

  it('a store that signs addresses: a presigned GET with the given lifetime', async () => {
    const asked: PresignGetOptions[] = []
    const signing: Store = {
      ...remoteView(local),
      presignGet: async (key, options) => {
        asked.push(options)
        return `https://bucket.example/${key}?X-Amz-Expires=${options.expiresIn}`
      },
    }
    const source = await toolInput(signing, KEY, BYTES.length, { ttlSeconds: 90 })
    expect(source).toMatchObject({ kind: 'url', input: `https://bucket.example/${KEY}?X-Amz-Expires=90` })
    expect(asked).toEqual([{ expiresIn: 90, contentType: 'application/octet-stream', contentDisposition: 'attachment' }])
    await source.close()
  })

  it('any other store: a loopback server on a secret path, with ranges; close() frees it', async () => {
    const source = await toolInput(remoteView(local), KEY, BYTES.length, { ttlSeconds: 60 })
    expect(source.kind).toBe('url')
    expect(source.input).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/[A-Za-z0-9_-]{43}$/)

    const whole = await fetch(source.input)
    expect(whole.status).toBe(200)
    expect(whole.headers.get('accept-ranges')).toBe('bytes')
    expect(whole.headers.get('content-length')).toBe(String(BYTES.length))
    expect(Buffer.from(await whole.arrayBuffer())).toEqual(BYTES)

    const part = await fetch(source.input, { headers: { range: 'bytes=1000-1999' } })
    expect(part.status).toBe(206)
    expect(part.headers.get('content-range')).toBe(`bytes 1000-1999/${BYTES.length}`)
    expect(part.headers.get('content-length')).toBe('1000')
    expect(Buffer.from(await part.arrayBuffer())).toEqual(BYTES.subarray(1000, 2000))

    const open = await fetch(source.input, { headers: { range: 'bytes=99000-' } })
    expect(open.status).toBe(206)
    expect(Buffer.from(await open.arrayBuffer())).toEqual(BYTES.subarray(99_000))
    const suffix = await fetch(source.input, { headers: { range: 'bytes=-10' } })
    expect(suffix.headers.get('content-range')).toBe(`bytes 99990-99999/${BYTES.length}`)
    expect(Buffer.from(await suffix.arrayBuffer())).toEqual(BYTES.subarray(99_990))
    const past = await fetch(source.input, { headers: { range: 'bytes=100000-' } })
    expect(past.status).toBe(416)
    await past.arrayBuffer()

    const origin = new URL(source.input).origin
    for (const path of ['/', '/file.bin', `/${'A'.repeat(43)}`]) {
      const other = await fetch(`${origin}${path}`)
      expect(other.status).toBe(404)
      await other.arrayBuffer()
    }
    const post = await fetch(source.input, { method: 'POST', body: 'x' })
    expect(post.status).toBe(404)
    await post.arrayBuffer()

    await source.close()
    await source.close()
    await expect(fetch(source.input)).rejects.toThrow()
  })

  it('a symbolic link at a local key is not handed to a tool: the store refuses it', async () => {
    const outside = join(dir, 'outside.txt')
    writeFileSync(outside, 'not yours')
    mkdirSync(join(dir, 'store', 'demo', 'links'), { recursive: true })
    symlinkSync(outside, join(dir, 'store', 'demo', 'links', 'link.bin'))
    const source = await toolInput(local, 'demo/links/link.bin', 9, { ttlSeconds: 60 })
    try {
      expect(source.kind).toBe('url')
      // The store's get refuses the link: the tool gets no bytes.
      await expect(fetch(source.input).then((r) => r.text())).rejects.toThrow()
    } finally {
      await source.close()
    }
  })

  it('toolFile copies a remote object into the temporary folder and close() removes it; over maxBytes: too-long, nothing left', async () => {
    const tmp = join(dir, 'tmp')
    mkdirSync(tmp)
    const remote = remoteView(local)
    const file = await toolFile(remote, KEY, BYTES.length, { maxBytes: BYTES.length, tmpDir: tmp })
    expect(file.path.startsWith(tmp)).toBe(true)
    expect(readFileSync(file.path)).toEqual(BYTES)
    expect(readdirSync(tmp)).toHaveLength(1)
    await file.close()
    expect(readdirSync(tmp)).toEqual([])

    const refused = await toolFile(remote, KEY, BYTES.length, { maxBytes: 1000, tmpDir: tmp }).catch((e: unknown) => e)
    expect(refused).toBeInstanceOf(PreviewError)
    expect(refused).toMatchObject({
      code: 'too-long',
      permanent: true,
      message: 'the file has 100000 bytes, more than the 1000 a preview tool may copy',
    })
    // A size that lies: the copy stops once it passes maxBytes.
    const lying = await toolFile(remote, KEY, 10, { maxBytes: 50_000, tmpDir: tmp }).catch((e: unknown) => e)
    expect(lying).toMatchObject({ code: 'too-long' })
    expect((lying as Error).message).toMatch(/^the file has \d+ bytes, more than the 50000 a preview tool may copy$/)
    expect(readdirSync(tmp)).toEqual([])
    // A missing object: the store's error, nothing left.
    await expect(toolFile(remote, 'demo/missing.bin', 10, { maxBytes: 100, tmpDir: tmp })).rejects.toMatchObject({ code: 'not-found' })
    expect(readdirSync(tmp)).toEqual([])
  })

  it('ffprobe and ffmpeg read a video from a store without local files through the loopback server', async () => {
    const tools = findPreviewTools()
    const video = await makeVideo(join(dir, 'clip.mp4'), { seconds: 3 })
    await local.put('demo/clip.mp4', readFileSync(video))
    const remote = remoteView(local)
    const size = (await remote.stat('demo/clip.mp4')).size
    const source = await toolInput(remote, 'demo/clip.mp4', size, { ttlSeconds: 60 })
    try {
      const bounds = {
        maxInputPixels: 1e8,
        maxPages: 10_000,
        maxDurationSeconds: 86_400,
        timeoutSeconds: 30,
        maxSide: 1024,
        memoryBytes: 1024 ** 3,
      }
      const probe = await probeAv(source.input, tools, bounds)
      expect(probe).toEqual({ kind: 'video', durationMs: 3000, width: 320, height: 240 })
      expect(await videoFrame(source.input, probe, tools, bounds)).toMatchObject({ width: 320, height: 240 })
      await source.close()
      // An address that no longer answers: worth a retry (a new address), not a corrupt file.
      const gone = await probeAv(source.input, tools, bounds).catch((e: unknown) => e)
      expect(gone).toBeInstanceOf(PreviewError)
      expect(gone).toMatchObject({ code: 'tool-failed', permanent: false })
      expect((gone as Error).message).toMatch(/^ffprobe could not read the file: .*Connection refused/)
    } finally {
      await source.close()
    }
  })
})
