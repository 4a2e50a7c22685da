/**
 * Small videos and audio files for the preview tests and the bench, made with ffmpeg's lavfi sources
 * (Debian's ffmpeg, which test/global-setup.ts installs): mp4 with its index at the front or at the end,
 * webm, audio-only m4a and mp3, rotated, truncated, and an AVI whose header claims any frame size. Also a
 * loopback HTTP server with Range support that counts the bytes it sends, one that stalls after its
 * headers, and a look at which tools this process still has running.
 */
import { execFile, execFileSync } from 'node:child_process'
import { readdirSync, readFileSync } from 'node:fs'
import { open, readFile, rm, stat, writeFile } from 'node:fs/promises'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { promisify } from 'node:util'
import { findPreviewTools } from '../media/preview-tools.js'

const run = promisify(execFile)

/** Debian's ffmpeg, when installed. */
export const FFMPEG = findPreviewTools().ffmpeg

let encoders: string | undefined
/** True when this ffmpeg has the named encoder (`libx264`, `libvpx`, `libmp3lame`, …). */
export function hasEncoder(name: string): boolean {
  if (!FFMPEG) return false
  encoders ??= execFileSync(FFMPEG, ['-hide_banner', '-encoders'], { encoding: 'utf8' })
  return new RegExp(`^\\s*\\S+\\s+${name}\\s`, 'm').test(encoders)
}

async function ffmpeg(args: string[]): Promise<void> {
  if (!FFMPEG) throw new Error('ffmpeg is not installed (Debian: apt-get install ffmpeg; test/global-setup.ts installs it)')
  await run(FFMPEG, ['-nostdin', '-hide_banner', '-v', 'error', '-y', ...args], { maxBuffer: 1024 * 1024 })
}

/** What {@link makeVideo} makes. The container follows the file's extension (`.mp4`, `.webm`, `.mkv`, `.mov`). */
export interface VideoOptions {
  /** @default 5 */
  seconds?: number
  /** @default 320 */
  width?: number
  /** @default 240 */
  height?: number
  /** @default 25 */
  rate?: number
  /** Frames between key frames. @default 50 */
  gop?: number
  /** mp4/mov: the index (moov) before the frames, so a reader needs only the start to begin. @default true */
  faststart?: boolean
  /** A 440 Hz tone beside the picture. @default false */
  audio?: boolean
  /** Rotation metadata in degrees (mp4/mov display matrix), the pixels left as they are. */
  rotate?: number
  /** Video bit rate, e.g. `2M`. */
  bitrate?: string
  /** h264's constant quantizer (0 lossless … 51): a low one with `testsrc2` makes a large file fast. */
  qp?: number
  /** The lavfi source: `testsrc2` moves more, so it compresses less. @default 'testsrc' */
  source?: 'testsrc' | 'testsrc2'
}

/** A test-pattern video (lavfi `testsrc`): h264 when libx264 is there (else mpeg4) in mp4/mov/mkv, vp8 in webm. */
export async function makeVideo(path: string, options: VideoOptions = {}): Promise<string> {
  const { seconds = 5, width = 320, height = 240, rate = 25, gop = 50, faststart = true } = options
  const webm = path.endsWith('.webm')
  const codec = webm ? ['-c:v', 'libvpx'] : hasEncoder('libx264') ? ['-c:v', 'libx264', '-preset', 'ultrafast'] : ['-c:v', 'mpeg4']
  const args = ['-f', 'lavfi', '-i', `${options.source ?? 'testsrc'}=size=${width}x${height}:rate=${rate}:duration=${seconds}`]
  if (options.audio) args.push('-f', 'lavfi', '-i', `sine=frequency=440:duration=${seconds}`)
  args.push(...codec, '-pix_fmt', 'yuv420p', '-g', String(gop))
  if (options.bitrate) args.push('-b:v', options.bitrate)
  if (options.qp !== undefined && !webm) args.push('-qp', String(options.qp))
  if (options.audio) args.push('-c:a', webm ? 'libopus' : 'aac')
  if (faststart && !webm) args.push('-movflags', '+faststart')
  if (options.rotate === undefined) {
    await ffmpeg([...args, path])
    return path
  }
  // ffmpeg 5.1 keeps a rotate tag only when it copies the stream: encode, then copy with the tag.
  const plain = `${path}.plain${path.slice(path.lastIndexOf('.'))}`
  await ffmpeg([...args, plain])
  await ffmpeg(['-i', plain, '-c', 'copy', '-metadata:s:v:0', `rotate=${options.rotate}`, path])
  await rm(plain, { force: true })
  return path
}

/** A tone with no picture: AAC in `.m4a`, MP3 in `.mp3`, Opus in `.ogg`/`.opus`. */
export async function makeAudio(path: string, seconds = 3): Promise<string> {
  const codec = path.endsWith('.mp3') ? 'libmp3lame' : path.endsWith('.m4a') ? 'aac' : 'libopus'
  await ffmpeg(['-f', 'lavfi', '-i', `sine=frequency=440:duration=${seconds}`, '-c:a', codec, path])
  return path
}

/** The first `fraction` of `source`'s bytes, written to `path`. */
export async function truncateFile(source: string, path: string, fraction = 0.5): Promise<string> {
  const bytes = await readFile(source)
  await writeFile(path, bytes.subarray(0, Math.floor(bytes.length * fraction)))
  return path
}

/**
 * A one-second AVI of raw 16 × 16 frames whose headers (`avih` and the stream's BITMAPINFOHEADER, 32-bit
 * fields) claim `width` × `height`: what a reader believes before it decodes anything.
 */
export async function aviClaiming(path: string, width: number, height: number): Promise<string> {
  const small = `${path}.small.avi`
  await ffmpeg(['-f', 'lavfi', '-i', 'testsrc=size=16x16:rate=5:duration=1', '-c:v', 'rawvideo', '-pix_fmt', 'bgr24', small])
  const bytes = await readFile(small)
  const avih = bytes.indexOf('avih')
  const strf = bytes.indexOf('strf')
  if (avih < 0 || strf < 0) throw new Error('unexpected AVI layout')
  // avih: size, then 8 DWORDs before dwWidth, dwHeight; strf: size, biSize, biWidth, biHeight.
  bytes.writeUInt32LE(width, avih + 8 + 32)
  bytes.writeUInt32LE(height, avih + 8 + 36)
  bytes.writeInt32LE(width, strf + 12)
  bytes.writeInt32LE(height, strf + 16)
  await writeFile(path, bytes)
  await rm(small, { force: true })
  return path
}

/** A loopback HTTP server for one file; see {@link serveFile}. */
export interface ServedFile {
  url: string
  /** Bytes of the file sent so far (body bytes, all requests). */
  bytesSent(): number
  /** The `Range` header of each request, in order (`''` when none). */
  ranges: string[]
  close(): Promise<void>
}

/**
 * Serves the file at `path` on 127.0.0.1 with Range support (206 with Content-Range, Accept-Ranges,
 * Content-Length), as S3 answers a presigned GET, counting the body bytes it writes.
 */
export async function serveFile(path: string): Promise<ServedFile> {
  const size = (await stat(path)).size
  let sent = 0
  const ranges: string[] = []
  const server = createServer((req, res) => {
    const header = req.headers.range ?? ''
    ranges.push(header)
    const m = /^bytes=(\d+)-(\d*)$/.exec(header)
    let start = 0
    let end = size - 1
    if (m) {
      start = Number(m[1])
      if (m[2]) end = Math.min(size - 1, Number(m[2]))
      if (start >= size) {
        res.writeHead(416, { 'content-range': `bytes */${size}` }).end()
        return
      }
      res.writeHead(206, {
        'content-range': `bytes ${start}-${end}/${size}`,
        'content-length': String(end - start + 1),
        'accept-ranges': 'bytes',
        'content-type': 'video/mp4',
      })
    } else {
      res.writeHead(200, { 'content-length': String(size), 'accept-ranges': 'bytes', 'content-type': 'video/mp4' })
    }
    if (req.method === 'HEAD') {
      res.end()
      return
    }
    void streamRange(path, start, end, res, (n) => {
      sent += n
    })
  })
  return listen(server, '/file', { bytesSent: () => sent, ranges })
}

async function streamRange(
  path: string,
  start: number,
  end: number,
  res: import('node:http').ServerResponse,
  count: (n: number) => void,
): Promise<void> {
  const handle = await open(path)
  try {
    const buffer = Buffer.alloc(64 * 1024)
    let at = start
    while (at <= end && !res.destroyed) {
      const { bytesRead } = await handle.read(buffer, 0, Math.min(buffer.length, end - at + 1), at)
      if (bytesRead === 0) break
      at += bytesRead
      count(bytesRead)
      if (!res.write(Buffer.from(buffer.subarray(0, bytesRead)))) {
        await new Promise<void>((resolve) => {
          const done = () => {
            res.off('drain', done)
            res.off('close', done)
            resolve()
          }
          res.on('drain', done)
          res.on('close', done)
        })
      }
    }
    res.end()
  } finally {
    await handle.close()
  }
}

/** A loopback server that answers every request with 200 headers of a large video and then sends nothing. */
export async function stallingServer(): Promise<ServedFile> {
  const server = createServer((_req, res) => {
    res.writeHead(200, { 'content-length': String(100 * 1024 * 1024), 'content-type': 'video/mp4', 'accept-ranges': 'bytes' })
    res.flushHeaders()
  })
  return listen(server, '/stall.mp4', { bytesSent: () => 0, ranges: [] })
}

async function listen(server: Server, path: string, rest: Omit<ServedFile, 'url' | 'close'>): Promise<ServedFile> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const { port } = server.address() as AddressInfo
  return {
    url: `http://127.0.0.1:${port}${path}`,
    ...rest,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      }),
  }
}

/** Pids of this process's children whose command name is one of `names` (from /proc). */
export function toolChildren(names: string[]): number[] {
  const found: number[] = []
  for (const entry of readdirSync('/proc')) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const text = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const comm = text.slice(text.indexOf('(') + 1, text.lastIndexOf(')'))
      const ppid = Number(text.slice(text.lastIndexOf(')') + 2).split(' ')[1])
      if (ppid === process.pid && names.includes(comm)) found.push(Number(entry))
    } catch {
      // Gone meanwhile.
    }
  }
  return found
}
