/**
 * PDFs written by hand for the preview tests and the bench: pages of coloured shapes (no text, so no font
 * is involved), any number of them in a balanced page tree, and the bad inputs of issue 23: a `/Count`
 * that lies, a page tree or an array nested very deep, a huge MediaBox, and encryption with the standard
 * security handler (V1 R2, RC4 40-bit, written here: no tool is needed).
 */
import { createHash } from 'node:crypto'
import { writeFile } from 'node:fs/promises'

/** What {@link pdfBytes} writes. */
export interface PdfKitOptions {
  /** Real page objects in the page tree. @default 1 */
  pages?: number
  /** Every page's MediaBox, width and height in points. @default [595, 842] (A4) */
  mediaBox?: [number, number]
  /**
   * The root page node's `/Count`, when it should lie about `pages`. The cross-reference table then gets
   * free entries up to that number (unless `padXref` is false), as poppler refuses a count larger than
   * the number of objects.
   */
  claimedCount?: number
  /** With `claimedCount`: pad the cross-reference table to it. @default true */
  padXref?: boolean
  /** An array nested this deep (`[[[…]]]`) in the first page's dictionary under `/Nest`. */
  nestDepth?: number
  /** Extra page-tree nodes with one kid each above the real tree (a tree this much deeper). */
  pageTreeDepth?: number
  /** The document's Title (an Info dictionary); line breaks are written as `\n` escapes. */
  title?: string
  /** Standard security handler V1 R2: the user password opens the file, the owner password lifts limits. */
  encrypt?: { userPassword: string; ownerPassword: string }
}

const FANOUT = 64
/** The 32-byte padding of the standard security handler (PDF 32000-1, 7.6.3.3). */
const PAD = Buffer.from('28bf4e5e4e758a4164004e56fffa01082e2e00b6d0683e802f0ca9fe6453697a', 'hex')

/** RC4, for the 40-bit standard security handler (OpenSSL 3 leaves it to the legacy provider). */
function rc4(key: Buffer, data: Buffer): Buffer {
  const s = Array.from({ length: 256 }, (_, i) => i)
  let j = 0
  for (let i = 0; i < 256; i++) {
    j = (j + (s[i] as number) + (key[i % key.length] as number)) & 255
    ;[s[i], s[j]] = [s[j] as number, s[i] as number]
  }
  const out = Buffer.alloc(data.length)
  let i = 0
  j = 0
  for (let n = 0; n < data.length; n++) {
    i = (i + 1) & 255
    j = (j + (s[i] as number)) & 255
    ;[s[i], s[j]] = [s[j] as number, s[i] as number]
    out[n] = (data[n] as number) ^ (s[((s[i] as number) + (s[j] as number)) & 255] as number)
  }
  return out
}

const md5 = (...parts: Buffer[]): Buffer => createHash('md5').update(Buffer.concat(parts)).digest()
const padded = (password: string): Buffer => Buffer.concat([Buffer.from(password, 'latin1'), PAD]).subarray(0, 32)

/** The /O and /U values and the file key of a V1 R2 handler (algorithms 2, 3 and 4 of PDF 32000-1). */
function standardSecurity(userPassword: string, ownerPassword: string, permissions: number, id: Buffer) {
  const o = rc4(md5(padded(ownerPassword)).subarray(0, 5), padded(userPassword))
  const p = Buffer.alloc(4)
  p.writeInt32LE(permissions)
  const key = md5(padded(userPassword), o, p, id).subarray(0, 5)
  return { o, u: rc4(key, PAD), key }
}

/** The shapes of one page, scaled to its box: three filled rectangles and a stroked diagonal. */
function pageContent(width: number, height: number): Buffer {
  const r = (x: number, y: number, w: number, h: number) => `${x * width} ${y * height} ${w * width} ${h * height} re f`
  return Buffer.from(
    [
      '1 0 0 rg',
      r(0.1, 0.1, 0.5, 0.3),
      '0 0.4 1 rg',
      r(0.4, 0.5, 0.5, 0.4),
      '0.2 0.8 0.2 rg',
      r(0.05, 0.7, 0.2, 0.2),
      `0 0 0 RG ${Math.max(1, width / 200)} w 0 0 m ${width} ${height} l S`,
    ].join('\n'),
  )
}

/** A PDF file's bytes; see {@link PdfKitOptions}. About 90 bytes per page. */
export function pdfBytes(options: PdfKitOptions = {}): Buffer {
  const pageCount = options.pages ?? 1
  const [width, height] = options.mediaBox ?? [595, 842]
  const bodies: Array<string | Buffer> = []
  const alloc = (): number => bodies.push('')
  const catalog = alloc()
  const content = alloc()
  const pageNums = Array.from({ length: pageCount }, alloc)
  const parent = new Map<number, number>()
  const kids = new Map<number, number[]>()
  const counts = new Map<number, number>(pageNums.map((n) => [n, 1]))
  let level = pageNums
  do {
    const next: number[] = []
    for (let i = 0; i < level.length; i += FANOUT) {
      const node = alloc()
      const group = level.slice(i, i + FANOUT)
      kids.set(node, group)
      counts.set(
        node,
        group.reduce((sum, k) => sum + (counts.get(k) ?? 0), 0),
      )
      for (const k of group) parent.set(k, node)
      next.push(node)
    }
    level = next
  } while (level.length > 1)
  let root = level[0] as number
  for (let d = 0; d < (options.pageTreeDepth ?? 0); d++) {
    const node = alloc()
    kids.set(node, [root])
    counts.set(node, counts.get(root) ?? 0)
    parent.set(root, node)
    root = node
  }
  const id = md5(Buffer.from(`attach-storage pdf-kit ${JSON.stringify(options)}`))
  const security = options.encrypt ? standardSecurity(options.encrypt.userPassword, options.encrypt.ownerPassword, -4, id) : undefined
  const encryptNum = security ? alloc() : 0
  const infoNum = options.title === undefined ? 0 : alloc()
  const objectKey = (num: number): Buffer => {
    const tail = Buffer.from([num & 255, (num >> 8) & 255, (num >> 16) & 255, 0, 0])
    return md5(security?.key ?? Buffer.alloc(0), tail).subarray(0, 10)
  }

  bodies[catalog - 1] = `<< /Type /Catalog /Pages ${root} 0 R >>`
  let stream = pageContent(width, height)
  if (security) stream = rc4(objectKey(content), stream)
  bodies[content - 1] = Buffer.concat([Buffer.from(`<< /Length ${stream.length} >>\nstream\n`), stream, Buffer.from('\nendstream')])
  for (const [i, num] of pageNums.entries()) {
    const nest = i === 0 && options.nestDepth ? ` /Nest ${'['.repeat(options.nestDepth)}${']'.repeat(options.nestDepth)}` : ''
    bodies[num - 1] =
      `<< /Type /Page /Parent ${parent.get(num)} 0 R /MediaBox [0 0 ${width} ${height}] /Contents ${content} 0 R /Resources << >>${nest} >>`
  }
  for (const [node, group] of kids) {
    const count = node === root && options.claimedCount !== undefined ? options.claimedCount : counts.get(node)
    const up = parent.has(node) ? ` /Parent ${parent.get(node)} 0 R` : ''
    bodies[node - 1] = `<< /Type /Pages${up} /Kids [${group.map((k) => `${k} 0 R`).join(' ')}] /Count ${count} >>`
  }
  if (security) {
    bodies[encryptNum - 1] = `<< /Filter /Standard /V 1 /R 2 /O <${security.o.toString('hex')}> /U <${security.u.toString('hex')}> /P -4 >>`
  }

  if (options.title !== undefined) {
    const escaped = options.title.replace(/[\\()]/g, (c) => `\\${c}`).replace(/\n/g, '\\n')
    bodies[infoNum - 1] = `<< /Title (${escaped}) >>`
  }

  const chunks: Buffer[] = [Buffer.from('%PDF-1.4\n%\xe2\xe3\xcf\xd3\n', 'latin1')]
  let offset = chunks[0]?.length ?? 0
  const offsets: number[] = []
  for (const [i, body] of bodies.entries()) {
    offsets.push(offset)
    const chunk = Buffer.concat([Buffer.from(`${i + 1} 0 obj\n`), Buffer.from(body), Buffer.from('\nendobj\n')])
    chunks.push(chunk)
    offset += chunk.length
  }
  const size = Math.max(bodies.length + 1, options.padXref === false ? 0 : (options.claimedCount ?? 0) + 1)
  const xref = [`xref\n0 ${size}\n0000000000 65535 f \n`]
  for (const o of offsets) xref.push(`${String(o).padStart(10, '0')} 00000 n \n`)
  for (let n = bodies.length + 1; n < size; n++) xref.push('0000000000 65535 f \n')
  const encrypt = (security ? ` /Encrypt ${encryptNum} 0 R` : '') + (infoNum ? ` /Info ${infoNum} 0 R` : '')
  const hexId = id.toString('hex')
  xref.push(`trailer\n<< /Size ${size} /Root ${catalog} 0 R${encrypt} /ID [<${hexId}> <${hexId}>] >>\nstartxref\n${offset}\n%%EOF\n`)
  chunks.push(Buffer.from(xref.join('')))
  return Buffer.concat(chunks)
}

/** Writes {@link pdfBytes} to `path`; resolves with `path`. */
export async function writePdf(path: string, options: PdfKitOptions = {}): Promise<string> {
  await writeFile(path, pdfBytes(options))
  return path
}
