/**
 * The hostile scenario's tools: requests with a time cap (a stalled server answers "no answer in N s"
 * instead of stopping the bench), a /healthz pinger that says how long a bystander waited, and one
 * measured row: the server's event-loop delay (bench/lib/loop-probe.ts), its peak RSS growth and CPU.
 */
import http from 'node:http'
import { type LoopDelay, LOOP_PROBE_ARGS, PeakMemory, readLoopDelay } from './proc.js'
import { type Reference, startReference } from './reference.js'
import { type Context, MiB, type Status } from './report.js'

export interface Answer {
  /** 0 when there was no answer (see `error`). */
  status: number
  bytes: number
  seconds: number
  body: Buffer
  headers: http.IncomingHttpHeaders
  /** `timeout`, or the socket error's code (EPIPE, ECONNRESET, ...). */
  error?: string
}

/**
 * One request, its answer counted (the first `keep` bytes kept); after `timeoutMs` it is abandoned and
 * answers `error: 'timeout'`. A socket error answers its code, never throws.
 */
export function call(
  url: string,
  init: {
    method?: string
    headers?: Record<string, string>
    body?: string | Buffer
    keep?: number
    timeoutMs?: number
  } = {},
): Promise<Answer> {
  const started = performance.now()
  const keep = init.keep ?? 64 * 1024
  return new Promise((resolve) => {
    let settled = false
    const chunks: Buffer[] = []
    let kept = 0
    let bytes = 0
    let status = 0
    let headers: http.IncomingHttpHeaders = {}
    const finish = (error?: string) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      resolve({ status, bytes, seconds: (performance.now() - started) / 1000, body: Buffer.concat(chunks), headers, error })
    }
    const req = http.request(url, { method: init.method ?? 'GET', headers: init.headers, agent: false }, (res) => {
      status = res.statusCode ?? 0
      headers = res.headers
      res.on('data', (c: Buffer) => {
        bytes += c.length
        if (kept < keep) {
          chunks.push(c.subarray(0, keep - kept))
          kept += Math.min(c.length, keep - kept)
        }
      })
      res.on('end', () => finish())
      res.on('error', (err: NodeJS.ErrnoException) => finish(err.code ?? err.message))
    })
    const timer = setTimeout(() => {
      finish('timeout')
      req.destroy()
    }, init.timeoutMs ?? 60_000)
    req.on('error', (err: NodeJS.ErrnoException) => finish(err.code ?? err.message))
    req.end(init.body)
  })
}

/** "200, 1.2 KiB in 3.4 s", or "no answer in 60 s", or "EPIPE after 0.1 s". */
export function describe(a: Answer, timeoutS = 60): string {
  if (a.error === 'timeout') return `no answer in ${timeoutS} s`
  if (a.error && !a.status) return `${a.error} after ${a.seconds.toFixed(1)} s`
  return `${a.status}${code(a)}, ${size(a.bytes)} in ${a.seconds.toFixed(1)} s`
}

/** ` too-many-entries` when the body is JSON with a `code`. */
export function code(a: Answer): string {
  try {
    const c = JSON.parse(a.body.toString()).code
    return typeof c === 'string' ? ` ${c}` : ''
  } catch {
    return ''
  }
}

export function size(bytes: number): string {
  if (bytes >= 1024 * MiB) return `${(bytes / 1024 / MiB).toFixed(2)} GiB`
  if (bytes >= MiB) return `${(bytes / MiB).toFixed(1)} MiB`
  if (bytes >= 1024) return `${(bytes / 1024).toFixed(1)} KiB`
  return `${bytes} B`
}

/** Counts of each value: "38 × 200, 2 × EPIPE". */
export function tally(xs: Array<string | number>): string {
  const m = new Map<string, number>()
  for (const x of xs) m.set(String(x), (m.get(String(x)) ?? 0) + 1)
  return [...m].map(([k, n]) => `${n} × ${k}`).join(', ')
}

/** GET /healthz every 250 ms, one at a time: the longest a bystander waited while the attack ran. */
export function healthPinger(base: string): { stop(): number } {
  let worst = 0
  let running = true
  let inflight: number | undefined
  const loop = async () => {
    while (running) {
      inflight = performance.now()
      await call(`${base}/healthz`, { timeoutMs: 120_000 })
      worst = Math.max(worst, performance.now() - inflight)
      inflight = undefined
      await new Promise((r) => setTimeout(r, 250))
    }
  }
  void loop()
  return {
    stop() {
      running = false
      if (inflight !== undefined) worst = Math.max(worst, performance.now() - inflight)
      return worst / 1000
    },
  }
}

export const fmtLoop = (d: LoopDelay | undefined, stalled: string) => (d ? `p99 ${fmtMsShort(d.p99)}, max ${fmtMsShort(d.max)}` : stalled)

const fmtMsShort = (ms: number) => (ms >= 1000 ? `${(ms / 1000).toFixed(1)} s` : `${Math.round(ms)} ms`)

/** What a row's attack reports. */
export interface Outcome {
  /** The answer(s), e.g. "400 too-many-entries, 96 B in 0.1 s". */
  value: string
  /** Whether the answer is what the contract asks (undefined: not judged). */
  asked?: boolean
  note?: string
  /** The server may still be busy (a request was abandoned): the next row starts a fresh one. */
  abandoned?: boolean
}

/** The reference server with the loop probe, started again when a row left it busy. */
export class HostileServer {
  #server: Reference | undefined
  constructor(
    readonly ctx: Context,
    readonly env: Record<string, string> = {},
  ) {}

  async get(): Promise<Reference> {
    this.#server ??= await startReference(this.ctx.work, 100 * MiB, 'hono-app', 'attach-storage', this.env, LOOP_PROBE_ARGS)
    return this.#server
  }

  async stop(): Promise<void> {
    const s = this.#server
    this.#server = undefined
    await s?.stop()
  }

  /**
   * Runs `setup`, then one attack, and adds its row: the server's event-loop delay p99 and max while it ran (target
   * p99 <= 100 ms), its peak RSS growth and CPU, and how long a /healthz sent meanwhile waited.
   */
  async row(
    figure: string,
    target: string,
    attack: (s: Reference) => Promise<Outcome>,
    setup?: (s: Reference) => Promise<void>,
  ): Promise<void> {
    const { ctx } = this
    ctx.log(`hostile: ${figure}`)
    const s = await this.get()
    // What the attack needs (files saved, variants made) is made before the measurement starts.
    if (setup) {
      try {
        await setup(s)
      } catch (err) {
        ctx.add({
          scenario: 'hostile',
          figure,
          subject: 'reference server',
          value: '',
          status: 'MISSED',
          note: `setup: ${(err as Error).message.split('\n')[0]}`,
        })
        await this.stop()
        return
      }
    }
    await readLoopDelay(s, 5000)
    const probe = new PeakMemory(s.pid)
    probe.start()
    const health = healthPinger(s.base)
    let out: Outcome
    try {
      out = await attack(s)
    } catch (err) {
      out = { value: `bench error: ${(err as Error).message.split('\n')[0]}`, abandoned: true }
    }
    const waited = health.stop()
    const mem = probe.stop()
    const loop = await readLoopDelay(s, out.abandoned ? 5000 : 30_000)
    const loopOk = loop !== undefined && loop.p99 <= 100
    const status: Status = !loopOk || out.asked === false ? 'MISSED' : 'ok'
    const notes = [out.note, `/healthz waited up to ${waited.toFixed(1)} s`, loop ? `raw p99 ${loop.rawP99} ms` : undefined]
    ctx.add({
      scenario: 'hostile',
      figure,
      subject: 'reference server',
      value: out.value,
      rss: mem.growth,
      cpu: Number.isFinite(mem.cpu) ? `${mem.cpu.toFixed(1)} s` : '',
      loop: fmtLoop(loop, 'stalled: no probe answer'),
      target: `${target}; loop p99 <= 100 ms`,
      status,
      note: notes.filter(Boolean).join('; '),
    })
    ctx.log(`hostile: ${out.value}; loop ${fmtLoop(loop, 'stalled')}; RSS+ ${(mem.growth / MiB).toFixed(1)} MiB`)
    if (out.abandoned || !loop) await this.stop()
  }
}
