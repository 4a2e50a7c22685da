/** Progress of a long command: a bar with bytes per second and time left on a terminal, JSON lines otherwise. */
import cliProgress from 'cli-progress'
import { formatBytes } from './runtime.js'

/** Counts files and bytes done. */
export interface Progress {
  /** One more file done, of `bytes` bytes. */
  tick(bytes: number): void
  /** Stops the bar (or writes the last line). */
  stop(): void
}

/** How often a JSON line is written when stderr is not a terminal. */
const JSON_EVERY_MS = 1000

/**
 * A progress reporter on `stream` (stderr): a cli-progress bar when it is a terminal, else JSON lines
 * `{"progress": command, "files", "totalFiles", "bytes", "bytesPerSecond", "etaSeconds"}`: one at once
 * (as the bar shows at once: the walk has begun, over so many files), one per second, one at the end.
 * `totalFiles` may be an estimate (the time left follows it).
 */
export function startProgress(command: string, totalFiles: number, stream: NodeJS.WritableStream & { isTTY?: boolean }): Progress {
  const started = Date.now()
  let files = 0
  let bytes = 0
  const rate = () => {
    const seconds = (Date.now() - started) / 1000
    return seconds > 0 ? bytes / seconds : 0
  }
  const eta = () => {
    const seconds = (Date.now() - started) / 1000
    return files > 0 && totalFiles > files ? Math.round((seconds / files) * (totalFiles - files)) : 0
  }
  if (stream.isTTY) {
    const bar = new cliProgress.SingleBar(
      {
        stream: stream as NodeJS.WritableStream,
        format: `${command} [{bar}] {percentage}% | {value}/{total} files | {done} | {speed}/s | {eta_formatted} left`,
        etaBuffer: 200,
        hideCursor: true,
        clearOnComplete: false,
      },
      cliProgress.Presets.shades_classic,
    )
    bar.start(Math.max(totalFiles, 1), 0, { done: formatBytes(0), speed: formatBytes(0) })
    return {
      tick(n) {
        files++
        bytes += n
        if (files > totalFiles) bar.setTotal(files)
        bar.update(files, { done: formatBytes(bytes), speed: formatBytes(Math.round(rate())) })
      },
      stop: () => bar.stop(),
    }
  }
  const line = () =>
    stream.write(
      `${JSON.stringify({ progress: command, files, totalFiles, bytes, bytesPerSecond: Math.round(rate()), etaSeconds: eta() })}\n`,
    )
  line()
  const timer = setInterval(line, JSON_EVERY_MS)
  timer.unref()
  return {
    tick(n) {
      files++
      bytes += n
    },
    stop() {
      clearInterval(timer)
      line()
    },
  }
}
