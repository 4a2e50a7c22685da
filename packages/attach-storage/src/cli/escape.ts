/**
 * What the command prints of stored names (keys, domains, error messages) goes through one escape: a key
 * holding `ESC [ 2 J` or U+202E must not clear the operator's terminal or reverse what follows it.
 */

/**
 * C0 controls, DEL, C1 controls, and the invisible direction and separator characters (U+061C, U+200E,
 * U+200F, U+202A-U+202E, U+2066-U+2069, U+2028, U+2029).
 */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finds the control characters to escape
const CONTROLS = /[\u0000-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g

/** Same set without TAB: a report line's own field separator. */
// biome-ignore lint/suspicious/noControlCharactersInRegex: finds the control characters to escape
const CONTROLS_BUT_TAB = /[\u0000-\u0008\u000a-\u001f\u007f-\u009f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g

const escaped = (c: string): string => {
  const code = c.charCodeAt(0)
  return code < 0x100 ? `\\x${code.toString(16).padStart(2, '0')}` : `\\u${code.toString(16).padStart(4, '0')}`
}

/**
 * A value as text a terminal shows as it is: each control or direction character becomes `\xHH` (below
 * U+0100) or `\uHHHH`. Printable text, backslashes included, is unchanged; the answer holds no control
 * character, so escaping it again changes nothing.
 */
export function escapeControls(value: string): string {
  return value.replace(CONTROLS, escaped)
}

/** A whole report line: like {@link escapeControls}, but the TABs between its fields stay. */
export function escapeLine(line: string): string {
  return line.replace(CONTROLS_BUT_TAB, escaped)
}
