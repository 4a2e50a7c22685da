/**
 * HEIC/HEIF photos (what iPhones take): read with libheif compiled to WebAssembly (the `libheif-js`
 * package ships the decoder, so no native HEVC library is needed; sharp's prebuilt libvips has none).
 * Decoding runs in one worker thread per process, never on the event loop: a 12-megapixel photo takes
 * about a second there and about 150 MiB while it is decoded. The header is read first and an image
 * over the pixel limit is refused before any pixel is decoded (a 1×1 file may claim 100,000 × 100,000).
 * Bounds: one decode at a time, a waiting queue (beyond it: busy), a timeout that stops the worker, and
 * a byte limit on the input. The worker ends after a while idle, giving its memory back.
 */
import { readFile, stat } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { Worker } from 'node:worker_threads'
import sharp, { type Sharp } from 'sharp'

/** The media types read here (as the sniffer names them). */
const HEIC_TYPES = new Set(['image/heic', 'image/heif'])

/** True for a HEIC/HEIF photo's media type. */
export function isHeic(type: string): boolean {
  return HEIC_TYPES.has(type)
}

/** Largest HEIC file decoded (a 48-megapixel photo is about 15 MB). */
export const MAX_HEIC_BYTES = 64 * 1024 * 1024

/** Why a HEIC file was not read. */
export type HeicErrorCode = 'corrupt' | 'too-many-pixels' | 'too-large' | 'busy' | 'timeout'

/** A HEIC file that could not be read, and why ({@link HeicErrorCode}). */
export class HeicError extends Error {
  constructor(
    readonly code: HeicErrorCode,
    message: string,
  ) {
    super(message)
    this.name = 'HeicError'
  }
}

/** A decoded picture: interleaved 8-bit RGB or RGBA, upright (the file's rotation and mirroring applied). */
export interface DecodedHeic {
  width: number
  height: number
  channels: 3 | 4
  data: Uint8Array
}

/**
 * The worker: CommonJS run from this string (so the same code serves the sources and the bundle), with
 * libheif's path resolved by the parent. Each job opens a context on the bytes, reads the primary
 * image's size and, for a decode within the pixel limit, decodes it to interleaved RGB(A) and hands the
 * rows back (transferred, not copied). Everything libheif allocated is released before the answer.
 */
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads')
const l = require(workerData.libheif)
const OK = l.heif_error_code.heif_error_Ok
parentPort.on('message', ({ id, kind, bytes, maxPixels }) => {
  let ctx, handle, image
  try {
    ctx = l.heif_context_alloc()
    const err = l.heif_context_read_from_memory(ctx, new Uint8Array(bytes))
    if (err.code !== OK) throw new Error(err.message)
    handle = l.heif_js_context_get_primary_image_handle(ctx)
    if (!handle || handle.code) throw new Error((handle && handle.message) || 'no primary image')
    const width = l.heif_image_handle_get_width(handle)
    const height = l.heif_image_handle_get_height(handle)
    if (!(width > 0 && height > 0)) throw new Error('the image has no size')
    if (kind === 'info') return parentPort.postMessage({ id, width, height })
    if (width * height > maxPixels) {
      return parentPort.postMessage({ id, code: 'too-many-pixels', error: width + '×' + height + ' is more than ' + maxPixels + ' pixels' })
    }
    const alpha = Boolean(l.heif_image_handle_has_alpha_channel(handle))
    const chroma = alpha ? l.heif_chroma.heif_chroma_interleaved_RGBA : l.heif_chroma.heif_chroma_interleaved_RGB
    image = l.heif_js_decode_image2(handle, l.heif_colorspace.heif_colorspace_RGB, chroma)
    if (!image || image.code) throw new Error((image && image.message) || 'the image could not be decoded')
    const plane = image.channels.find((c) => c.id === l.heif_channel.heif_channel_interleaved)
    if (!plane) throw new Error('the decoder gave no pixels')
    const n = alpha ? 4 : 3
    const row = plane.width * n
    const out = new Uint8Array(row * plane.height)
    if (plane.stride === row) out.set(plane.data.subarray(0, out.length))
    else for (let y = 0; y < plane.height; y++) out.set(plane.data.subarray(y * plane.stride, y * plane.stride + row), y * row)
    parentPort.postMessage({ id, width: plane.width, height: plane.height, channels: n, data: out }, [out.buffer])
  } catch (e) {
    parentPort.postMessage({ id, code: 'corrupt', error: String((e && e.message) || e) })
  } finally {
    if (image && image.image) l.heif_image_release(image.image)
    if (handle && !handle.code) l.heif_image_handle_release(handle)
    if (ctx) l.heif_context_free(ctx)
  }
})
`

interface Job {
  id: number
  kind: 'info' | 'decode'
  bytes: Uint8Array
  maxPixels: number
  timeoutMs: number
  resolve: (value: { width: number; height: number; channels?: 3 | 4; data?: Uint8Array }) => void
  reject: (err: Error) => void
}

/** Options of a {@link HeicDecoder}. */
export interface HeicDecoderOptions {
  /** Jobs waiting for the worker; beyond it a job fails at once with `busy`. @default 64 */
  queue?: number
  /** How long (ms) the worker stays after its last job. @default 30000 */
  idleMs?: number
}

/** The HEIC worker and its queue: one job at a time, first come first served. */
export class HeicDecoder {
  #worker: Worker | undefined
  #current: (Job & { timer: NodeJS.Timeout }) | undefined
  readonly #waiting: Job[] = []
  #idle: NodeJS.Timeout | undefined
  #nextId = 1
  readonly #queue: number
  readonly #idleMs: number
  /** Decodes started (info reads not counted): what a test checks to see that a bomb never got that far. */
  decodes = 0

  constructor(options: HeicDecoderOptions = {}) {
    this.#queue = options.queue ?? 64
    this.#idleMs = options.idleMs ?? 30_000
  }

  /** The primary image's size as shown, from the file's header (the head of a file is enough). */
  async info(bytes: Uint8Array, timeoutMs = 10_000): Promise<{ width: number; height: number }> {
    const { width, height } = await this.#submit('info', bytes, 0, timeoutMs)
    return { width, height }
  }

  /** The primary image's pixels; refused before decoding when it has more than `maxPixels`. */
  async decode(bytes: Uint8Array, maxPixels: number, timeoutMs = 30_000): Promise<DecodedHeic> {
    const d = await this.#submit('decode', bytes, maxPixels, timeoutMs)
    return { width: d.width, height: d.height, channels: d.channels ?? 3, data: d.data ?? new Uint8Array() }
  }

  /** Stops the worker now; waiting jobs fail with `busy`. */
  async close(): Promise<void> {
    for (const job of this.#waiting.splice(0)) job.reject(new HeicError('busy', 'the HEIC decoder was closed'))
    if (this.#current) {
      clearTimeout(this.#current.timer)
      this.#current.reject(new HeicError('busy', 'the HEIC decoder was closed'))
      this.#current = undefined
    }
    clearTimeout(this.#idle)
    const w = this.#worker
    this.#worker = undefined
    await w?.terminate()
  }

  #submit(kind: Job['kind'], bytes: Uint8Array, maxPixels: number, timeoutMs: number) {
    return new Promise<{ width: number; height: number; channels?: 3 | 4; data?: Uint8Array }>((resolve, reject) => {
      if (this.#waiting.length >= this.#queue) {
        reject(new HeicError('busy', `${this.#waiting.length} HEIC images are waiting to be decoded already`))
        return
      }
      this.#waiting.push({ id: this.#nextId++, kind, bytes, maxPixels, timeoutMs, resolve, reject })
      this.#pump()
    })
  }

  #spawn(): Worker {
    const libheif = createRequire(import.meta.url).resolve('libheif-js/wasm-bundle')
    const w = new Worker(WORKER_SOURCE, { eval: true, workerData: { libheif } })
    w.unref()
    w.on('message', (m: { id: number; code?: HeicErrorCode; error?: string; width: number; height: number }) => {
      const job = this.#current
      if (!job || job.id !== m.id) return
      clearTimeout(job.timer)
      this.#current = undefined
      if (m.error !== undefined) job.reject(new HeicError(m.code ?? 'corrupt', `HEIC: ${m.error}`))
      else job.resolve(m)
      this.#pump()
    })
    const lost = (why: string) => {
      if (this.#worker !== w) return
      this.#worker = undefined
      const job = this.#current
      this.#current = undefined
      if (job) {
        clearTimeout(job.timer)
        job.reject(new HeicError('corrupt', `HEIC: the decoder stopped (${why})`))
      }
      this.#pump()
    }
    w.on('error', (err) => lost(err.message))
    w.on('exit', (code) => lost(`exit ${code}`))
    return w
  }

  #pump(): void {
    if (this.#current) return
    const job = this.#waiting.shift()
    clearTimeout(this.#idle)
    if (!job) {
      // Idle: the worker (and the WebAssembly memory it grew) goes after a while.
      if (this.#worker) {
        this.#idle = setTimeout(() => {
          const w = this.#worker
          this.#worker = undefined
          void w?.terminate()
        }, this.#idleMs)
        this.#idle.unref()
      }
      return
    }
    if (!this.#worker) this.#worker = this.#spawn()
    const worker = this.#worker
    const timer = setTimeout(() => {
      // A decode past its time is stopped with its worker: WebAssembly cannot be interrupted otherwise.
      if (this.#current?.id !== job.id) return
      this.#current = undefined
      if (this.#worker === worker) this.#worker = undefined
      void worker.terminate()
      job.reject(new HeicError('timeout', `HEIC: decoding took more than ${Math.round(job.timeoutMs / 1000)} s`))
      this.#pump()
    }, job.timeoutMs)
    this.#current = { ...job, timer }
    if (job.kind === 'decode') this.decodes++
    // The bytes are copied once into a buffer the worker takes over (the caller's stay theirs).
    const bytes = new Uint8Array(job.bytes)
    worker.postMessage({ id: job.id, kind: job.kind, bytes, maxPixels: job.maxPixels }, [bytes.buffer])
  }
}

let shared: HeicDecoder | undefined

/** The process's HEIC decoder (created on first use). */
export function heicDecoder(): HeicDecoder {
  shared ??= new HeicDecoder()
  return shared
}

/** A HEIC file's bytes from a path or a buffer; `too-large` past {@link MAX_HEIC_BYTES}. */
export async function heicBytes(input: string | Uint8Array): Promise<Uint8Array> {
  if (typeof input !== 'string') {
    if (input.byteLength > MAX_HEIC_BYTES) throw new HeicError('too-large', `HEIC: files over ${MAX_HEIC_BYTES} bytes are not decoded`)
    return input
  }
  const { size } = await stat(input)
  if (size > MAX_HEIC_BYTES) throw new HeicError('too-large', `HEIC: files over ${MAX_HEIC_BYTES} bytes are not decoded`)
  return readFile(input)
}

/** What bounds the decode of one HEIC file. */
export interface HeicLimits {
  /** Largest picture decoded (width × height); a larger one is refused from its header. */
  maxInputPixels: number
  /** Seconds the decode may take. @default 30 */
  timeoutSeconds?: number
}

/**
 * A sharp pipeline on a HEIC file's decoded pixels (upright already: do not `.rotate()` by EXIF), and
 * the picture's size. Throws a {@link HeicError} naming what is wrong with the file.
 */
export async function heicImage(input: string | Uint8Array, limits: HeicLimits): Promise<{ image: Sharp; width: number; height: number }> {
  const bytes = await heicBytes(input)
  const d = await heicDecoder().decode(bytes, limits.maxInputPixels, (limits.timeoutSeconds ?? 30) * 1000)
  const image = sharp(Buffer.from(d.data.buffer, d.data.byteOffset, d.data.byteLength), {
    raw: { width: d.width, height: d.height, channels: d.channels },
    limitInputPixels: limits.maxInputPixels,
  })
  return { image, width: d.width, height: d.height }
}

/** A HEIC file's size as shown, from its header; undefined when the header cannot be read. */
export async function heicSize(head: Uint8Array): Promise<{ width: number; height: number } | undefined> {
  return heicDecoder()
    .info(head)
    .catch(() => undefined)
}
