/**
 * Summarises .cpuprofile files written by `npm run bench -- --profile <dir>`: self time by area (the
 * package or Node subsystem a frame belongs to), the top functions by self and inclusive time.
 *
 *   node --import tsx bench/profile-top.ts <file.cpuprofile>... [--top N]
 */
import { readFileSync } from 'node:fs'

interface Node {
  id: number
  callFrame: { functionName: string; url: string; lineNumber: number }
  children?: number[]
}
interface Profile {
  nodes: Node[]
  samples: number[]
  timeDeltas: number[]
}

/** The area a frame belongs to, from its script URL and name. */
function area(n: Node): string {
  const { url, functionName } = n.callFrame
  if (!url) {
    if (functionName === '(idle)') return 'idle'
    if (functionName === '(garbage collector)') return 'GC'
    if (functionName === '(program)') return 'V8 / native (program)'
    if (
      [
        'openFileHandle',
        'fstat',
        'close',
        'read',
        'open',
        'stat',
        'lstat',
        'readFileUtf8',
        'fsync',
        'rename',
        'writeBuffer',
        'writeBuffers',
      ].includes(functionName)
    ) {
      return 'native: fs / socket calls'
    }
    if (['writev', 'writeUtf8String', 'writeLatin1String'].includes(functionName)) return 'native: socket writes'
    if (['Statement', 'all', 'get', 'run', 'prepare'].includes(functionName)) return 'better-sqlite3 (native)'
    return `native: ${functionName || '(anonymous)'}`
  }
  const nm = /node_modules\/((?:@[^/]+\/)?[^/]+)\//.exec(url)
  if (nm) return nm[1]!
  const mod = /node:internal\/(webstreams|streams|fs|http|modules|deps\/undici|url|abort_controller|event_target|crypto)/.exec(url)
  if (mod) return `node:${mod[1]}`
  if (url.startsWith('node:')) return url.replace(/^node:(internal\/)?/, 'node:').split('/')[0]!
  const ours = /\/(packages|examples|bench)\/([^/]+)\//.exec(url)
  if (ours) return `${ours[1]}/${ours[2]}`
  return url
}

const args = process.argv.slice(2)
const topAt = args.indexOf('--top')
const topN = topAt >= 0 ? Number(args[topAt + 1]) : 25
const files = args.filter((a, i) => a.endsWith('.cpuprofile') && i !== topAt + 1)
if (files.length === 0) {
  console.error('usage: profile-top.ts <file.cpuprofile>... [--top N]')
  process.exit(2)
}

for (const file of files) {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile
  const byId = new Map(p.nodes.map((n) => [n.id, n]))
  const parent = new Map<number, number>()
  for (const n of p.nodes) for (const c of n.children ?? []) parent.set(c, n.id)
  const selfTime = new Map<number, number>()
  for (let i = 0; i < p.samples.length; i++) selfTime.set(p.samples[i]!, (selfTime.get(p.samples[i]!) ?? 0) + (p.timeDeltas[i] ?? 0))
  const total = [...selfTime.values()].reduce((a, b) => a + b, 0)
  const idle = [...selfTime].filter(([id]) => byId.get(id)!.callFrame.functionName === '(idle)').reduce((a, [, t]) => a + t, 0)
  const busy = total - idle
  const key = (n: Node) =>
    `${n.callFrame.functionName || '(anonymous)'} ${n.callFrame.url.replace(/.*node_modules\//, '').replace(/^file:\/\/.*?\/(packages|examples|bench)\//, '$1/')}:${n.callFrame.lineNumber + 1}`
  const byArea = new Map<string, number>()
  const bySelf = new Map<string, number>()
  const byIncl = new Map<string, number>()
  for (const [id, t] of selfTime) {
    const n = byId.get(id)!
    if (n.callFrame.functionName === '(idle)') continue
    byArea.set(area(n), (byArea.get(area(n)) ?? 0) + t)
    bySelf.set(key(n), (bySelf.get(key(n)) ?? 0) + t)
    const seen = new Set<string>()
    for (let cur: number | undefined = id; cur !== undefined; cur = parent.get(cur)) {
      const k = key(byId.get(cur)!)
      if (!seen.has(k)) {
        seen.add(k)
        byIncl.set(k, (byIncl.get(k) ?? 0) + t)
      }
    }
  }
  const pct = (t: number) => `${((100 * t) / busy).toFixed(1).padStart(5)}%`
  const top = (m: Map<string, number>, n: number) =>
    [...m]
      .sort((a, b) => b[1] - a[1])
      .slice(0, n)
      .map(([k, t]) => `  ${pct(t)}  ${k}`)
      .join('\n')
  console.log(`== ${file}`)
  console.log(`   ${(total / 1e6).toFixed(1)} s sampled, ${(busy / 1e6).toFixed(1)} s busy (percentages are of busy time)`)
  console.log('-- self time by area')
  console.log(top(byArea, topN))
  console.log('-- self time by function')
  console.log(top(bySelf, topN))
  console.log('-- inclusive time by function')
  console.log(top(byIncl, topN + 15))
}
