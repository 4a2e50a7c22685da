import { fileTypeFromBuffer } from 'file-type'
import mime from 'mime'

/** How many leading bytes are kept for content sniffing. */
export const SNIFF_BYTES = 64 * 1024

/** Media types whose text a browser may run as script or markup; never served inline. */
const ACTIVE_TYPES = new Set([
  'text/html',
  'application/xhtml+xml',
  'image/svg+xml',
  'text/xml',
  'application/xml',
  'text/javascript',
  'application/javascript',
  'application/ecmascript',
  'text/ecmascript',
  'application/x-javascript',
  'text/xsl',
  'application/xslt+xml',
  'application/rdf+xml',
  'application/mathml+xml',
  'text/vtt',
  'application/pdf+html',
])

/** True when a browser could run script from this type if it were served inline. */
export function isActiveContent(type: string): boolean {
  const t = type.split(';')[0]!.trim().toLowerCase()
  return ACTIVE_TYPES.has(t) || t.endsWith('+xml') || t.includes('javascript') || t === 'multipart/x-mixed-replace'
}

function looksLikeText(head: Uint8Array): boolean {
  if (head.length === 0) return true
  const sample = head.subarray(0, 8192)
  let suspicious = 0
  for (const b of sample) {
    if (b === 0) return false
    if (b < 7 || (b > 13 && b < 32 && b !== 27)) suspicious++
  }
  if (suspicious / sample.length > 0.05) return false
  try {
    // Only the last few bytes may be a cut multi-byte sequence.
    new TextDecoder('utf-8', { fatal: true }).decode(sample.subarray(0, Math.max(0, sample.length - 4)))
    return true
  } catch {
    return false
  }
}

/**
 * Derives a file's media type from its leading bytes, never from what the client said. A binary
 * signature wins; text content takes the type its extension names when that is a text type (so CSV stays
 * CSV and HTML is known as HTML); anything else is `application/octet-stream`.
 */
export async function sniffType(head: Uint8Array, fileName: string): Promise<string> {
  const detected = await fileTypeFromBuffer(head).catch(() => undefined)
  if (detected) return detected.mime
  const byName = mime.getType(fileName) ?? undefined
  if (looksLikeText(head)) {
    if (byName && (byName.startsWith('text/') || isTextual(byName))) return byName
    if (/^\s*<svg[\s>]/i.test(new TextDecoder().decode(head.subarray(0, 1024)))) return 'image/svg+xml'
    return 'text/plain'
  }
  return 'application/octet-stream'
}

function isTextual(type: string): boolean {
  return (
    type === 'application/json' ||
    type.endsWith('+json') ||
    type.endsWith('+xml') ||
    type === 'application/xml' ||
    type.includes('javascript') ||
    type === 'application/x-sh' ||
    type === 'application/sql' ||
    type === 'application/yaml'
  )
}

/** The lower-case extension of a name without its dot (`""` when none), limited to safe characters. */
export function extensionOf(fileName: string): string {
  const base = fileName.split(/[\\/]/).pop() ?? ''
  const dot = base.lastIndexOf('.')
  if (dot <= 0 || dot === base.length - 1) return ''
  const ext = base.slice(dot + 1).toLowerCase()
  return /^[a-z0-9]{1,16}$/.test(ext) ? ext : ''
}
