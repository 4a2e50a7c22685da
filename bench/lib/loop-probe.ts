/**
 * Preload module (`node --import ./bench/lib/loop-probe.ts <server>`): measures the event-loop delay of
 * the server it runs in, without a hook in the server. On SIGUSR2 it prints one line to stdout,
 * `loop-probe {"p99":…,"max":…,"samples":…,"rawP99":…}` (milliseconds since the last SIGUSR2), and starts
 * over.
 *
 * A timer every 10 ms records how late it fired. A loop held for D ms gives one late tick, so a plain
 * histogram of ticks (what `monitorEventLoopDelay()` gives, `rawP99`) lets one 60 s stall hide among the
 * 6,000 ticks of a minute. `p99` is corrected for that (HdrHistogram's coordinated omission correction):
 * a tick D ms late also records the ticks that could not fire, D - 10, D - 20, … ms late, so the
 * percentile is one of wall time: "99 % of the time a callback waited at most p99".
 */
import { createHistogram, monitorEventLoopDelay } from 'node:perf_hooks'

const INTERVAL_MS = 10
/** Values are recorded in microseconds, capped at 10 minutes. */
const CAP_US = 600_000_000

let corrected = createHistogram()
const raw = monitorEventLoopDelay({ resolution: INTERVAL_MS })
raw.enable()

let expected = performance.now() + INTERVAL_MS
const tick = () => {
  const now = performance.now()
  const lateMs = Math.max(0, now - expected)
  corrected.record(Math.min(CAP_US, Math.max(1, Math.round(lateMs * 1000))))
  for (let missed = lateMs - INTERVAL_MS; missed > 0; missed -= INTERVAL_MS) {
    corrected.record(Math.min(CAP_US, Math.max(1, Math.round(missed * 1000))))
  }
  expected = now + INTERVAL_MS
  setTimeout(tick, INTERVAL_MS).unref()
}
setTimeout(tick, INTERVAL_MS).unref()

process.on('SIGUSR2', () => {
  const ms = (ns: number) => Math.round(ns / 1e4) / 100
  const line = {
    p99: corrected.count ? Math.round(corrected.percentile(99) / 10) / 100 : 0,
    max: corrected.count ? Math.round(corrected.max / 10) / 100 : 0,
    samples: corrected.count,
    rawP99: raw.count ? ms(raw.percentile(99)) : 0,
  }
  process.stdout.write(`\nloop-probe ${JSON.stringify(line)}\n`)
  corrected = createHistogram()
  raw.reset()
})
