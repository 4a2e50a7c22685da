/**
 * The nearest known name to a mistyped one: the known name within a Damerau-Levenshtein distance of 2
 * (the smallest wins), else the one the typo starts (or that starts the typo), else none.
 *
 * @example
 * nearestName('tmp-tll', ['tmp-ttl', 'tmp-dir']) // 'tmp-ttl'
 */
export function nearestName(typo: string, known: readonly string[]): string | undefined {
  const lower = typo.toLowerCase()
  let best: string | undefined
  let bestDistance = 3
  for (const name of known) {
    const d = distance(lower, name.toLowerCase())
    if (d < bestDistance) {
      best = name
      bestDistance = d
    }
  }
  if (best !== undefined) return best
  return known.find((name) => {
    const n = name.toLowerCase()
    return lower.length >= 3 && n.length >= 3 && (n.startsWith(lower) || lower.startsWith(n))
  })
}

/** The message tail of an unknown name: `did you mean x?`, else the list of known names. */
export function suggestion(typo: string, known: readonly string[]): string {
  const near = nearestName(typo, known)
  return near !== undefined ? `did you mean ${near}?` : `known settings: ${known.join(', ')}`
}

/** Damerau-Levenshtein distance (optimal string alignment), cut short past 2. */
function distance(a: string, b: string): number {
  if (Math.abs(a.length - b.length) > 2) return 3
  const width = b.length + 1
  const d = new Array<number>((a.length + 1) * width).fill(0)
  const at = (i: number, j: number): number => d[i * width + j] ?? 0
  for (let i = 0; i <= a.length; i++) {
    for (let j = 0; j <= b.length; j++) {
      let value: number
      if (i === 0 || j === 0) value = i + j
      else {
        const cost = a[i - 1] === b[j - 1] ? 0 : 1
        value = Math.min(at(i - 1, j) + 1, at(i, j - 1) + 1, at(i - 1, j - 1) + cost)
        if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) value = Math.min(value, at(i - 2, j - 2) + 1)
      }
      d[i * width + j] = value
    }
  }
  return at(a.length, b.length)
}
