const SIZE_UNITS: Record<string, number> = {
  b: 1,
  kb: 1024,
  k: 1024,
  kib: 1024,
  mb: 1024 ** 2,
  m: 1024 ** 2,
  mib: 1024 ** 2,
  gb: 1024 ** 3,
  g: 1024 ** 3,
  gib: 1024 ** 3,
  tb: 1024 ** 4,
  tib: 1024 ** 4,
}

/**
 * Parses a size: a number (in `numberUnit`, bytes by default) or a string with its unit
 * (`"500KB"`, `"2 MB"`, `"1GiB"`; units are binary: 1 KB = 1024 bytes). Returns bytes, or
 * `undefined` when the value is not a size.
 */
export function parseSize(value: unknown, numberUnit: 'b' | 'mb' = 'b'): number | undefined {
  if (typeof value === 'number') {
    if (!Number.isFinite(value) || value < 0) return undefined
    return Math.floor(value * (SIZE_UNITS[numberUnit] ?? 1))
  }
  if (typeof value !== 'string') return undefined
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$/.exec(value)
  if (!m) return undefined
  const unit = m[2] ? m[2].toLowerCase() : numberUnit
  const factor = SIZE_UNITS[unit]
  if (factor === undefined) return undefined
  return Math.floor(Number(m[1]) * factor)
}

const DURATION_UNITS: Record<string, number> = { ms: 1, s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }

/** Parses a duration: a number of seconds or a string such as `"24h"`, `"30m"`, `"90s"`, `"7d"`. Returns ms. */
export function parseDuration(value: unknown): number | undefined {
  if (typeof value === 'number') return Number.isFinite(value) && value >= 0 ? value * 1000 : undefined
  if (typeof value !== 'string') return undefined
  const m = /^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)?\s*$/.exec(value)
  if (!m) return undefined
  return Math.floor(Number(m[1]) * (DURATION_UNITS[m[2] ?? 's'] ?? 1000))
}
