/** The rows of the benchmark table, their formatting, and the context every scenario gets. */

export type Status = 'ok' | 'MISSED' | 'SKIPPED' | ''

export interface Row {
  scenario: string
  /** What is measured, e.g. "upload 512 MiB". */
  figure: string
  /** Who: "attach-storage" or a baseline. */
  subject: string
  /** The figure, formatted with its unit. */
  value: string
  /** Peak RSS growth of the server process in bytes (VmHWM minus RSS before the measurement). */
  rss?: number
  /** The server's event-loop delay while the work ran, e.g. "p99 12 ms, max 40 ms" (hostile rows). */
  loop?: string
  /** The server's CPU time for the work, e.g. "1.20 s/GiB" or "310 µs/req" (user + system, all threads). */
  cpu?: string
  /** ours / this baseline, for throughput (higher is better); for times, ours / baseline (lower is better). */
  ratio?: number
  target?: string
  status: Status
  note?: string
}

export interface Context {
  quick: boolean
  /** Progress lines go to stderr, so stdout holds the table. */
  log(s: string): void
  add(row: Row): void
  skip(scenario: string, figure: string, reason: string): void
  /** A scratch directory for generated inputs, removed at the end. */
  work: string
  /** Where servers' data directories go (a RAM-backed tmpfs unless --disk): `work` itself. */
  onDisk: boolean
}

export const MiB = 1024 * 1024

export const fmtMiB = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`
export const fmtRate = (mibPerSec: number) => `${mibPerSec.toFixed(1)} MiB/s`
export const fmtRps = (rps: number) => `${Math.round(rps).toLocaleString('en-US')} req/s`
export const fmtMs = (s: number) => `${(s * 1000).toFixed(1)} ms`
/** CPU seconds per GiB moved. */
export const fmtCpuPerGiB = (cpuSeconds: number, bytes: number) => `${(cpuSeconds / (bytes / 1024 / MiB)).toFixed(2)} s/GiB`
/** CPU microseconds per request. */
export const fmtCpuPerReq = (cpuSeconds: number, requests: number) => `${Math.round((cpuSeconds * 1e6) / requests)} µs/req`

/** `ok` or `MISSED` for a ratio against a minimum (throughput) or maximum (time). */
export function judge(value: number, op: '>=' | '<=', limit: number): Status {
  if (!Number.isFinite(value)) return 'MISSED'
  return (op === '>=' ? value >= limit : value <= limit) ? 'ok' : 'MISSED'
}

export const target = (op: '>=' | '<=', limit: number, what = '') => `${op === '>=' ? '>=' : '<='} ${limit}${what}`

/** Two decimals, or three when two would print the target's own limit (a 0.9995 that MISSED >= 1). */
function ratioText(r: Row): string {
  const two = r.ratio!.toFixed(2)
  const limit = /(\d+(?:\.\d+)?)/.exec(r.target ?? '')?.[1]
  return limit !== undefined && Number(two) === Number(limit) && r.ratio !== Number(limit) ? r.ratio!.toFixed(3) : two
}

/** Splits text into lines of at most `width` characters, at spaces where it can. */
function wrap(text: string, width: number): string[] {
  const out: string[] = []
  let rest = text
  while (rest.length > width) {
    let cut = rest.lastIndexOf(' ', width)
    if (cut <= 0) cut = width
    out.push(rest.slice(0, cut))
    rest = rest.slice(cut).trimStart()
  }
  out.push(rest)
  return out
}

/** Widest figure and subject columns; longer names wrap onto continuation lines. */
const WRAP: Record<number, number> = { 1: 30, 2: 38 }

/** Prints the rows as an aligned text table. */
export function renderTable(rows: Row[]): string {
  // The event-loop column only when a row has one (the hostile scenario's).
  const withLoop = rows.some((r) => r.loop !== undefined)
  const head = ['scenario', 'figure', 'subject', 'value', 'peak RSS +', 'server CPU', 'ratio', 'target', 'status']
  if (withLoop) head.splice(6, 0, 'event loop')
  const LAST = head.length - 1
  const cells = rows.map((r) => {
    const c = [
      r.scenario,
      r.figure,
      r.subject,
      r.value,
      r.rss === undefined ? '' : fmtMiB(r.rss),
      r.cpu ?? '',
      r.ratio === undefined ? '' : ratioText(r),
      r.target ?? '',
      r.status + (r.note ? `${r.status ? ' ' : ''}(${r.note})` : ''),
    ]
    if (withLoop) c.splice(6, 0, r.loop ?? '')
    return c
  })
  const widths = head.map((h, i) => Math.max(h.length, ...cells.map((c) => (i === LAST ? 0 : Math.min(c[i]!.length, WRAP[i] ?? Infinity)))))
  const line = (c: string[]) =>
    c
      .map((x, i) => (i === LAST ? x : i >= 3 && i <= (withLoop ? 7 : 6) ? x.padStart(widths[i]!) : x.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd()
  const out = [line(head), widths.map((w, i) => (i === LAST ? '------' : '-'.repeat(w))).join('  ')]
  let last = ''
  for (let i = 0; i < cells.length; i++) {
    const c = cells[i]!
    const key = `${c[0]}\u0000${c[1]}`
    if (i > 0 && c[0] !== rows[i - 1]!.scenario) out.push('')
    // Repeated scenario / figure names are blanked so that each figure's baselines read as a group.
    const shown = [...c]
    if (key === last) {
      shown[0] = ''
      shown[1] = ''
    } else if (i > 0 && c[0] === rows[i - 1]!.scenario) {
      shown[0] = ''
    }
    last = key
    const figure = wrap(shown[1]!, WRAP[1]!)
    const subject = wrap(shown[2]!, WRAP[2]!)
    out.push(line([shown[0]!, figure[0]!, subject[0]!, ...shown.slice(3)]))
    for (let k = 1; k < Math.max(figure.length, subject.length); k++) {
      out.push(line(['', figure[k] ?? '', subject[k] ?? '', ...head.slice(3).map(() => '')]))
    }
  }
  return out.join('\n')
}
