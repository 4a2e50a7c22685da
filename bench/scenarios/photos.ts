/**
 * Photos as people take them (issue 22): what the analysis (size + ThumbHash placeholder) and the
 * stripping of EXIF/XMP/IPTC add to the multipart temporary upload of a 12-megapixel JPEG (4000×3000,
 * quality 90, an EXIF block with a GPS position and orientation 1), all in the same run against the same
 * reference server (examples/hono-app, with ATTACH_CONFIG adding category demo/plain, strip-metadata false):
 *
 *   plain     the same bytes with their JPEG signature broken (sniffed application/octet-stream) into
 *             demo/plain: the same receive, filters, quota and sidecar, neither stripped nor analysed
 *   analysed  the JPEG into demo/plain: analysed, not stripped
 *   stripped  the JPEG into demo/default: analysed and stripped
 *
 * The three are interleaved (the rounds take the six orders in turn) and compared round by round: the analysis
 * row is the median of analysed / plain, the strip row the median of (stripped − analysed) / plain. A
 * stored stripped file is checked: no EXIF left, and its decoded pixels equal the upload's (no re-encode).
 * The server's CPU per upload is shown too (work moved out of the answer's path still counts there).
 */
import { rm, writeFile } from 'node:fs/promises'
import { join } from 'node:path'
import sharp from 'sharp'
import { photoPipeline, removeFiles } from '../lib/files.js'
import { jsonCall, median, uploadMultipart } from '../lib/http.js'
import { cpuSeconds } from '../lib/proc.js'
import { startReference } from '../lib/reference.js'
import { judge, MiB, target, type Context } from '../lib/report.js'

const PERMUTATIONS = [
  [0, 1, 2],
  [1, 2, 0],
  [2, 0, 1],
  [0, 2, 1],
  [2, 1, 0],
  [1, 0, 2],
]

const WIDTH = 4000
const HEIGHT = 3000

/** A photo-like 12-megapixel JPEG (smooth colour fields with grain) carrying EXIF with GPS, orientation 1. */
async function cameraJpeg(path: string): Promise<Buffer> {
  const bytes = await (await photoPipeline(WIDTH, HEIGHT, 10))
    .withMetadata({ orientation: 1 })
    .withExif({
      IFD0: { Make: 'BenchCam', Model: 'Photo 12', Software: 'attach-storage bench' },
      IFD3: { GPSLatitudeRef: 'N', GPSLatitude: '48/1 51/1 2400/100', GPSLongitudeRef: 'E', GPSLongitude: '2/1 21/1 300/100' },
    })
    .jpeg({ quality: 90 })
    .toBuffer()
  await writeFile(path, bytes)
  return bytes
}

const pixelsOf = (input: Buffer) => sharp(input).raw().toBuffer()

export async function photosBench(ctx: Context): Promise<void> {
  const rounds = ctx.quick ? 5 : 80
  const figure = `tmp upload of a 12 MP JPEG`
  ctx.log('photos: generating a 4000×3000 JPEG with EXIF (GPS, orientation 1)')
  const photoPath = join(ctx.work, 'photo-12mp.jpg')
  const photo = await cameraJpeg(photoPath)
  const meta = await sharp(photo).metadata()
  if (!meta.exif?.includes('GPS') && !meta.exif?.includes(Buffer.from([0x88, 0x25])) && !meta.exif?.includes(Buffer.from([0x25, 0x88]))) {
    throw new Error('the generated photo carries no GPS block')
  }
  // The same bytes, its signature broken: neither stripped nor analysed, received the same way.
  const plainPath = join(ctx.work, 'photo-12mp.bin')
  const plainBytes = Buffer.from(photo)
  plainBytes.write('AS', 0, 'latin1')
  await writeFile(plainPath, plainBytes)
  const configPath = join(ctx.work, 'photos-config.json')
  await writeFile(
    configPath,
    JSON.stringify({ attach: { domains: { demo: { categories: { default: {}, plain: { 'strip-metadata': false } } } } } }),
  )
  ctx.log(`photos: ${(photo.length / MiB).toFixed(1)} MiB, ${meta.width}×${meta.height}`)

  const ours = await startReference(ctx.work, 64 * MiB, 'hono-app', 'attach-storage', { ATTACH_CONFIG: configPath })
  // Each upload's files go after it (only files: the folders and the database stay).
  const clean = async () => {
    await removeFiles(join(ours.dataDir, 'tmp'))
    await removeFiles(join(ours.dataDir, 'files'))
  }
  type Kind = 'plain' | 'analysed' | 'stripped'
  const subjects: Record<Kind, { path: string; name: string; category: string }> = {
    plain: { path: plainPath, name: 'photo.bin', category: 'plain' },
    analysed: { path: photoPath, name: 'photo.jpg', category: 'plain' },
    stripped: { path: photoPath, name: 'photo.jpg', category: 'default' },
  }
  let saves = 0
  const send = async (kind: Kind) => {
    const s = subjects[kind]
    const cpu0 = cpuSeconds(ours.pid)
    const r = await uploadMultipart(
      `${ours.base}/api/storage/attach/tmp`,
      { refDomain: 'demo', refCategory: s.category },
      [{ field: 'fileMap', path: s.path, name: s.name }],
      { authorization: `Bearer ${ours.bearer}` },
    )
    if (r.status !== 200) throw new Error(`photos: ${kind} upload answered ${r.status}: ${r.body?.toString().slice(0, 300)}`)
    const item = JSON.parse(r.body!.toString()).files[0] as { name: string; size: number; type: string; error?: unknown }
    if (item.error) throw new Error(`photos: ${kind} upload refused: ${JSON.stringify(item.error)}`)
    // The analysis may finish after the answer: each upload is then saved (untimed; the save takes the
    // media, waiting for the analysis), so the next one starts on a quiet server and the CPU column
    // counts all the work of the upload and its save.
    const saved = await jsonCall(
      `${ours.base}/api/storage/attach/demo/photos${++saves}`,
      'POST',
      { [s.category]: [{ savedName: item.name, displayName: s.name }] },
      ours.bearer,
    )
    const cpu = cpuSeconds(ours.pid) - cpu0
    const media = saved.attachList?.[0]?.media as { width: number; height: number } | null | undefined
    if (kind === 'plain' ? media !== null : media?.width !== WIDTH || media.height !== HEIGHT) {
      throw new Error(`photos: the ${kind} record has media ${JSON.stringify(media)}`)
    }
    return { seconds: r.seconds, cpu, item, id: saved.attachList[0].id as number }
  }
  try {
    // Warm-up, and what each subject does: the plain file is not an image, the stripped one lost its EXIF.
    for (let i = 0; i < 2; i++) {
      const plain = await send('plain')
      const analysed = await send('analysed')
      const stripped = await send('stripped')
      if (plain.item.type !== 'application/octet-stream') throw new Error(`photos: the plain file was sniffed ${plain.item.type}`)
      if (analysed.item.size !== photo.length) throw new Error('photos: demo/plain changed the photo')
      if (i === 0) {
        const view = await fetch(`${ours.base}/assets/storage/attach/view/${stripped.id}`)
        const kept = Buffer.from(await view.arrayBuffer())
        const keptMeta = await sharp(kept).metadata()
        const samePixels = (await pixelsOf(kept)).equals(await pixelsOf(photo))
        ctx.log(`photos: stored stripped file ${kept.length} bytes (upload ${photo.length}), exif ${keptMeta.exif ? 'kept' : 'gone'}`)
        ctx.add({
          scenario: 'photos',
          figure: 'strip of a 12 MP JPEG, orientation 1',
          subject: 'stored bytes: no EXIF, decoded pixels equal',
          value: `${keptMeta.exif ? 'EXIF kept' : 'no EXIF'}, ${samePixels ? 'pixels equal' : 'pixels differ'}`,
          target: 'no EXIF, pixels equal',
          status: !keptMeta.exif && samePixels ? 'ok' : 'MISSED',
        })
      }
      await clean()
    }
    const order: Kind[] = ['plain', 'analysed', 'stripped']
    const seconds: Record<Kind, number[]> = { plain: [], analysed: [], stripped: [] }
    const cpu: Record<Kind, number[]> = { plain: [], analysed: [], stripped: [] }
    for (let round = 0; round < rounds; round++) {
      ctx.log(`photos: round ${round + 1}/${rounds}`)
      // Each round in one of the six orders, in turn: no subject always follows the same one.
      const perm = PERMUTATIONS[round % PERMUTATIONS.length]!
      for (let k = 0; k < order.length; k++) {
        const kind = order[perm[k]!]!
        const r = await send(kind)
        seconds[kind].push(r.seconds)
        cpu[kind].push(r.cpu)
        await clean()
      }
    }
    const ms = (s: number) => `${(s * 1000).toFixed(1)} ms`
    const cpuMs = (xs: number[]) => `${((xs.reduce((a, b) => a + b, 0) / xs.length) * 1000).toFixed(0)} ms/upload`
    const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length
    const cpuDelta = (a: number[], b: number[]) => `${mean(a) >= mean(b) ? '+' : '−'}${Math.abs((mean(a) - mean(b)) * 1000).toFixed(0)} ms`
    const analysisRatio = median(seconds.analysed.map((a, i) => a / seconds.plain[i]!))
    const stripShare = median(seconds.stripped.map((s, i) => (s - seconds.analysed[i]!) / seconds.plain[i]!))
    ctx.add({
      scenario: 'photos',
      figure,
      subject: 'plain upload (not analysed, not stripped)',
      value: ms(median(seconds.plain)),
      cpu: cpuMs(cpu.plain),
      status: '',
    })
    ctx.add({
      scenario: 'photos',
      figure,
      subject: 'analysis + placeholder (÷ plain)',
      value: ms(median(seconds.analysed)),
      cpu: cpuMs(cpu.analysed),
      ratio: analysisRatio,
      target: target('<=', 1.15),
      status: judge(analysisRatio, '<=', 1.15),
      note: `server CPU ${cpuDelta(cpu.analysed, cpu.plain)}, the analysis finishing after the answer`,
    })
    ctx.add({
      scenario: 'photos',
      figure,
      subject: 'strip, added time ÷ plain upload',
      value: ms(median(seconds.stripped)),
      cpu: cpuMs(cpu.stripped),
      ratio: stripShare,
      target: target('<=', 0.05),
      status: judge(stripShare, '<=', 0.05),
      note: `server CPU ${cpuDelta(cpu.stripped, cpu.analysed)} against the analysed upload`,
    })
    const runs = (xs: number[]) => xs.map((x) => (x * 1000).toFixed(0)).join('/')
    ctx.log(`photos: runs (ms): plain ${runs(seconds.plain)}; analysed ${runs(seconds.analysed)}; stripped ${runs(seconds.stripped)}`)
  } finally {
    await ours.stop()
    await rm(plainPath, { force: true })
  }
}
