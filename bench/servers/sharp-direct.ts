/**
 * sharp called directly, the resize baseline of `npm run bench`, in its own process:
 *   sharp-direct.ts <file> first <warmWidth> <w>...      one warm-up resize, then each width in turn
 *   sharp-direct.ts <file> parallel <rounds> <w>...      rounds of all widths in flight at once
 * Prints one JSON line: {times: [seconds...], cpu} or {seconds, resizes, cpu}, cpu being the CPU seconds
 * (user + system, libvips threads included) of the timed part.
 * libvips' operation cache is off, so a repeated resize of the same file is real work every time.
 */
import sharp from 'sharp'

const [file, mode, arg, ...rest] = process.argv.slice(2)
if (!file || !mode || !arg) {
  console.error('usage: sharp-direct.ts <file> first|parallel <n> <w>...')
  process.exit(2)
}
sharp.cache(false)
const widths = rest.map(Number)
const resize = (width: number) => sharp(file).resize({ width }).toBuffer()

if (mode === 'first') {
  await resize(Number(arg))
  const c0 = process.cpuUsage()
  const times: number[] = []
  for (const w of widths) {
    const t = performance.now()
    await resize(w)
    times.push((performance.now() - t) / 1000)
  }
  const c = process.cpuUsage(c0)
  console.log(JSON.stringify({ times, cpu: (c.user + c.system) / 1e6 }))
} else {
  await resize(widths[0]!)
  const rounds = Number(arg)
  const c0 = process.cpuUsage()
  const t = performance.now()
  for (let i = 0; i < rounds; i++) await Promise.all(widths.map((w) => resize(w + i)))
  const seconds = (performance.now() - t) / 1000
  const c = process.cpuUsage(c0)
  console.log(JSON.stringify({ seconds, resizes: rounds * widths.length, cpu: (c.user + c.system) / 1e6 }))
}
