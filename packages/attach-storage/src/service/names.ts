/** Client text made safe to keep: file names, `ext` and `fmetaValue`. */

export const DISPLAY_NAME_MAX = 1024

/**
 * What a display name never keeps: C0 and C1 controls and DEL, and the invisible characters that change
 * how a name reads: the bidirectional marks, embeddings, overrides and isolates (U+061C, U+200E, U+200F,
 * U+202A-U+202E, U+2066-U+2069: `invoice\u202Efdp.exe` shows as `invoiceexe.pdf`) and the line and
 * paragraph separators (U+2028, U+2029).
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: these are the characters a display name loses
const UNSAFE_IN_NAME = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\u2028\u2029]/g

/**
 * Cleans a client's file name for display: no path, no control or invisible direction characters, bounded
 * length. Every name a client gives goes through it (upload, PUT, tus metadata, presign, the confirmed
 * save and the host's commit, ZIP titles).
 */
export function cleanDisplayName(name: unknown, fallback = 'file'): string {
  const base = (typeof name === 'string' ? name : '').split(/[\\/]/).pop() ?? ''
  // Lone surrogates become U+FFFD, and the cut never splits a pair: the name stays valid UTF-16 (and UTF-8).
  const clean = wellFormed(base.replace(UNSAFE_IN_NAME, '').trim(), DISPLAY_NAME_MAX)
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
