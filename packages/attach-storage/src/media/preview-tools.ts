/**
 * The external tools behind PDF and video previews (poppler's `pdftoppm`/`pdfinfo`, ffmpeg's
 * `ffmpeg`/`ffprobe`), found once, and the one way they are run: no shell, their own process group, a
 * deadline that kills the whole group, an address-space cap, capped output, low CPU priority.
 */
import { spawn } from 'node:child_process'
import { accessSync, constants, statSync } from 'node:fs'
import { setPriority } from 'node:os'
import { delimiter, isAbsolute, join, resolve } from 'node:path'

/** Absolute paths of the preview tools; `undefined`: not found (previews of that kind are off). */
export interface PreviewTools {
  pdftoppm?: string
  pdfinfo?: string
  ffmpeg?: string
  ffprobe?: string
}

const TOOL_NAMES = ['pdftoppm', 'pdfinfo', 'ffmpeg', 'ffprobe'] as const

/** An executable regular file at `path`, or `undefined`. */
function executable(path: string): string | undefined {
  try {
    if (!statSync(path).isFile()) return undefined
    accessSync(path, constants.X_OK)
    return path
  } catch {
    return undefined
  }
}

/** `name` in one of the folders of `PATH`, as an absolute path. */
function onPath(name: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(delimiter)) {
    if (!dir || !isAbsolute(dir)) continue
    const found = executable(join(dir, name))
    if (found) return found
  }
  return undefined
}

/**
 * Finds each preview tool: the path given for it (made absolute, and kept only when it is an executable
 * file) or, when none is given, the first executable of that name in a folder of `PATH`. Synchronous and
 * cheap (a few `stat` calls); nothing is run. A tool given but not executable is `undefined`: it is not
 * looked up on `PATH` instead.
 */
export function findPreviewTools(given: Partial<Record<keyof PreviewTools, string>> = {}): PreviewTools {
  const tools: PreviewTools = {}
  for (const name of TOOL_NAMES) {
    const path = given[name]
    const found = path === undefined ? onPath(name) : executable(resolve(path))
    if (found) tools[name] = found
  }
  return tools
}

/** The bounds of every preview and analysis run. */
export interface PreviewBounds {
  /** A video frame (width × height as the container or stream declares it) or a PDF page render over it is refused, before decoding: `too-many-pixels`. */
  maxInputPixels: number
  /** A PDF with more pages is refused (`pdfinfo` counts them before anything renders): `too-many-pages`. */
  maxPages: number
  /** A longer video or audio file is refused: `too-long`. */
  maxDurationSeconds: number
  /** Each tool run is killed (SIGKILL, its whole process group) after this many seconds: `timeout`. */
  timeoutSeconds: number
  /** The longest side of a preview image, in pixels. */
  maxSide: number
  /**
   * Address-space cap of each tool process (`prlimit --as`, else `ulimit -v`). Debian's ffmpeg and ffprobe
   * (5.1) map about 280 MiB of shared libraries before reading anything: under about 300 MiB they do not
   * start (`tool-failed`). A frame of a 4K h264 video, decoded with one thread as here, fits in 384 MiB;
   * poppler's tools start in about 24 MiB. A tool that runs out of memory on an input fails with
   * `corrupt`: the same file under the same cap fails the same way, so it is not retried.
   */
  memoryBytes: number
}

/** Why a preview or an analysis failed. */
export type PreviewErrorCode =
  | 'corrupt'
  | 'encrypted'
  | 'too-many-pages'
  | 'too-many-pixels'
  | 'too-long'
  | 'no-video-stream'
  | 'timeout'
  | 'tool-failed'

/**
 * A preview or analysis that could not be made. `permanent` is true when trying again cannot help (the
 * file is corrupt, encrypted or over a bound); false for `timeout` and `tool-failed`, which a retry may pass
 * (a busy machine, a store that did not answer).
 */
export class PreviewError extends Error {
  readonly code: PreviewErrorCode
  /** True: trying again cannot help (corrupt, encrypted, bounds); false: timeout/tool-failed may pass. */
  readonly permanent: boolean
  constructor(code: PreviewErrorCode, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'PreviewError'
    this.code = code
    this.permanent = code !== 'timeout' && code !== 'tool-failed'
  }
}

/** What a finished tool run left: its exit, its output, the end of its error output. */
export interface ToolRun {
  /** Exit code, `null` when a signal ended it. */
  code: number | null
  signal: NodeJS.Signals | null
  stdout: Buffer
  /** The last 4 KiB of its error output, as text. */
  stderr: string
  /** Wall-clock milliseconds. */
  ms: number
}

/** Options of {@link runTool}. */
export interface RunToolOptions {
  timeoutSeconds: number
  memoryBytes: number
  /** Output beyond this many bytes kills the tool, failing with `overflow`. @default 16 MiB */
  maxStdout?: number
  /**
   * The code of a run killed for its output: `corrupt` where only the file can make the tool write that
   * much (ffprobe's JSON, pdfinfo's metadata), so that it is not retried. @default 'tool-failed'
   */
  overflow?: PreviewErrorCode
}

const STDERR_KEEP = 4096
const DEFAULT_MAX_STDOUT = 16 * 1024 * 1024
/** Environment variables a tool gets from ours: no credentials or database addresses reach it. */
const PASSED_ENV = ['PATH', 'TMPDIR', 'http_proxy', 'https_proxy', 'no_proxy', 'HTTP_PROXY', 'HTTPS_PROXY', 'NO_PROXY']
let prlimitPath: string | null | undefined

/** The argument list that starts `command` under an address-space cap of `memoryBytes`. */
function capped(command: string, args: string[], memoryBytes: number): [string, string[]] {
  if (prlimitPath === undefined) prlimitPath = onPath('prlimit') ?? null
  const bytes = Math.max(1, Math.floor(memoryBytes))
  if (prlimitPath) return [prlimitPath, [`--as=${bytes}`, '--', command, ...args]]
  // No prlimit (util-linux): the shell's ulimit, with the command and its arguments as positional
  // parameters, never part of the script text.
  const kib = String(Math.max(1, Math.floor(bytes / 1024)))
  return ['/bin/sh', ['-c', 'ulimit -v "$1" && shift && exec "$@"', 'sh', kib, command, ...args]]
}

/** Kills a detached child's whole process group; a group already gone is fine. */
function killGroup(pid: number | undefined): void {
  if (pid === undefined) return
  try {
    process.kill(-pid, 'SIGKILL')
  } catch {
    // Already gone.
  }
}

/**
 * Runs one tool with `args` (an argument vector: nothing goes through a shell) and resolves once it has
 * exited, whatever its exit code: the caller reads the code. Rejects with a {@link PreviewError}:
 * `timeout` when it outlives `timeoutSeconds` (its process group is killed with SIGKILL and reaped first),
 * `tool-failed` when it cannot start, `options.overflow` when it writes more than `maxStdout`. stdin is
 * closed; the run gets niceness 10 and a minimal environment (`PATH`, `TMPDIR`, proxies, `LC_ALL=C`,
 * `MALLOC_ARENA_MAX=2`): no credential or database address of ours reaches a tool.
 */
export function runTool(command: string, args: string[], options: RunToolOptions): Promise<ToolRun> {
  const maxStdout = options.maxStdout ?? DEFAULT_MAX_STDOUT
  const [file, argv] = capped(command, args, options.memoryBytes)
  const env: Record<string, string> = { LC_ALL: 'C', LANG: 'C', MALLOC_ARENA_MAX: '2' }
  for (const name of PASSED_ENV) {
    const value = process.env[name]
    if (value !== undefined) env[name] = value
  }
  const started = performance.now()
  return new Promise<ToolRun>((resolvePromise, reject) => {
    const child = spawn(file, argv, { detached: true, stdio: ['ignore', 'pipe', 'pipe'], env })
    if (child.pid !== undefined) {
      try {
        setPriority(child.pid, 10)
      } catch {
        // Not allowed here: it runs at our priority.
      }
    }
    const chunks: Buffer[] = []
    let stdoutBytes = 0
    let stderr = Buffer.alloc(0)
    let failure: PreviewError | undefined
    // Once the tool has exited (and been reaped), its pid may be reused: never signal it again.
    let exited = false
    child.once('exit', () => {
      exited = true
    })
    const fail = (error: PreviewError) => {
      failure ??= error
      if (!exited) killGroup(child.pid)
    }
    const timer = setTimeout(
      () => fail(new PreviewError('timeout', `${basename(command)} did not finish within ${options.timeoutSeconds} s`)),
      Math.max(1, options.timeoutSeconds * 1000),
    )
    child.stdout.on('data', (chunk: Buffer) => {
      stdoutBytes += chunk.length
      if (stdoutBytes > maxStdout) {
        fail(new PreviewError(options.overflow ?? 'tool-failed', `${basename(command)} wrote more than ${maxStdout} bytes`))
        return
      }
      chunks.push(chunk)
    })
    child.stderr.on('data', (chunk: Buffer) => {
      stderr = Buffer.concat([stderr, chunk])
      if (stderr.length > STDERR_KEEP) stderr = stderr.subarray(stderr.length - STDERR_KEEP)
    })
    child.once('error', (error) => {
      fail(new PreviewError('tool-failed', `${basename(command)} could not start: ${error.message}`, { cause: error }))
    })
    child.once('close', (code, signal) => {
      clearTimeout(timer)
      if (failure) {
        reject(failure)
        return
      }
      resolvePromise({
        code,
        signal,
        stdout: Buffer.concat(chunks),
        stderr: stderr.toString('utf8'),
        ms: Math.round(performance.now() - started),
      })
    })
  })
}

function basename(path: string): string {
  return path.slice(path.lastIndexOf('/') + 1)
}

/** The last non-empty line of a tool's error output, for messages (at most 300 characters). */
export function lastLine(stderr: string): string {
  const lines = stderr.split('\n').map((line) => line.trim())
  const line = lines.filter((l) => l.length > 0).pop() ?? ''
  return line.length > 300 ? `${line.slice(0, 300)}…` : line
}

/**
 * The error of a run that failed for reasons every tool shares, or `undefined` when the caller must
 * decide: a tool that could not load under the memory cap (`tool-failed`), one that ran out of memory on
 * the input or died of a signal it raised itself (`corrupt`: the same input fails the same way).
 */
export function commonFailure(tool: string, run: ToolRun, memoryBytes: number): PreviewError | undefined {
  const mib = Math.round(memoryBytes / 1048576)
  if (run.code === 127 && /error while loading shared libraries/.test(run.stderr)) {
    return new PreviewError('tool-failed', `${tool} cannot start within the memory bound of ${mib} MiB: ${lastLine(run.stderr)}`)
  }
  if (/bad_alloc|Cannot allocate memory|Out of memory|out of memory/.test(run.stderr)) {
    return new PreviewError('corrupt', `${tool} ran out of memory on this file (bound ${mib} MiB)`)
  }
  const crashed =
    run.signal === 'SIGABRT' ||
    run.signal === 'SIGSEGV' ||
    run.signal === 'SIGBUS' ||
    (run.code !== null && run.code >= 128 + 6 && run.code <= 128 + 11)
  if (crashed) {
    return new PreviewError('corrupt', `${tool} crashed on this file (${run.signal ?? `exit ${run.code}`}; memory bound ${mib} MiB)`)
  }
  return undefined
}

/** The pixel size of a JPEG from its first frame header, or `undefined`. */
export function jpegSize(jpeg: Buffer): { width: number; height: number } | undefined {
  if (jpeg.length < 4 || jpeg[0] !== 0xff || jpeg[1] !== 0xd8) return undefined
  let i = 2
  while (i + 9 < jpeg.length) {
    if (jpeg[i] !== 0xff) return undefined
    const marker = jpeg[i + 1] as number
    if (marker === 0xff) {
      i++
      continue
    }
    const length = jpeg.readUInt16BE(i + 2)
    const isFrame = marker >= 0xc0 && marker <= 0xcf && marker !== 0xc4 && marker !== 0xc8 && marker !== 0xcc
    if (isFrame) return { height: jpeg.readUInt16BE(i + 5), width: jpeg.readUInt16BE(i + 7) }
    i += 2 + length
  }
  return undefined
}
