import { execFile } from 'node:child_process'
import { statSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { promisify } from 'node:util'
import sharp from 'sharp'
import { beforeAll, describe, expect, it } from 'vitest'
import { aviClaiming, makeAudio, makeVideo, serveFile, stallingServer, toolChildren, truncateFile } from '../testing/video-kit.js'
import { findPreviewTools } from './preview-tools.js'
import { previewBounds, previewFailure, useToolFolder } from '../testing/preview-test-kit.js'
import { type AvProbe, probeAv, videoFrame } from './video-preview.js'

const tools = findPreviewTools()
const BOUNDS = previewBounds()
const folder = useToolFolder('attach-video-preview-', ['ffmpeg', 'ffprobe'])
const dir = (): string => folder.dir()
let mp4: string

beforeAll(async () => {
  mp4 = await makeVideo(join(dir(), 'clip.mp4'))
})

async function timed<T>(label: string, work: () => Promise<T>): Promise<T> {
  const started = performance.now()
  const result = await work()
  console.log(`${label}: ${(performance.now() - started).toFixed(0)} ms`)
  return result
}

describe('video and audio previews with ffmpeg', () => {
  it('probes a 5 s 320 × 240 mp4 and takes a JPEG frame, not scaled up', async () => {
    const probe = await timed('ffprobe mp4', () => probeAv(mp4, tools, BOUNDS))
    expect(probe).toEqual({ kind: 'video', durationMs: 5000, width: 320, height: 240 })
    const frame = await timed('ffmpeg frame mp4', () => videoFrame(mp4, probe, tools, BOUNDS))
    expect(frame).toMatchObject({ width: 320, height: 240 })
    expect(await sharp(frame.jpeg).metadata()).toMatchObject({ format: 'jpeg', width: 320, height: 240 })
    // A smaller maxSide scales down, keeping the shape.
    const small = await videoFrame(mp4, probe, tools, { ...BOUNDS, maxSide: 160 })
    expect(small).toMatchObject({ width: 160, height: 120 })
  })

  it('probes a webm and a video with sound, and takes their frames', async () => {
    const webm = await makeVideo(join(dir(), 'clip.webm'), { seconds: 2, width: 640, height: 360 })
    const probe = await timed('ffprobe webm', () => probeAv(webm, tools, BOUNDS))
    expect(probe).toMatchObject({ kind: 'video', width: 640, height: 360 })
    expect(Math.abs(probe.durationMs - 2000)).toBeLessThan(100)
    expect(await videoFrame(webm, probe, tools, { ...BOUNDS, maxSide: 320 })).toMatchObject({ width: 320, height: 180 })

    const withSound = await makeVideo(join(dir(), 'sound.mp4'), { seconds: 2, audio: true })
    expect(await probeAv(withSound, tools, BOUNDS)).toMatchObject({ kind: 'video', width: 320, height: 240 })
  })

  it('a duration that overstates the video: the seek lands past the last frame, the first frame is taken', async () => {
    // 10 % of 600 s, at most 5 s: past the last frame (4.96 s) of this 5 s clip.
    const overstated: AvProbe = { kind: 'video', durationMs: 600_000, width: 320, height: 240 }
    expect(await videoFrame(mp4, overstated, tools, BOUNDS)).toMatchObject({ width: 320, height: 240 })
  })

  it('a video rotated 90° by its metadata: width and height swapped, the frame upright', async () => {
    const rotated = await makeVideo(join(dir(), 'rotated.mp4'), { seconds: 2, rotate: 90 })
    const probe = await probeAv(rotated, tools, BOUNDS)
    expect(probe).toEqual({ kind: 'video', durationMs: 2000, width: 240, height: 320 })
    expect(await videoFrame(rotated, probe, tools, BOUNDS)).toMatchObject({ width: 240, height: 320 })
  })

  it('audio only (m4a, mp3): kind audio with its duration; no frame: no-video-stream', async () => {
    for (const name of ['tone.m4a', 'tone.mp3']) {
      const path = await makeAudio(join(dir(), name), 3)
      const probe = await timed(`ffprobe ${name}`, () => probeAv(path, tools, BOUNDS))
      expect(probe.kind).toBe('audio')
      expect(probe.width).toBeUndefined()
      expect(Math.abs(probe.durationMs - 3000)).toBeLessThan(120)
      const err = await previewFailure(videoFrame(path, probe, tools, BOUNDS))
      expect(err).toMatchObject({ code: 'no-video-stream', permanent: true, message: 'the file has no video stream to take a frame from' })
    }
  })

  it('an mp4 cut in half with its index at the end: corrupt', async () => {
    const whole = await makeVideo(join(dir(), 'index-last.mp4'), { faststart: false })
    const half = await truncateFile(whole, join(dir(), 'half.mp4'), 0.5)
    const err = await previewFailure(probeAv(half, tools, BOUNDS))
    expect(err).toMatchObject({ code: 'corrupt', permanent: true })
    expect(err.message).toMatch(/^not a readable audio or video file: .*(moov atom not found|Invalid data)/)
    // Not a video at all.
    const text = join(dir(), 'notes.mp4')
    writeFileSync(text, 'not a video\n'.repeat(100))
    expect((await previewFailure(probeAv(text, tools, BOUNDS))).code).toBe('corrupt')
  })

  it('a frame claiming 100,000 × 100,000 pixels, or 16,000 × 16,000 over the bound: too-many-pixels, nothing decoded', async () => {
    const absurd = await aviClaiming(join(dir(), 'absurd.avi'), 100_000, 100_000)
    const err = await timed('ffprobe 100,000 x 100,000 claim', () => previewFailure(probeAv(absurd, tools, BOUNDS)))
    expect(err).toMatchObject({
      code: 'too-many-pixels',
      permanent: true,
      message: 'the video claims 100000 × 100000 pixels a frame, more than the 100000000 allowed',
    })
    const big = await aviClaiming(join(dir(), 'big.avi'), 16_000, 16_000)
    expect((await previewFailure(probeAv(big, tools, BOUNDS))).message).toBe(
      'the video claims 16000 × 16000 pixels a frame, more than the 100000000 allowed',
    )
    // A real 320 × 240 video under a lower bound.
    const low = { ...BOUNDS, maxInputPixels: 320 * 240 - 1 }
    expect((await previewFailure(probeAv(mp4, tools, low))).code).toBe('too-many-pixels')
    // videoFrame checks the probe before it starts ffmpeg.
    const claimed: AvProbe = { kind: 'video', durationMs: 5000, width: 100_000, height: 100_000 }
    const started = performance.now()
    expect((await previewFailure(videoFrame(mp4, claimed, tools, BOUNDS))).code).toBe('too-many-pixels')
    expect(performance.now() - started).toBeLessThan(100)
  })

  it('longer than maxDurationSeconds: too-long', async () => {
    const err = await previewFailure(probeAv(mp4, tools, { ...BOUNDS, maxDurationSeconds: 2 }))
    expect(err).toMatchObject({ code: 'too-long', permanent: true, message: 'the file lasts 5.0 s, more than the 2 s allowed' })
    const probe: AvProbe = { kind: 'video', durationMs: 5000, width: 320, height: 240 }
    expect((await previewFailure(videoFrame(mp4, probe, tools, { ...BOUNDS, maxDurationSeconds: 2 }))).code).toBe('too-long')
  })

  it('an address that answers headers and then nothing: timeout after timeoutSeconds, the tool killed', async () => {
    const server = await stallingServer()
    try {
      const seen = new Set<number>()
      const watch = setInterval(() => {
        for (const pid of toolChildren(['ffprobe'])) seen.add(pid)
      }, 100)
      // ffmpeg taking a frame from it meanwhile (the two timeouts run out side by side): the same.
      const probe: AvProbe = { kind: 'video', durationMs: 5000, width: 320, height: 240 }
      const framing = videoFrame(server.url, probe, tools, { ...BOUNDS, timeoutSeconds: 2 })
      framing.catch(() => {}) // read below; not an unhandled rejection should a check above fail first
      const started = performance.now()
      const err = await previewFailure(probeAv(server.url, tools, { ...BOUNDS, timeoutSeconds: 2 }))
      const ms = performance.now() - started
      clearInterval(watch)
      expect(err).toMatchObject({ code: 'timeout', permanent: false, message: 'ffprobe did not finish within 2 s' })
      expect(ms).toBeGreaterThanOrEqual(1900)
      expect(ms).toBeLessThan(4000)
      expect(seen.size).toBe(1)
      for (const pid of seen) expect(() => process.kill(pid, 0)).toThrow(/ESRCH/)
      console.log(`stalled address: timeout after ${ms.toFixed(0)} ms, ffprobe pid ${[...seen].join()} gone`)
      const frame = await previewFailure(framing)
      expect(frame).toMatchObject({ code: 'timeout', permanent: false, message: 'ffmpeg did not finish within 2 s' })
    } finally {
      await server.close()
    }
  })

  it('over http with ranges: the frame of a 60 s video reads a small part of it', async () => {
    const long = await makeVideo(join(dir(), 'long.mp4'), {
      seconds: 60,
      width: 1280,
      height: 720,
      source: 'testsrc2',
      qp: 12,
      gop: 25,
    })
    const size = statSync(long).size
    const server = await serveFile(long)
    try {
      const probe = await timed('ffprobe over http', () => probeAv(server.url, tools, BOUNDS))
      expect(probe).toEqual({ kind: 'video', durationMs: 60_000, width: 1280, height: 720 })
      const afterProbe = server.bytesSent()
      const frame = await timed('ffmpeg frame over http', () => videoFrame(server.url, probe, tools, BOUNDS))
      expect(frame).toMatchObject({ width: 1024, height: 576 })
      const total = server.bytesSent()
      console.log(
        `60 s video of ${size} bytes over http: ${afterProbe} bytes for the probe, ${total - afterProbe} for the frame; ranges ${server.ranges.join(' | ')}`,
      )
      expect(server.ranges.some((r) => /^bytes=[1-9]\d*-/.test(r))).toBe(true)
      expect(total).toBeLessThan(size / 4)
    } finally {
      await server.close()
    }
  })

  it('refuses an HLS playlist or an ffconcat script that points at other files: corrupt, nothing read', async () => {
    // Beside it, another upload: what a playlist would make ffmpeg read.
    const secret = await makeVideo(join(dir(), 'someone-elses.mp4'), { seconds: 3 })
    const m3u8 = join(dir(), 'playlist.m3u8')
    writeFileSync(m3u8, '#EXTM3U\n#EXT-X-TARGETDURATION:3\n#EXTINF:3,\nsomeone-elses.mp4\n#EXTINF:3,\nfile:///etc/passwd\n#EXT-X-ENDLIST\n')
    const concat = join(dir(), 'script.ffconcat')
    writeFileSync(concat, `ffconcat version 1.0\nfile someone-elses.mp4\nfile ${secret}\nfile /etc/passwd\n`)
    // Plain ffprobe follows a playlist to the other upload: the risk.
    const sibling = join(dir(), 'sibling.m3u8')
    writeFileSync(sibling, '#EXTM3U\n#EXT-X-TARGETDURATION:3\n#EXTINF:3,\nsomeone-elses.mp4\n#EXT-X-ENDLIST\n')
    const plain = await promisify(execFile)(tools.ffprobe as string, [
      '-v',
      'error',
      '-show_entries',
      'format=format_name,duration',
      sibling,
    ])
    expect(plain.stdout).toMatch(/format_name=hls[\s\S]*duration=3/)
    for (const path of [sibling, m3u8, concat]) {
      const err = await previewFailure(probeAv(path, tools, BOUNDS))
      expect(err).toMatchObject({
        code: 'corrupt',
        permanent: true,
        message: 'not an audio or video file this server reads (playlists and scripts are refused)',
      })
      const frame = await previewFailure(videoFrame(path, { kind: 'video', durationMs: 3000, width: 320, height: 240 }, tools, BOUNDS))
      expect(frame.code).toBe('corrupt')
    }
    // Other protocols never reach ffmpeg.
    expect((await previewFailure(probeAv('concat:/etc/passwd|/etc/passwd', tools, BOUNDS))).code).toBe('tool-failed')
  })

  it('a memory cap too low for ffprobe to start: tool-failed, worth a retry after the setting is fixed', async () => {
    const err = await previewFailure(probeAv(mp4, tools, { ...BOUNDS, memoryBytes: 64 * 1024 * 1024 }))
    expect(err).toMatchObject({ code: 'tool-failed', permanent: false })
    expect(err.message).toMatch(/^ffprobe cannot start within the memory bound of 64 MiB/)
  })
})
