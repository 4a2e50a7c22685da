/** wrk (Debian package `wrk`), installed on first use when missing and when we are root. */
import { execFile, execFileSync, spawnSync } from 'node:child_process'

let state: { ok: true } | { ok: false; reason: string } | undefined

/** Makes sure wrk is on the PATH; answers why not otherwise. */
export function ensureWrk(log: (s: string) => void): { ok: true } | { ok: false; reason: string } {
  if (state) return state
  const has = () => spawnSync('sh', ['-c', 'command -v wrk'], { stdio: 'ignore' }).status === 0
  if (has()) {
    state = { ok: true }
    return state
  }
  if (process.getuid?.() !== 0) {
    state = { ok: false, reason: 'wrk is not installed and this is not root (install it with: apt-get install -y wrk)' }
    return state
  }
  log('wrk is not installed: installing the Debian package (apt-get update && apt-get install -y wrk) ...')
  try {
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' }
    execFileSync('apt-get', ['update', '-qq'], { stdio: ['ignore', 'ignore', 'inherit'], env })
    execFileSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', 'wrk'], { stdio: ['ignore', 'ignore', 'inherit'], env })
  } catch (err) {
    state = { ok: false, reason: `apt-get install wrk failed: ${(err as Error).message.split('\n')[0]}` }
    return state
  }
  if (!has()) {
    state = { ok: false, reason: 'apt-get install wrk did not put wrk on the PATH' }
    return state
  }
  log('wrk installed.')
  state = { ok: true }
  return state
}

export interface WrkResult {
  rps: number
  requests: number
  non2xx: number
  errors: number
  latencyP50ms: number
  latencyP99ms: number
  mibPerSec: number
}

const unit = (v: string, u: string, table: Record<string, number>) => Number(v) * (table[u] ?? 1)

/** Runs wrk (keep-alive is wrk's default) and parses its report; `script` is a Lua script of wrk's (`-s`). */
export function wrk(url: string, opts: { connections: number; threads: number; seconds: number; script?: string }): Promise<WrkResult> {
  const args = ['-t', String(opts.threads), '-c', String(opts.connections), '-d', `${opts.seconds}s`, '--latency']
  if (opts.script) args.push('-s', opts.script)
  args.push(url)
  return new Promise((resolve, reject) => {
    execFile('wrk', args, { maxBuffer: 1 << 20 }, (err, stdout, stderr) => {
      if (err) return reject(new Error(`wrk failed: ${err.message} ${stderr}`))
      const rps = /Requests\/sec:\s+([\d.]+)/.exec(stdout)
      const total = /(\d+) requests in/.exec(stdout)
      if (!rps || !total) return reject(new Error(`cannot read wrk's output:\n${stdout}`))
      const non2xx = Number(/Non-2xx or 3xx responses:\s+(\d+)/.exec(stdout)?.[1] ?? 0)
      const se = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout)
      const errors = se ? Number(se[1]) + Number(se[2]) + Number(se[3]) + Number(se[4]) : 0
      const lat = (p: string) => {
        const m = new RegExp(`^\\s+${p}%\\s+([\\d.]+)(us|ms|s)`, 'm').exec(stdout)
        return m ? unit(m[1]!, m[2]!, { us: 0.001, ms: 1, s: 1000 }) : NaN
      }
      const tr = /Transfer\/sec:\s+([\d.]+)(B|KB|MB|GB)/.exec(stdout)
      resolve({
        rps: Number(rps[1]),
        requests: Number(total[1]),
        non2xx,
        errors,
        latencyP50ms: lat('50'),
        latencyP99ms: lat('99'),
        mibPerSec: tr ? unit(tr[1]!, tr[2]!, { B: 1 / 1048576, KB: 1 / 1024, MB: 1, GB: 1024 }) : NaN,
      })
    })
  })
}

export interface WrkTarget {
  label: string
  url: string
  pid: number
  /** Lua scripts of wrk's for the measured run and the warm-up ({@link distinctPathsScript}). */
  script?: string
  warmScript?: string
}

/**
 * A wrk script requesting each of `paths` (path and query, on the URL's origin) once, in turn, the
 * threads interleaved so that no path is asked twice while the list lasts: a page of distinct URLs.
 * `threads` is wrk's thread count. The list is read from a file beside the script (LuaJIT limits the
 * constants of one chunk).
 */
export async function distinctPathsScript(file: string, paths: readonly string[], threads = 2): Promise<string> {
  const { writeFile } = await import('node:fs/promises')
  await writeFile(`${file}.txt`, `${paths.join('\n')}\n`)
  await writeFile(
    file,
    `local threads = 0
function setup(thread)
  thread:set("tid", threads)
  threads = threads + 1
end
local paths = {}
for line in io.lines(${JSON.stringify(`${file}.txt`)}) do paths[#paths + 1] = line end
local i = nil
request = function()
  if i == nil then i = tid end
  local path = paths[(i % #paths) + 1]
  i = i + ${threads}
  return wrk.format("GET", path)
end
`,
  )
  return file
}

export interface WrkMeasured extends WrkResult {
  label: string
  rssGrowth: number
  /** Server CPU seconds over the measured run. */
  cpu: number
  /** Server CPU microseconds per request. */
  cpuPerReq: number
}

/**
 * wrk against each target in turn (the others idle): a warm-up, then the measured run, with the target
 * server's peak RSS growth over the measured run. 32 connections, 2 threads unless told otherwise.
 */
export async function wrkEach(
  targets: WrkTarget[],
  opts: { seconds: number; warmSeconds: number; connections?: number; threads?: number; log: (s: string) => void },
): Promise<WrkMeasured[]> {
  const { PeakMemory } = await import('./proc.js')
  const out: WrkMeasured[] = []
  const c = { connections: opts.connections ?? 32, threads: opts.threads ?? 2 }
  for (const t of targets) {
    opts.log(`wrk ${c.connections} connections, ${opts.warmSeconds} s warm-up + ${opts.seconds} s: ${t.label} ${t.url}`)
    await wrk(t.url, { ...c, seconds: opts.warmSeconds, script: t.warmScript })
    const probe = new PeakMemory(t.pid)
    probe.start()
    const r = await wrk(t.url, { ...c, seconds: opts.seconds, script: t.script })
    const mem = probe.stop()
    if (r.non2xx > 0 || r.errors > 0) {
      throw new Error(`${t.label}: ${r.non2xx} non-2xx answers and ${r.errors} socket errors out of ${r.requests} requests`)
    }
    out.push({ ...r, label: t.label, rssGrowth: mem.growth, cpu: mem.cpu, cpuPerReq: (mem.cpu * 1e6) / r.requests })
  }
  return out
}

/**
 * `base` and `subject` measured side by side in `count` rounds, the order reversed every other round, so
 * that a ratio is only taken between neighbours: this machine's speed drifts by a third over tens of
 * seconds. Sorted by the round's ratio of rates, subject over base: the median round is
 * `rounds[count >> 1]`.
 */
export async function wrkRounds(
  base: WrkTarget,
  subject: WrkTarget,
  count: number,
  opts: Parameters<typeof wrkEach>[1],
): Promise<Array<[base: WrkMeasured, subject: WrkMeasured]>> {
  const rounds: Array<[WrkMeasured, WrkMeasured]> = []
  for (let round = 0; round < count; round++) {
    const [a, b] = (await wrkEach(round % 2 ? [subject, base] : [base, subject], opts)) as [WrkMeasured, WrkMeasured]
    rounds.push(round % 2 ? [b, a] : [a, b])
  }
  return rounds.sort(([b1, s1], [b2, s2]) => s1.rps / b1.rps - s2.rps / b2.rps)
}
