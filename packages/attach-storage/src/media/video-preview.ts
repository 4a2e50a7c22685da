/**
 * Video and audio through ffmpeg: `ffprobe` reads the container's headers (duration, frame size, rotation,
 * codecs) and every bound is checked on them before anything decodes; `ffmpeg` then seeks to one frame
 * and writes it, scaled, as a JPEG on its stdout. The input is a local file or an http(s) address (a
 * presigned GET, or preview-source.ts's loopback server), read with range requests.
 *
 * What ffmpeg may open is fenced: only the `file` protocol for a local file, only `http,https,tcp,tls`
 * for an address, and only the demuxers of ordinary audio and video files (`-format_whitelist`): an
 * uploaded HLS playlist, ffconcat script or image sequence, which would make ffmpeg read other files or
 * addresses (a sibling upload, /etc/passwd, an internal URL), is refused as `corrupt` before it opens them.
 */
import { isAbsolute, resolve } from 'node:path'
import {
  commonFailure,
  jpegSize,
  lastLine,
  type PreviewBounds,
  PreviewError,
  type PreviewTools,
  runTool,
  type ToolRun,
} from './preview-tools.js'

/** What {@link probeAv} learns of a video or audio file. */
export interface AvProbe {
  /** `video` when there is a picture stream (cover art of an audio file does not count). */
  kind: 'video' | 'audio'
  durationMs: number
  /** Video only: the frame as displayed (rotation metadata applied: a 90° rotation swaps width and height). */
  width?: number
  height?: number
}

/**
 * Demuxers ffmpeg may use (`-format_whitelist`): the containers of ordinary audio and video files. Left
 * out on purpose: playlists and scripts that open other inputs (`hls`, `dash`, `concat`, `tee`,
 * `image2`, `sdp`, `rtsp`…) and raw formats no upload needs.
 */
export const AV_FORMATS = [
  'mov', // mov,mp4,m4a,3gp,3g2,mj2
  'matroska', // matroska,webm
  'avi',
  'flv',
  'mpegts',
  'mpeg',
  'asf',
  'ogg',
  'mp3',
  'aac',
  'flac',
  'wav',
  'w64',
  'aiff',
  'caf',
  'amr',
  'wv',
  'ape',
  'ac3',
  'eac3',
].join(',')

/** ffmpeg's refusal of a frame size (its own sanity limit, or `-max_pixels`), which names the size claimed. */
const CLAIMED_SIZE = /Picture size (\d+)x(\d+) (?:is invalid|exceeds specified max pixel count)/

/** ffmpeg's `max_pixels` is an `int`. */
const INT_MAX = 2 ** 31 - 1

/** The input options every ffprobe/ffmpeg run gets for `input`, and the input itself as ffmpeg names it. */
function inputArgs(input: string, bounds: PreviewBounds): { options: string[]; url: string; remote: boolean } {
  const maxPixels = String(Math.min(INT_MAX, Math.max(1, Math.floor(bounds.maxInputPixels))))
  if (/^https?:\/\//i.test(input)) {
    // rw_timeout: a read stalled for 15 s ends the tool (tool-failed) before a longer deadline; under a
    // shorter one the deadline decides (timeout). icy: no Shoutcast header on signed requests.
    // Seekability is detected from the answer (206, Accept-Ranges): -seekable stays at its default.
    const rwSeconds = bounds.timeoutSeconds < 15 ? bounds.timeoutSeconds + 1 : 15
    const rwTimeout = String(Math.round(rwSeconds * 1_000_000))
    return {
      options: [
        '-protocol_whitelist',
        'http,https,tcp,tls',
        '-format_whitelist',
        AV_FORMATS,
        '-rw_timeout',
        rwTimeout,
        '-icy',
        '0',
        '-max_pixels',
        maxPixels,
      ],
      url: input,
      remote: true,
    }
  }
  if (/^[a-z][a-z0-9+.-]*:/i.test(input) && !isAbsolute(input)) {
    throw new PreviewError('tool-failed', 'the input must be a local path or an http(s) address')
  }
  // `file:` before an absolute path: nothing in the path can name another protocol.
  return {
    options: ['-protocol_whitelist', 'file', '-format_whitelist', AV_FORMATS, '-max_pixels', maxPixels],
    url: `file:${resolve(input)}`,
    remote: false,
  }
}

/** The error for an ffprobe/ffmpeg run that exited non-zero. */
function ffFailure(tool: string, run: ToolRun, remote: boolean, bounds: PreviewBounds): PreviewError {
  const claimed = CLAIMED_SIZE.exec(run.stderr)
  if (claimed) {
    return new PreviewError(
      'too-many-pixels',
      `the video claims ${claimed[1]} × ${claimed[2]} pixels a frame, more than the ${bounds.maxInputPixels} allowed`,
    )
  }
  const common = commonFailure(tool, run, bounds.memoryBytes)
  if (common) return common
  if (/not on whitelist/.test(run.stderr)) {
    return new PreviewError('corrupt', 'not an audio or video file this server reads (playlists and scripts are refused)')
  }
  const transient = remote
    ? /Server returned|Connection refused|Connection reset|Connection timed out|timed out|Network is unreachable|Input\/output error|Failed to resolve|End of file/i
    : /No such file or directory|Permission denied/i
  if (transient.test(run.stderr)) return new PreviewError('tool-failed', `${tool} could not read the file: ${lastLine(run.stderr)}`)
  return new PreviewError('corrupt', `not a readable audio or video file: ${lastLine(run.stderr) || `${tool} exited with ${run.code}`}`)
}

interface FfStream {
  codec_type?: string
  codec_name?: string
  width?: number
  height?: number
  duration?: string
  disposition?: { attached_pic?: number; still_image?: number }
  tags?: { rotate?: string }
  side_data_list?: Array<{ rotation?: number | string }>
}

function rotation(stream: FfStream): number {
  const fromMatrix = stream.side_data_list?.find((d) => d.rotation !== undefined)?.rotation
  const degrees = Number(fromMatrix ?? stream.tags?.rotate ?? 0)
  return Number.isFinite(degrees) ? degrees : 0
}

function checkDuration(durationMs: number, bounds: PreviewBounds): void {
  if (durationMs > bounds.maxDurationSeconds * 1000) {
    throw new PreviewError(
      'too-long',
      `the file lasts ${(durationMs / 1000).toFixed(1)} s, more than the ${bounds.maxDurationSeconds} s allowed`,
    )
  }
}

function checkPixels(width: number, height: number, bounds: PreviewBounds): void {
  if (width * height > bounds.maxInputPixels) {
    throw new PreviewError(
      'too-many-pixels',
      `the video claims ${width} × ${height} pixels a frame, more than the ${bounds.maxInputPixels} allowed`,
    )
  }
}

/**
 * Reads a video or audio file's headers with ffprobe (`-show_format -show_streams`, nothing decoded
 * beyond what ffprobe needs to name the codecs) and checks them: the duration against
 * `bounds.maxDurationSeconds` (`too-long`), a video's frame size against `bounds.maxInputPixels`
 * (`too-many-pixels`, also when ffmpeg itself finds the claimed size absurd, such as 100,000 × 100,000).
 *
 * `input` is an absolute local path or an http(s) address (read with range requests). Throws
 * {@link PreviewError}: `corrupt` (not an audio or video file, a playlist or script, truncated so that its
 * index is missing, no audio or video stream, no duration, a codec ffmpeg does not know, or ffprobe ran
 * out of memory), `too-long`, `too-many-pixels`, `timeout`, `tool-failed` (ffprobe missing, or the
 * address or file could not be read: worth a retry).
 */
export async function probeAv(input: string, tools: PreviewTools, bounds: PreviewBounds): Promise<AvProbe> {
  if (!tools.ffprobe) throw new PreviewError('tool-failed', 'ffprobe is not installed (Debian: apt-get install ffmpeg)')
  const { options, url, remote } = inputArgs(input, bounds)
  const run = await runTool(
    tools.ffprobe,
    ['-hide_banner', '-v', 'error', ...options, '-print_format', 'json', '-show_format', '-show_streams', url],
    { timeoutSeconds: bounds.timeoutSeconds, memoryBytes: bounds.memoryBytes, maxStdout: 4 * 1024 * 1024, overflow: 'corrupt' },
  )
  if (run.code !== 0) throw ffFailure('ffprobe', run, remote, bounds)
  let parsed: { streams?: FfStream[]; format?: { duration?: string } }
  try {
    parsed = JSON.parse(run.stdout.toString('utf8'))
  } catch (error) {
    throw new PreviewError('tool-failed', 'ffprobe answered no JSON', { cause: error })
  }
  const streams = parsed.streams ?? []
  const video = streams.find((s) => s.codec_type === 'video' && !s.disposition?.attached_pic && !s.disposition?.still_image)
  const audio = streams.find((s) => s.codec_type === 'audio')
  const claimed = CLAIMED_SIZE.exec(run.stderr)
  if (claimed) checkPixels(Number(claimed[1]), Number(claimed[2]), bounds)
  if (!video && !audio) throw new PreviewError('corrupt', 'the file has no audio or video stream')
  const main = (video ?? audio) as FfStream
  if (!main.codec_name) throw new PreviewError('corrupt', `the file's ${main.codec_type} codec is not one ffmpeg knows`)
  const seconds = [parsed.format?.duration, ...streams.map((s) => s.duration)]
    .map((d) => Number(d))
    .filter((d) => Number.isFinite(d) && d > 0)
  if (seconds.length === 0) throw new PreviewError('corrupt', 'the file does not say how long it lasts')
  const durationMs = Math.round(Math.max(...seconds) * 1000)
  checkDuration(durationMs, bounds)
  if (!video) return { kind: 'audio', durationMs }
  const width = Number(video.width ?? 0)
  const height = Number(video.height ?? 0)
  if (!(width > 0 && height > 0)) throw new PreviewError('corrupt', 'the video does not say its frame size')
  checkPixels(width, height, bounds)
  const turned = Math.abs(Math.round(rotation(video) / 90)) % 2 === 1
  return turned ? { kind: 'video', durationMs, width: height, height: width } : { kind: 'video', durationMs, width, height }
}

/**
 * One frame of the video as a JPEG: at 10 % of `probe.durationMs`, at most 5 s in, found by input seeking
 * (`-ss` before `-i`: the demuxer jumps to the key frame before it; over http that is a range request),
 * upright (rotation applied), scaled down so its longest side is at most `bounds.maxSide` (never up),
 * encoded by ffmpeg's own mjpeg encoder (`-q:v 3`) with one decoding thread. A seek that lands past the
 * last frame (a container whose duration lies) falls back to the first frame.
 *
 * `probe` is {@link probeAv}'s answer for this input; its bounds are checked again before anything is
 * decoded (`no-video-stream` for audio, `too-many-pixels`, `too-long`), and ffmpeg's decoders are given
 * `-max_pixels` as well. Other errors as {@link probeAv}; `corrupt` also when no frame decodes.
 */
export async function videoFrame(
  input: string,
  probe: AvProbe,
  tools: PreviewTools,
  bounds: PreviewBounds,
): Promise<{ jpeg: Buffer; width: number; height: number }> {
  if (probe.kind !== 'video') throw new PreviewError('no-video-stream', 'the file has no video stream to take a frame from')
  if (!tools.ffmpeg) throw new PreviewError('tool-failed', 'ffmpeg is not installed (Debian: apt-get install ffmpeg)')
  checkDuration(probe.durationMs, bounds)
  checkPixels(probe.width ?? 0, probe.height ?? 0, bounds)
  const seconds = Math.min(5, (probe.durationMs / 1000) * 0.1)
  const first = await frameAt(tools.ffmpeg, input, seconds, bounds)
  const jpeg = first.length > 0 || seconds === 0 ? first : await frameAt(tools.ffmpeg, input, 0, bounds)
  const size = jpegSize(jpeg)
  if (!size) throw new PreviewError('corrupt', 'no frame of the video could be decoded')
  return { jpeg, ...size }
}

async function frameAt(ffmpeg: string, input: string, seconds: number, bounds: PreviewBounds): Promise<Buffer> {
  const { options, url, remote } = inputArgs(input, bounds)
  const side = Math.max(1, Math.floor(bounds.maxSide))
  const args = [
    '-nostdin',
    '-hide_banner',
    '-v',
    'error',
    '-threads',
    '1',
    ...options,
    '-ss',
    seconds.toFixed(3),
    '-i',
    url,
    // V: a video stream that is not cover art.
    '-map',
    '0:V:0',
    '-an',
    '-sn',
    '-dn',
    '-frames:v',
    '1',
    '-vf',
    `scale=w='min(${side},iw)':h='min(${side},ih)':force_original_aspect_ratio=decrease`,
    '-filter_threads',
    '1',
    '-threads',
    '1',
    '-f',
    'image2pipe',
    '-c:v',
    'mjpeg',
    '-q:v',
    '3',
    'pipe:1',
  ]
  const run = await runTool(ffmpeg, args, { timeoutSeconds: bounds.timeoutSeconds, memoryBytes: bounds.memoryBytes })
  if (run.code !== 0) throw ffFailure('ffmpeg', run, remote, bounds)
  return run.stdout
}
