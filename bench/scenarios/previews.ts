/**
 * Previews of PDFs and videos (issue 23, docs/previews.md), through the tool layer the background job runs
 * (packages/attach-storage/src/media/{pdf-preview,video-preview,preview-source}.ts):
 * - the first page of a 200-page PDF to a JPEG (`renderPdfFirstPage`) against Debian's `pdftoppm -f 1
 *   -l 1 -scale-to <max-side> -jpeg -jpegopt quality=85 -singlefile` on the same file (target ≤ 1.2 × its
 *   time), interleaved, medians; the tools' CPU time (this process's reaped children); the same command
 *   at nice 10 (the tools' priority); probePdf beside renderPdfFirstPage as the job runs them; this process's
 *   event-loop delay while ours runs, beside an idle control of the same length;
 * - the same preview of a 2-page PDF against the 200-page one (time independent of the page count:
 *   within 1.5 × of each other);
 * - a video preview (`toolInput` with a presigned address, `probeAv`, `videoFrame`) of a 1 GiB mp4
 *   (--quick: 128 MiB) on s3rver, counting the bytes s3rver sends through a TCP proxy on loopback that the
 *   store's endpoint points at (target ≤ 64 MiB read); then the same through the service (the reference
 *   server with its default store there: save, then its preview job).
 * The PDFs are written here (Helvetica text and vector shapes on every page); the mp4 is a 10 s libx264
 * clip of noise (640×360, 2 s GOP) copied end to end with `-stream_loop` and `-movflags +faststart`.
 * Needs poppler-utils and ffmpeg; without them the rows print SKIPPED.
 */
import { execFile } from 'node:child_process'
import { createReadStream, readFileSync } from 'node:fs'
import { mkdir, mkdtemp, rm, stat, writeFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { createServer, connect, type AddressInfo, type Server as NetServer, type Socket } from 'node:net'
import { join } from 'node:path'
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { promisify } from 'node:util'
import { probePdf, renderPdfFirstPage } from '../../packages/attach-storage/src/media/pdf-preview.js'
import { toolInput } from '../../packages/attach-storage/src/media/preview-source.js'
import { findPreviewTools, type PreviewBounds } from '../../packages/attach-storage/src/media/preview-tools.js'
import { probeAv, videoFrame } from '../../packages/attach-storage/src/media/video-preview.js'
import { S3Store } from '../../packages/store-s3/src/index.js'
import { jsonCall, median } from '../lib/http.js'
import { ROOT, startServer } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { fmtMiB, fmtMs, judge, MiB, target, type Context } from '../lib/report.js'
import { s3rverStore } from '../lib/s3rver.js'

const run = promisify(execFile)

/** The bounds a service gets by default (`previews.*` and `resize.max-input-pixels`, config/previews-schema.ts, schema.ts). */
const BOUNDS: PreviewBounds = {
  maxInputPixels: 100_000_000,
  maxPages: 10_000,
  maxDurationSeconds: 24 * 3600,
  timeoutSeconds: 60,
  maxSide: 1024,
  memoryBytes: 1024 * MiB,
}

/** A PDF of `pages` US Letter pages, each with a Helvetica title, 40 lines of text, and filled and stroked shapes. */
export function textPdf(pages: number): Buffer {
  const objects: string[] = []
  const add = (body: string) => objects.push(body) // object n is objects[n - 1]
  add('<< /Type /Catalog /Pages 2 0 R >>')
  add('') // the page tree, written once the pages' numbers are known
  add('<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>')
  add('<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>')
  const kids: number[] = []
  for (let p = 1; p <= pages; p++) {
    const ops: string[] = ['BT /F2 22 Tf 0.1 0.2 0.5 rg 56 740 Td', `(Report page ${p} of ${pages}) Tj ET`, '0 g']
    for (let l = 0; l < 40; l++)
      ops.push(
        `BT /F1 10 Tf 56 ${700 - l * 14} Td (Line ${l + 1}: the quick brown fox jumps over the lazy dog, ${p * 40 + l} times, page ${p}.) Tj ET`,
      )
    for (let k = 0; k < 12; k++) {
      ops.push(`${(k / 12).toFixed(3)} 0.4 ${(1 - k / 12).toFixed(3)} rg 0 G 1 w ${56 + k * 42} 60 36 ${40 + ((k * 37 + p) % 80)} re B`)
      const cx = 80 + k * 40
      ops.push(
        `0.9 0.5 ${(k / 12).toFixed(3)} rg ${cx + 10} 30 m ${cx + 10} 35.5 ${cx + 5.5} 40 ${cx} 40 c ${cx - 5.5} 40 ${cx - 10} 35.5 ${cx - 10} 30 c`,
      )
      ops.push(`${cx - 10} 24.5 ${cx - 5.5} 20 ${cx} 20 c ${cx + 5.5} 20 ${cx + 10} 24.5 ${cx + 10} 30 c f`)
      ops.push(`0.3 G 0.8 w 56 ${110 + k * 4} m 556 ${150 + k * 3} l S`)
    }
    ops.push('0.8 0 0 RG 2 w 100 160 m 150 80 250 240 300 160 c 350 80 450 80 500 160 c S')
    const content = ops.join('\n')
    add(`<< /Length ${Buffer.byteLength(content, 'latin1')} >>\nstream\n${content}\nendstream`)
    add(
      `<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Resources << /Font << /F1 3 0 R /F2 4 0 R >> >> /Contents ${objects.length} 0 R >>`,
    )
    kids.push(objects.length)
  }
  objects[1] = `<< /Type /Pages /Kids [${kids.map((k) => `${k} 0 R`).join(' ')}] /Count ${pages} >>`
  let out = '%PDF-1.4\n'
  const offsets: number[] = []
  objects.forEach((body, i) => {
    offsets.push(Buffer.byteLength(out, 'latin1'))
    out += `${i + 1} 0 obj\n${body}\nendobj\n`
  })
  const xref = Buffer.byteLength(out, 'latin1')
  out += `xref\n0 ${objects.length + 1}\n0000000000 65535 f \n${offsets.map((o) => `${String(o).padStart(10, '0')} 00000 n \n`).join('')}`
  out += `trailer\n<< /Size ${objects.length + 1} /Root 1 0 R >>\nstartxref\n${xref}\n%%EOF\n`
  return Buffer.from(out, 'latin1')
}

interface CountingProxy {
  base: string
  /** Bytes s3rver sent, on every connection. */
  fromServer(): number
  /** Bytes s3rver sent on connections whose first request is presigned (`X-Amz-Signature` in its query): the tools' reads. */
  presigned(): number
  /** Connections opened with a presigned request. */
  presignedConnections(): number
  reset(): void
  close(): Promise<void>
}

/**
 * A TCP proxy on loopback in front of `port` that counts the bytes s3rver sends, in all and on the
 * connections of presigned requests (the tools' reads; the SDK's own connections carry an Authorization
 * header instead).
 */
async function countingProxy(port: number): Promise<CountingProxy> {
  let down = 0
  let signedDown = 0
  let signedConns = 0
  const sockets = new Set<Socket>()
  const server: NetServer = createServer((client) => {
    const upstream = connect(port, '127.0.0.1')
    sockets.add(client).add(upstream)
    let signed: boolean | undefined
    client.once('data', (d: Buffer) => {
      const line = d.subarray(0, Math.max(0, d.indexOf(13))).toString('latin1')
      signed = /[?&]X-Amz-Signature=/.test(line)
      if (signed) signedConns++
    })
    upstream.on('data', (d: Buffer) => {
      down += d.length
      if (signed) signedDown += d.length
    })
    client.pipe(upstream)
    upstream.pipe(client)
    const end = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on('error', end).on('close', end)
    upstream.on('error', end).on('close', end)
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  return {
    base: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    fromServer: () => down,
    presigned: () => signedDown,
    presignedConnections: () => signedConns,
    reset: () => {
      down = 0
      signedDown = 0
      signedConns = 0
    },
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy()
        server.close(() => r())
      }),
  }
}

/** A faststart mp4 of at least `size` bytes (a 10 s noise clip looped with `-c copy`); answers its path and the seconds it took. */
async function bigVideo(dir: string, size: number): Promise<{ path: string; seconds: number }> {
  const t0 = performance.now()
  const clip = join(dir, 'clip.mp4')
  await run('ffmpeg', [
    ...['-v', 'error', '-y', '-f', 'lavfi', '-i', 'testsrc2=size=640x360:rate=25,noise=alls=30:allf=t', '-t', '10'],
    ...['-c:v', 'libx264', '-preset', 'ultrafast', '-g', '50', '-qp', '22', '-pix_fmt', 'yuv420p', clip],
  ])
  const loops = Math.ceil(size / (await stat(clip)).size)
  const path = join(dir, `video-${size}.mp4`)
  await run('ffmpeg', ['-v', 'error', '-y', '-stream_loop', String(loops - 1), '-i', clip, '-c', 'copy', '-movflags', '+faststart', path])
  return { path, seconds: (performance.now() - t0) / 1000 }
}

/** CPU seconds (user + system) of this process's reaped children so far (`cutime` + `cstime` of /proc/self/stat). */
function childCpu(): number {
  const stat = readFileSync('/proc/self/stat', 'utf8')
  const f = stat.slice(stat.lastIndexOf(')') + 2).split(' ')
  return (Number(f[13]) + Number(f[14])) / 100
}

async function has(command: string): Promise<boolean> {
  return run('sh', ['-c', `command -v ${command}`]).then(
    () => true,
    () => false,
  )
}

export async function previewsBench(ctx: Context): Promise<void> {
  const scenario = 'previews'
  const dir = await mkdtemp(join(ctx.work, 'previews-'))
  const tools = findPreviewTools()
  const reps = ctx.quick ? 3 : 15

  const pdfFigure = 'first page of a 200-page PDF → JPEG, 1024 px'
  if (!(await has('pdftoppm')) || !(await has('pdfinfo'))) {
    ctx.skip(scenario, pdfFigure, 'pdftoppm / pdfinfo not found (apt-get install poppler-utils)')
  } else {
    const pdf2 = join(dir, 'two-pages.pdf')
    const pdf200 = join(dir, 'two-hundred-pages.pdf')
    await writeFile(pdf2, textPdf(2))
    await writeFile(pdf200, textPdf(200))
    const ours = async (file: string) => {
      const t = performance.now()
      const r = await renderPdfFirstPage(file, tools, BOUNDS)
      if (Math.max(r.width, r.height) !== BOUNDS.maxSide) throw new Error(`renderPdfFirstPage gave ${r.width}×${r.height}`)
      return (performance.now() - t) / 1000
    }
    const pdftoppmArgs = (file: string) => [
      '-f',
      '1',
      '-l',
      '1',
      '-scale-to',
      String(BOUNDS.maxSide),
      '-jpeg',
      '-jpegopt',
      'quality=85',
      '-singlefile',
      file,
      join(dir, 'pdftoppm'),
    ]
    const theirs = async (file: string) => {
      const t = performance.now()
      await run('pdftoppm', pdftoppmArgs(file))
      return (performance.now() - t) / 1000
    }
    // The same command at the priority the tool layer runs it (nice 10): what the busy machine takes from it.
    const bare = async (file: string) => {
      const t = performance.now()
      await run('nice', ['-n', '10', 'pdftoppm', ...pdftoppmArgs(file)])
      return (performance.now() - t) / 1000
    }
    await ours(pdf200)
    await theirs(pdf200)
    await ours(pdf2)
    await bare(pdf200)
    // CPU time of the tools (the bench's reaped children: prlimit execs the tool in its own process).
    const cpu = { o200: 0, o2: 0, t200: 0, b200: 0 }
    const track = async (k: keyof typeof cpu, f: () => Promise<number>) => {
      const c0 = childCpu()
      const seconds = await f()
      cpu[k] += childCpu() - c0
      return seconds
    }
    const perRun = (k: keyof typeof cpu) => `${Math.round((cpu[k] / reps) * 1000)} ms/preview (tools)`
    const loop = monitorEventLoopDelay({ resolution: 5 })
    const idle = monitorEventLoopDelay({ resolution: 5 })
    const o200: number[] = []
    const o2: number[] = []
    const t200: number[] = []
    const b200: number[] = []
    for (let i = 0; i < reps; i++) {
      loop.enable()
      o200.push(await track('o200', () => ours(pdf200)))
      o2.push(await track('o2', () => ours(pdf2)))
      loop.disable()
      t200.push(await track('t200', () => theirs(pdf200)))
      b200.push(await track('b200', () => bare(pdf200)))
      // The same loop probe while this process only waits: what the busy machine alone costs it.
      idle.enable()
      await new Promise((r) => setTimeout(r, ((o200.at(-1) ?? 0) + (o2.at(-1) ?? 0)) * 1000))
      idle.disable()
    }
    const loopText = `max ${(loop.max / 1e6).toFixed(0)} ms (idle ${(idle.max / 1e6).toFixed(0)} ms)`
    // What the background job runs for a PDF: its page count for `media` beside the render, at once.
    const job: number[] = []
    for (let i = 0; i < reps; i++) {
      const t = performance.now()
      await Promise.all([probePdf(pdf200, tools, BOUNDS), ours(pdf200)])
      job.push((performance.now() - t) / 1000)
    }
    const { width, height } = await renderPdfFirstPage(pdf200, tools, BOUNDS)
    const ratio = median(o200) / median(t200)
    ctx.add({
      scenario,
      figure: pdfFigure,
      subject: `attach-storage renderPdfFirstPage (${width}×${height})`,
      value: fmtMs(median(o200)),
      cpu: perRun('o200'),
      loop: loopText,
      status: '',
    })
    ctx.add({
      scenario,
      figure: pdfFigure,
      subject: 'pdftoppm -f 1 -l 1 -scale-to 1024 -jpeg (quality 85, as ours)',
      value: fmtMs(median(t200)),
      cpu: perRun('t200'),
      ratio,
      target: target('<=', 1.2, ' (time)'),
      status: judge(ratio, '<=', 1.2),
    })
    ctx.add({
      scenario,
      figure: pdfFigure,
      subject: "(info) nice -n 10 pdftoppm (the same, at the tools' priority)",
      value: fmtMs(median(b200)),
      cpu: perRun('b200'),
      ratio: median(b200) / median(t200),
      status: '',
    })
    ctx.add({
      scenario,
      figure: pdfFigure,
      subject: '(info) probePdf + renderPdfFirstPage, as the preview job runs them',
      value: fmtMs(median(job)),
      ratio: median(job) / median(t200),
      status: '',
    })
    const spread = Math.max(median(o200), median(o2)) / Math.min(median(o200), median(o2))
    ctx.add({
      scenario,
      figure: 'PDF preview: 200 pages against 2 pages',
      subject: 'attach-storage, 2-page PDF',
      value: fmtMs(median(o2)),
      cpu: perRun('o2'),
      ratio: spread,
      target: 'slower / faster <= 1.5',
      status: judge(spread, '<=', 1.5),
    })
    ctx.log(
      `previews: PDF runs (ms): ours 200 p ${o200.map((s) => (s * 1000).toFixed(0)).join(' ')}; ours 2 p ${o2.map((s) => (s * 1000).toFixed(0)).join(' ')}; pdftoppm ${t200.map((s) => (s * 1000).toFixed(0)).join(' ')}; pdftoppm at nice 10 ${b200.map((s) => (s * 1000).toFixed(0)).join(' ')}`,
    )
  }

  try {
    await videoRow(ctx, scenario, dir, tools)
  } finally {
    // The mp4 and s3rver's copies of it: gigabytes of the tmpfs the next scenarios need.
    await rm(dir, { recursive: true, force: true })
  }
}

async function videoRow(ctx: Context, scenario: string, dir: string, tools: ReturnType<typeof findPreviewTools>): Promise<void> {
  const size = (ctx.quick ? 128 : 1024) * MiB
  const figure = `video preview of a ${ctx.quick ? '128 MiB' : '1 GiB'} mp4 on s3rver`
  if (!(await has('ffmpeg')) || !(await has('ffprobe'))) {
    ctx.skip(scenario, figure, 'ffmpeg / ffprobe not found (apt-get install ffmpeg)')
    return
  }
  try {
    createRequire(join(ROOT, 'packages/store-s3/package.json')).resolve('s3rver')
  } catch {
    ctx.skip(scenario, figure, 's3rver is not installed')
    return
  }
  const video = await bigVideo(dir, size)
  const bytes = (await stat(video.path)).size
  ctx.log(`previews: made a ${fmtMiB(bytes)} mp4 in ${video.seconds.toFixed(1)} s`)
  const s3dir = join(dir, 's3rver')
  await mkdir(s3dir)
  const s3 = await startServer('s3rver', 'bench/servers/s3.ts', {}, ['s3rver', s3dir])
  const proxy = await countingProxy(s3.port)
  const store = new S3Store('cloud', {
    bucket: 'bench',
    region: 'us-east-1',
    endpoint: proxy.base,
    forcePathStyle: true,
    accessKey: 'S3RVER',
    secretKey: 'S3RVER',
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  })
  try {
    const key = 'demo/2026/11/1/video.mp4'
    const t0 = performance.now()
    await store.put(key, createReadStream(video.path), { contentType: 'video/mp4' })
    ctx.log(`previews: uploaded to s3rver in ${((performance.now() - t0) / 1000).toFixed(1)} s`)
    proxy.reset()
    const t1 = performance.now()
    const source = await toolInput(store, key, bytes, { ttlSeconds: 300 })
    let frame: { jpeg: Uint8Array; width: number; height: number }
    let probe: Awaited<ReturnType<typeof probeAv>>
    try {
      probe = await probeAv(source.input, tools, BOUNDS)
      frame = await videoFrame(source.input, probe, tools, BOUNDS)
    } finally {
      await source.close()
    }
    const seconds = (performance.now() - t1) / 1000
    // Sockets the tools closed may still be draining into the proxy: let them settle.
    await new Promise((r) => setTimeout(r, 200))
    const read = proxy.fromServer()
    ctx.add({
      scenario,
      figure,
      subject: `attach-storage toolInput (${source.kind}) + probeAv + videoFrame`,
      value: `${fmtMiB(read)} read`,
      target: '<= 64 MiB read',
      status: judge(read / MiB, '<=', 64),
      note: `${proxy.presignedConnections()} connections, ${fmtMs(seconds)}, frame ${frame.width}×${frame.height} of ${probe.durationMs} ms`,
    })
    ctx.add({
      scenario,
      figure,
      subject: '(info) the mp4 made with ffmpeg -stream_loop -c copy',
      value: `${video.seconds.toFixed(1)} s`,
      status: '',
      note: fmtMiB(bytes),
    })
    ctx.log(
      `previews: video ${fmtMiB(bytes)}: ${fmtMiB(read)} read from s3rver over ${proxy.presignedConnections()} connections in ${fmtMs(seconds)}`,
    )
    await throughService(ctx, scenario, figure, video.path, bytes, proxy, dir)
  } finally {
    await store.close()
    await proxy.close()
    await s3.stop()
  }
}

/**
 * The same preview made by the service: the reference server with its default store on s3rver (through
 * the counting proxy), the video saved through the API (temporary upload on the local store, then the
 * confirmed save moves it to S3), its background job awaited by polling the lookup. The tools' reads are
 * the bytes of the presigned connections; the SDK's own (the save's upload answers) are counted apart.
 */
async function throughService(
  ctx: Context,
  scenario: string,
  figure: string,
  file: string,
  bytes: number,
  proxy: CountingProxy,
  dir: string,
) {
  const config = join(dir, 'attach.json')
  await writeFile(config, JSON.stringify({ attach: { stores: { cloud: s3rverStore(proxy.base) }, 'default-store': 'cloud' } }))
  const ours = await startReference(ctx.work, bytes + 64 * MiB, 'hono-app', 'attach-storage', { ATTACH_CONFIG: config })
  try {
    proxy.reset()
    const t0 = performance.now()
    const [saved] = await ours.save([{ path: file, name: 'video.mp4' }], 'previews1')
    const savedAt = performance.now()
    let record: { preview?: string; media?: unknown; thumbnailUrl?: string } | undefined
    for (const deadline = Date.now() + 180_000; Date.now() < deadline; ) {
      const bag = await jsonCall(`${ours.base}/api/storage/attach/demo/previews1/default`, 'GET', undefined, ours.bearer)
      record = (bag.default as Array<{ id: number; preview?: string }>).find((r) => r.id === saved!.id)
      if (record?.preview !== 'pending') break
      await new Promise((r) => setTimeout(r, 250))
    }
    const jobSeconds = (performance.now() - savedAt) / 1000
    await new Promise((r) => setTimeout(r, 200))
    if (record?.preview !== 'made') {
      throw new Error(`the service's preview of the 1 GiB video is ${record?.preview ?? 'not answered'} after ${jobSeconds.toFixed(0)} s`)
    }
    const read = proxy.presigned()
    const made = record.preview === 'made'
    ctx.add({
      scenario,
      figure: `${figure}, through the service`,
      subject: 'attach-storage: save, then its preview job',
      value: `${fmtMiB(read)} read`,
      target: '<= 64 MiB read',
      status: made ? judge(read / MiB, '<=', 64) : 'MISSED',
      note: `preview ${record.preview}; ${proxy.presignedConnections()} presigned connections; save ${fmtMs((savedAt - t0) / 1000)}, job done ${fmtMs(jobSeconds)} after it; media ${JSON.stringify(record.media)}; SDK connections got ${fmtMiB(proxy.fromServer() - read)}`,
    })
  } finally {
    await ours.stop()
  }
}
