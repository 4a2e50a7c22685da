/**
 * Servers under test, each in its own child process on 127.0.0.1, so that its memory is measured apart
 * from the load generator (this process and wrk).
 */
import { spawn, type ChildProcess } from 'node:child_process'
import { readFileSync, writeFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'

export const ROOT = join(dirname(fileURLToPath(import.meta.url)), '..', '..')

/** `node --conditions=@attach-storage/source --import tsx`, as the root scripts run TypeScript. */
export const NODE_TS = ['--conditions=@attach-storage/source', '--import', 'tsx']

export interface Server {
  name: string
  base: string
  port: number
  pid: number
  child: ChildProcess
  /** Everything the server wrote, for error messages. */
  output(): string
  stop(): Promise<void>
}

let profileDir: string | undefined

/**
 * `--profile <dir>`: the attach-storage servers run with `--cpu-prof`, writing .cpuprofile files into a
 * folder of `dir` per server when they stop (open it in Chrome DevTools' Performance panel or speedscope).
 */
export function setProfileDir(dir: string | undefined): void {
  profileDir = dir
}

/** Starts `node <args>` and waits for its `listening on http://127.0.0.1:<port>` line. */
export async function startServer(
  name: string,
  script: string,
  env: Record<string, string>,
  args: string[] = [],
  options: { profile?: boolean; timeoutMs?: number; nodeArgs?: string[] } = {},
): Promise<Server> {
  const timeoutMs = options.timeoutMs ?? 60_000
  // One folder per server: Node writes one profile per thread (the main one is the largest; tsx's
  // module loader runs in a worker of its own).
  const prof =
    options.profile && profileDir ? ['--cpu-prof', `--cpu-prof-dir=${join(profileDir, `${name.replace(/\W+/g, '-')}-${Date.now()}`)}`] : []
  const child = spawn(process.execPath, [...prof, ...NODE_TS, ...(options.nodeArgs ?? []), script, ...args], {
    cwd: ROOT,
    env: { ...process.env, PORT: '0', NODE_ENV: 'production', ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  })
  let out = ''
  const onData = (d: Buffer) => {
    out += d.toString()
    if (out.length > 64_000) out = out.slice(-32_000)
  }
  child.stdout!.on('data', onData)
  child.stderr!.on('data', onData)
  const port = await new Promise<number>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name} did not start within ${timeoutMs} ms:\n${out}`)), timeoutMs)
    const check = () => {
      const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)
      if (m) {
        clearTimeout(timer)
        child.stdout!.off('data', check)
        resolve(Number(m[1]))
      }
    }
    child.stdout!.on('data', check)
    child.once('exit', (code) => {
      clearTimeout(timer)
      reject(new Error(`${name} exited with ${code} before listening:\n${out}`))
    })
  })
  const exited = new Promise<void>((r) => child.once('exit', () => r()))
  return {
    name,
    port,
    base: `http://127.0.0.1:${port}`,
    pid: child.pid!,
    child,
    output: () => out,
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return
      child.kill('SIGTERM')
      const t = setTimeout(() => child.kill('SIGKILL'), 5000)
      await exited
      clearTimeout(t)
    },
  }
}

function status(pid: number): Record<string, number> {
  const out: Record<string, number> = {}
  for (const line of readFileSync(`/proc/${pid}/status`, 'utf8').split('\n')) {
    const m = /^(Vm\w+):\s+(\d+) kB/.exec(line)
    if (m) out[m[1]!] = Number(m[2]) * 1024
  }
  return out
}

/** CPU time (user + system, all threads) a process has used so far, in seconds. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, 'utf8')
  // Fields after the command name (which may hold spaces) in parentheses: utime is the 14th, stime the 15th.
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(f[11]) + Number(f[12])) / CLOCK_TICKS
}

/** USER_HZ: 100 on every Linux architecture Node runs on. */
const CLOCK_TICKS = 100

/** Current resident set size of a process, in bytes. */
export function rss(pid: number): number {
  return status(pid).VmRSS ?? 0
}

/**
 * Peak-memory and CPU probe of one server process: `start()` takes the resident set now as the baseline and
 * resets the kernel's high-water mark (writing 5 to /proc/<pid>/clear_refs, Linux >= 4.0); `stop()`
 * answers the peak growth: VmHWM minus that baseline. RSS is also sampled every 10 ms, which serves
 * when the high-water mark cannot be reset (not root, old kernel).
 */
export class PeakMemory {
  #base = 0
  #sampledMax = 0
  #timer: NodeJS.Timeout | undefined
  #hwmReset = false
  #cpu0 = 0
  constructor(readonly pid: number) {}

  start(): void {
    this.#cpu0 = cpuSeconds(this.pid)
    try {
      writeFileSync(`/proc/${this.pid}/clear_refs`, '5')
      this.#hwmReset = true
    } catch {
      this.#hwmReset = false
    }
    this.#base = rss(this.pid)
    this.#sampledMax = this.#base
    this.#timer = setInterval(() => {
      try {
        this.#sampledMax = Math.max(this.#sampledMax, rss(this.pid))
      } catch {
        // process gone
      }
    }, 10)
    this.#timer.unref()
  }

  /** Peak growth in bytes since start() and how it was measured, and the CPU seconds used meanwhile. */
  stop(): { growth: number; method: 'VmHWM' | 'sampled'; cpu: number } {
    clearInterval(this.#timer)
    let cpu = NaN
    try {
      cpu = cpuSeconds(this.pid) - this.#cpu0
    } catch {
      // process gone
    }
    let sampled = this.#sampledMax
    try {
      sampled = Math.max(sampled, rss(this.pid))
    } catch {
      // process gone
    }
    if (this.#hwmReset) {
      try {
        const hwm = status(this.pid).VmHWM ?? 0
        return { growth: Math.max(0, Math.max(hwm, sampled) - this.#base), method: 'VmHWM', cpu }
      } catch {
        // fall through
      }
    }
    return { growth: Math.max(0, sampled - this.#base), method: 'sampled', cpu }
  }
}

/** Node arguments that load bench/lib/loop-probe.ts into a server (after tsx, which it needs). */
export const LOOP_PROBE_ARGS = ['--import', join(ROOT, 'bench/lib/loop-probe.ts')]

export interface LoopDelay {
  /** Milliseconds; p99 corrected for coordinated omission (see loop-probe.ts). */
  p99: number
  max: number
  samples: number
  rawP99: number
}

/**
 * Asks a server started with {@link LOOP_PROBE_ARGS} for its event-loop delay since the last ask (and
 * starts over). A loop that is held answers only when it is free again: after `timeoutMs` this answers
 * undefined (the server is still stalled).
 */
export function readLoopDelay(server: Server, timeoutMs = 10_000): Promise<LoopDelay | undefined> {
  return new Promise((resolve) => {
    let buf = ''
    const onData = (d: Buffer) => {
      buf += d.toString()
      const m = /loop-probe (\{[^\n]*\})\n/.exec(buf)
      if (m) {
        done()
        resolve(JSON.parse(m[1]!) as LoopDelay)
      }
    }
    const timer = setTimeout(() => {
      done()
      resolve(undefined)
    }, timeoutMs)
    const done = () => {
      clearTimeout(timer)
      server.child.stdout!.off('data', onData)
    }
    server.child.stdout!.on('data', onData)
    if (!server.child.kill('SIGUSR2')) {
      done()
      resolve(undefined)
    }
  })
}
