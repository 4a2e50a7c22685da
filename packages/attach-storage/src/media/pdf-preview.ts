/**
 * PDFs through poppler's command-line tools: `pdfinfo` counts the pages and says whether the file opens
 * at all (encrypted, corrupt); `pdftoppm` renders the first page alone, scaled so its longest side is the
 * preview's, straight to a JPEG on its stdout (no temporary file). Each run is bounded by
 * {@link runTool}: a deadline, an address-space cap, capped output.
 */
import { resolve } from 'node:path'
import {
  commonFailure,
  jpegSize,
  lastLine,
  type PreviewBounds,
  PreviewError,
  type PreviewTools,
  runTool,
  type ToolRun,
} from './preview-tools.js'

function need(tool: string | undefined, name: string): string {
  if (!tool) throw new PreviewError('tool-failed', `${name} is not installed (Debian: apt-get install poppler-utils)`)
  return tool
}

/** The value of the last line starting with `label` (the document's own Title or Subject come first, and may hold line breaks). */
function field(text: string, label: string): string | undefined {
  let value: string | undefined
  for (const line of text.split('\n')) if (line.startsWith(label)) value = line.slice(label.length).trim()
  return value
}

/** The error for a poppler tool that exited non-zero. */
function popplerFailure(tool: string, run: ToolRun, bounds: PreviewBounds): PreviewError {
  const common = commonFailure(tool, run, bounds.memoryBytes)
  if (common) return common
  if (/Incorrect password/i.test(run.stderr)) {
    return new PreviewError('encrypted', 'the PDF is encrypted with a password')
  }
  if (/Couldn't open file|No such file/i.test(run.stderr)) {
    return new PreviewError('tool-failed', `${tool} could not open the file: ${lastLine(run.stderr)}`)
  }
  return new PreviewError('corrupt', `not a readable PDF: ${lastLine(run.stderr) || `${tool} exited with ${run.code}`}`)
}

async function pageCount(path: string, tools: PreviewTools, bounds: PreviewBounds): Promise<number> {
  const pdfinfo = need(tools.pdfinfo, 'pdfinfo')
  const run = await runTool(pdfinfo, [resolve(path)], {
    timeoutSeconds: bounds.timeoutSeconds,
    memoryBytes: bounds.memoryBytes,
    maxStdout: 1024 * 1024,
    // Only the file's own metadata (a Title of megabytes) can make pdfinfo say that much.
    overflow: 'corrupt',
  })
  if (run.code !== 0) throw popplerFailure('pdfinfo', run, bounds)
  const text = run.stdout.toString('latin1')
  const pagesText = field(text, 'Pages:')
  const pages = pagesText === undefined ? Number.NaN : Number(pagesText)
  if (!Number.isSafeInteger(pages) || pages < 1) {
    throw new PreviewError('corrupt', `not a readable PDF: ${pagesText === undefined ? 'no page count' : `page count ${pagesText}`}`)
  }
  return pages
}

/**
 * Counts the pages of the PDF at `path` with `pdfinfo` (nothing is rendered; well under a second even
 * for a 100,000-page file).
 *
 * A PDF whose owner password only limits printing or copying (an empty user password) opens, as in any
 * viewer, and is counted. Throws {@link PreviewError}: `encrypted` (a user password is needed to open it),
 * `too-many-pages` (over `bounds.maxPages`), `corrupt` (not a PDF, no pages, a page count that its objects
 * cannot hold, or pdfinfo ran out of memory or crashed on it), `timeout`, `tool-failed` (pdfinfo missing
 * or unable to start).
 */
export async function probePdf(path: string, tools: PreviewTools, bounds: PreviewBounds): Promise<{ pages: number }> {
  const pages = await pageCount(path, tools, bounds)
  if (pages > bounds.maxPages) {
    throw new PreviewError('too-many-pages', `the PDF has ${pages} pages, more than the ${bounds.maxPages} allowed`)
  }
  return { pages }
}

/**
 * The first page of the PDF at `path` as a JPEG whose longest side is `bounds.maxSide`: one pdftoppm run
 * (`-f 1 -l 1 -scale-to`), which opens the file and renders page 1 only, so its time does not grow with
 * the page count (100,000 pages: the same cost as pdfinfo's count, about 0.1 s). It does not count the
 * pages: call {@link probePdf} first to apply `bounds.maxPages` (the preview job does, and stops there);
 * a second pdfinfo run here would add 40 to 70 % to the render's time and no protection, as pdfinfo
 * opens the file the same way.
 *
 * The render's size follows from `-scale-to`, whatever the page box claims (a 1e9 × 1e9 pt MediaBox
 * gives a `maxSide` square), so it has at most `maxSide²` pixels: a `maxSide` whose square is over
 * `bounds.maxInputPixels` is refused first with `too-many-pixels`. A page too thin for one pixel on its
 * short side is rendered one pixel wide. Throws {@link PreviewError}: `encrypted` (a user password is
 * needed), `corrupt` (not a PDF, no image made, or pdftoppm ran out of memory or crashed on it),
 * `too-many-pixels`, `timeout`, `tool-failed`.
 */
export async function renderPdfFirstPage(
  path: string,
  tools: PreviewTools,
  bounds: PreviewBounds,
): Promise<{ jpeg: Buffer; width: number; height: number }> {
  const pdftoppm = need(tools.pdftoppm, 'pdftoppm')
  const side = Math.max(1, Math.floor(bounds.maxSide))
  if (side * side > bounds.maxInputPixels) {
    throw new PreviewError(
      'too-many-pixels',
      `a preview of ${side} pixels a side may have ${side * side} pixels, more than the ${bounds.maxInputPixels} allowed`,
    )
  }
  const run = await runTool(
    pdftoppm,
    ['-f', '1', '-l', '1', '-scale-to', String(side), '-jpeg', '-jpegopt', 'quality=85', '-singlefile', resolve(path)],
    { timeoutSeconds: bounds.timeoutSeconds, memoryBytes: bounds.memoryBytes },
  )
  if (run.code !== 0) throw popplerFailure('pdftoppm', run, bounds)
  const size = jpegSize(run.stdout)
  if (!size) throw new PreviewError('corrupt', `pdftoppm made no image of the first page${run.stderr ? `: ${lastLine(run.stderr)}` : ''}`)
  return { jpeg: run.stdout, ...size }
}
