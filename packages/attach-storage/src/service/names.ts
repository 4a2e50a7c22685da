/** Client text made safe to keep: file names, `ext` and `fmetaValue`. */

export const DISPLAY_NAME_MAX = 1024

/** Cleans a client's file name for display: no path, no control characters, bounded length. */
export function cleanDisplayName(name: unknown, fallback = 'file'): string {
  const base = (typeof name === 'string' ? name : '').split(/[\\/]/).pop() ?? ''
  // Lone surrogates become U+FFFD, and the cut never splits a pair: the name stays valid UTF-16 (and UTF-8).
  // biome-ignore lint/suspicious/noControlCharactersInRegex: strips control characters from a display name
  const clean = wellFormed(base.replace(/[\u0000-\u001f\u007f]/g, '').trim(), DISPLAY_NAME_MAX)
  return clean || fallback
}

/**
 * A string cut to `max` UTF-16 units that stays valid UTF-16 (and so UTF-8 in every database): lone
 * surrogates become U+FFFD and the cut never splits a pair.
 */
function wellFormed(s: string, max: number): string {
  return s
    .replace(/\p{Surrogate}/gu, '\ufffd')
    .slice(0, max)
    .replace(/[\ud800-\udbff]$/, '')
}

/** `ext` / `fmetaValue` of a client: null stays null, anything else becomes well-formed text of at most 1024 units. */
export function cleanText(value: unknown): string | null {
  return value === undefined || value === null ? null : wellFormed(String(value), 1024)
}
