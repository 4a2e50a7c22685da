/**
 * Hostile requests of issue 20 that make the server work (findings 1, 3, 4, 5 and 8): each attack as a
 * signed-in user (or anyone) would send it, against the reference server on SQLite, with the server's
 * event-loop delay p99 while it runs (target <= 100 ms) and its peak RSS growth. The figures of
 * docs/security.md ("Hostile requests: before and after") come from here. Every request has a time cap,
 * so a server that stalls costs a row at most about a minute.
 */
import { createWriteStream } from 'node:fs'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import http from 'node:http'
import { join } from 'node:path'
import { photoJpeg } from '../lib/files.js'
import { type Answer, call, code, describe, type HostileServer, size, tally } from '../lib/hostile-kit.js'
import { token, uploadMultipart } from '../lib/http.js'
import type { Reference } from '../lib/reference.js'
import { type Context, MiB } from '../lib/report.js'

const API = '/api/storage/attach'
const ASSETS = '/assets/storage/attach'
const JSON_LIMIT = 2 * MiB

export interface SavedRecord {
  id: number
  savedName: string
  savedDir: string
  fileSize: number
}

/** Temporary upload of one file into `category` of demo, then a confirmed save under `refKey`. */
export async function saveOne(
  s: Reference,
  path: string,
  name: string,
  refKey: string,
  category = 'default',
  bearer = s.bearer,
): Promise<SavedRecord> {
  const up = await uploadMultipart(
    `${s.base}${API}/tmp`,
    { refDomain: 'demo', refCategory: category },
    [{ field: 'fileMap', path, name }],
    {
      authorization: `Bearer ${bearer}`,
    },
  )
  const item = JSON.parse(up.body!.toString()).files?.[0]
  if (up.status !== 200 || !item?.name) throw new Error(`upload ${name}: ${up.status} ${up.body?.toString().slice(0, 300)}`)
  const r = await call(`${s.base}${API}/demo/${refKey}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${bearer}` },
    body: JSON.stringify({ [category]: [{ savedName: item.name, displayName: name }] }),
    keep: MiB,
    timeoutMs: 60_000,
  })
  if (r.status !== 200) throw new Error(`save ${name}: ${describe(r)} ${r.body.toString().slice(0, 300)}`)
  return JSON.parse(r.body.toString()).attachList[0]
}

/** POST a confirmed save of `bag` under demo/`refKey`, capped at 60 s. */
function postSave(s: Reference, refKey: string, bag: string): Promise<Answer> {
  return call(`${s.base}${API}/demo/${refKey}`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${s.bearer}` },
    body: bag,
    keep: 4096,
    timeoutMs: 60_000,
  })
}

/** As many `entry` as fit in the 2 MiB JSON limit, at most `max`: `{"default":[entry,entry,...]}`. */
function bagOf(entry: string, max: number): { body: string; count: number } {
  const count = Math.min(max, Math.floor((JSON_LIMIT - 64) / (entry.length + 1)))
  return { body: `{"default":[${Array(count).fill(entry).join(',')}]}`, count }
}

const fmtN = (n: number) => n.toLocaleString('en-US')

/** Finding 1: a confirmed save with too many entries. */
export async function saveEntriesRows(_ctx: Context, hs: HostileServer, dir: string): Promise<void> {
  const small = join(dir, 'small.txt')
  await writeFile(small, 'hostile bench\n')
  let rec: SavedRecord | undefined
  const setup = async (s: Reference) => {
    rec = await saveOne(s, small, 'small.txt', 'hostile-1')
  }
  const resorts = 230_000
  await hs.row(
    `1 save: ${fmtN(resorts)} re-sort entries {"id": n} of one owned record`,
    '400 too-many-entries',
    async (s) => {
      const bag = bagOf(JSON.stringify({ id: rec!.id }), resorts)
      const a = await postSave(s, 'hostile-1', bag.body)
      return {
        value: describe(a),
        asked: a.status === 400,
        abandoned: a.error === 'timeout',
        note: `${fmtN(bag.count)} entries, ${size(bag.body.length)} body`,
      }
    },
    setup,
  )
  // A quarter of the issue's 1,000,000 (which answered 108 MB after more than a minute), so that the row
  // ends within a minute before the fix too.
  const zeros = 250_000
  await hs.row(
    `1 save: ${fmtN(zeros)} \`0\` entries`,
    '400 too-many-entries, small body',
    async (s) => {
      const bag = bagOf('0', zeros)
      const a = await postSave(s, 'hostile-1', bag.body)
      return {
        value: describe(a),
        asked: a.status === 400 && a.bytes < 64 * 1024,
        abandoned: a.error === 'timeout',
        note: `${size(bag.body.length)} body`,
      }
    },
    setup,
  )
  const reuses = 5_000
  await hs.row(
    `1 save: ${fmtN(reuses)} savedDir reuse entries of one file`,
    '400 too-many-entries',
    async (s) => {
      const bag = bagOf(JSON.stringify({ savedName: rec!.savedName, savedDir: rec!.savedDir }), reuses)
      const a = await postSave(s, 'hostile-1b', bag.body)
      let made = ''
      if (a.status === 200) {
        const list = await call(`${s.base}${API}/demo/hostile-1b/default`, {
          headers: { authorization: `Bearer ${s.bearer}` },
          keep: 64 * MiB,
        })
        try {
          made = `; ${fmtN(JSON.parse(list.body.toString()).default?.length ?? 0)} records made`
        } catch {}
      }
      return { value: describe(a) + made, asked: a.status === 400, abandoned: a.error === 'timeout', note: `${size(bag.body.length)} body` }
    },
    setup,
  )
}

/** A text file of `bytes` that compresses like prose (words from a small vocabulary, random order). */
async function textFile(path: string, bytes: number): Promise<void> {
  const words = 'the of and to in is was for on that with as by at from this be or are an it which his not'.split(' ')
  const out = createWriteStream(path)
  let left = bytes
  while (left > 0) {
    let line = ''
    while (line.length < 1_000_000) line += `${words[(Math.random() * words.length) | 0]}${Math.random() < 0.1 ? '\n' : ' '}`
    const chunk = line.slice(0, Math.min(left, line.length))
    left -= chunk.length
    if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()))
  }
  await new Promise<void>((r) => out.end(() => r()))
}

/** Finding 3: ZIP amplification, and 40 ZIPs at once against `zip.concurrency` 4. */
export async function zipRows(_ctx: Context, hs: HostileServer, dir: string): Promise<void> {
  // The issue's file is 20 MB (500 MB deflated per request); 4 MB keeps the row within a minute on a busy
  // machine before the fix, and the amplification is the same 25 times.
  const text = join(dir, 'public-4mb.txt')
  await textFile(text, 4_000_000)
  let id = 0
  const zip = (s: Reference, ids: number[], timeoutMs = 60_000) =>
    call(`${s.base}${ASSETS}/download`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ title: 'hostile', ids }),
      keep: 4096,
      timeoutMs,
    })
  const setup = async (s: Reference) => {
    id = (await saveOne(s, text, 'public-4mb.txt', 'hostile-3')).id
  }
  await hs.row(
    '3 ZIP: {ids: [id × 25]} of a public 4 MB text file',
    'ids de-duplicated: one 4 MB entry',
    async (s) => {
      const body = JSON.stringify({ title: 'hostile', ids: Array(25).fill(id) })
      const a = await zip(s, Array(25).fill(id))
      return {
        value: describe(a),
        note: `request body ${body.length} B; 25 × 4 MB = 100 MB to deflate`,
        asked: a.status === 200 ? a.bytes < 2 * MiB : undefined,
        abandoned: a.error === 'timeout',
      }
    },
    setup,
  )
  await hs.row(
    '3 ZIP: 40 at once (zip.concurrency 4), clients that read nothing',
    'at most 4 × 200, the rest 503 busy',
    async (s) => {
      const i = id
      // Each client takes the status line and headers, reads nothing for 2 s, then goes away.
      const statuses = await Promise.all(
        Array.from(
          { length: 40 },
          () =>
            new Promise<string>((resolve) => {
              const req = http.request(`${s.base}${ASSETS}/download`, {
                method: 'POST',
                headers: { 'content-type': 'application/json' },
                agent: false,
              })
              const t = setTimeout(() => {
                resolve('no answer in 30 s')
                req.destroy()
              }, 30_000)
              req.on('response', (res) => {
                clearTimeout(t)
                res.pause()
                resolve(String(res.statusCode))
                setTimeout(() => req.destroy(), 2000)
              })
              req.on('error', (err: NodeJS.ErrnoException) => {
                clearTimeout(t)
                resolve(err.code ?? 'error')
              })
              req.end(JSON.stringify({ title: 'hostile', ids: Array(5).fill(i) }))
            }),
        ),
      )
      // What the server still does once every client went away: CPU over the next 5 s.
      await new Promise((r) => setTimeout(r, 2500))
      const { cpuSeconds } = await import('../lib/proc.js')
      const c0 = cpuSeconds(s.pid)
      await new Promise((r) => setTimeout(r, 5000))
      const after = cpuSeconds(s.pid) - c0
      const ok = statuses.filter((x) => x === '200').length
      return {
        value: tally(statuses),
        asked: ok <= 4,
        note: `each {ids: [id × 5]}; server CPU ${after.toFixed(1)} s in the 5 s after every client left`,
      }
    },
    setup,
  )
}

/** Finding 4: resizes past the 16 stored variants, and a conditional request that waits for one. */
export async function resizeRows(ctx: Context, hs: HostileServer, dir: string): Promise<void> {
  const photo = await photoJpeg(join(dir, 'photo-3000x2000.jpg'), 3000, 2000)
  let rec: SavedRecord | undefined
  const view = (s: Reference, q: string, headers: Record<string, string> = {}) =>
    call(`${s.base}${ASSETS}/view/${rec!.id}?${q}`, { headers, keep: 0, timeoutMs: 60_000 })
  await hs.row(
    '4 resize: w=2999&format=webp of a 3000×2000 JPEG after 16 stored variants, 3 times, then If-None-Match',
    'repeat not resized again; 304 at once',
    async (s) => {
      const runs: Answer[] = []
      for (let k = 0; k < 3; k++) runs.push(await view(s, 'w=2999&format=webp'))
      const etag = runs[runs.length - 1]!.headers.etag
      const cond = etag ? await view(s, 'w=2999&format=webp', { 'if-none-match': String(etag) }) : undefined
      return {
        value: `${runs.map((a) => (a.status === 200 ? `${a.seconds.toFixed(2)} s` : describe(a))).join(', ')}; ${cond ? `${cond.status} in ${cond.seconds.toFixed(2)} s` : 'no ETag'}`,
        asked: runs[1]!.seconds < 0.2 && runs[2]!.seconds < 0.2 && cond?.status === 304 && cond.seconds < 0.2,
        note: `${size(runs[0]!.bytes)} WebP each`,
      }
    },
    async (s) => {
      rec = await saveOne(s, photo, 'photo.jpg', 'hostile-4', 'image')
      ctx.log('hostile: making 16 stored variants (w=100..1600)')
      for (let w = 100; w <= 1600; w += 100) {
        const a = await view(s, `w=${w}`)
        if (a.status !== 200) throw new Error(`w=${w} answered ${describe(a)}`)
      }
    },
  )
}

/** Finding 4, the sibling: variants counted per record, so one file reused into 3 records stores 3 × 16. */
export async function variantCountRow(_ctx: Context, hs: HostileServer, dir: string): Promise<void> {
  const small = await photoJpeg(join(dir, 'photo-800x600.jpg'), 800, 600)
  const ids: number[] = []
  // A fresh server: the variants of other rows' images would share the folder and be counted.
  await hs.stop()
  await hs.row(
    '4 variants: one 800×600 file in 3 records (savedDir reuse), 20 sizes asked of each',
    'at most 16 stored (per stored file)',
    async (s) => {
      for (const id of ids)
        for (let w = 20; w <= 400; w += 20) {
          const a = await call(`${s.base}${ASSETS}/view/${id}?w=${w}`, { keep: 0, timeoutMs: 60_000 })
          if (a.status !== 200) return { value: `w=${w} of ${id}: ${describe(a)}` }
        }
      const { listFiles } = await import('../lib/files.js')
      const files = (await listFiles(join(s.dataDir, 'files'))).filter((f) => f.includes('/_v/'))
      // {savedDir}_v/{id}/{w}x{h}: the folders say which records the variants were stored under.
      const folders = new Set(files.map((f) => f.slice(0, f.lastIndexOf('/'))))
      const stored = files.length
      return {
        value: `${stored} variant files stored for one file`,
        asked: stored <= 16,
        note: `in ${folders.size} folder(s): ${[...folders].map((d) => d.slice(d.indexOf('/_v/') + 1)).join(', ')}`,
      }
    },
    async (s) => {
      const rec = await saveOne(s, small, 'photo.jpg', 'hostile-4b', 'image')
      ids.push(rec.id)
      const r = await call(`${s.base}${API}/demo/hostile-4c`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', authorization: `Bearer ${s.bearer}` },
        body: JSON.stringify({ image: [0, 1].map(() => ({ savedName: rec.savedName, savedDir: rec.savedDir })) }),
        keep: MiB,
      })
      if (r.status !== 200) throw new Error(`reuse: ${describe(r)} ${r.body.toString().slice(0, 200)}`)
      for (const x of JSON.parse(r.body.toString()).attachList) ids.push(x.id)
    },
  )
}

/** Finding 5: one user's tus creations of 100 MB each. */
export async function quotaRows(_ctx: Context, hs: HostileServer): Promise<void> {
  await hs.row(
    '5 quota: 2,000 tus creations of 100 MB by one user',
    'upload.user-quota 2 GiB: 413 quota-exceeded past about 20',
    async (s) => {
      const b64 = (x: string) => Buffer.from(x).toString('base64')
      const statuses: string[] = []
      let created = 0
      let next = 0
      const started = performance.now()
      let lastCode = ''
      const worker = async () => {
        while (next < 2000) {
          next++
          const a = await call(`${s.base}${API}/tus`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${s.bearer}`,
              'tus-resumable': '1.0.0',
              'upload-length': String(100_000_000),
              'upload-metadata': `filename ${b64('big.bin')},refDomain ${b64('demo')},refCategory ${b64('default')}`,
            },
            keep: 4096,
            timeoutMs: 30_000,
          })
          statuses.push(a.error && !a.status ? a.error : String(a.status))
          if (a.status === 201) created++
          else lastCode = code(a) || lastCode
        }
      }
      await Promise.all(Array.from({ length: 8 }, worker))
      const seconds = (performance.now() - started) / 1000
      // Another user is not held back.
      const other = await call(`${s.base}${API}/tus`, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${await token('2')}`,
          'tus-resumable': '1.0.0',
          'upload-length': String(100_000_000),
          'upload-metadata': `filename ${b64('big.bin')},refDomain ${b64('demo')}`,
        },
        keep: 4096,
      })
      return {
        value: `${tally(statuses)}${lastCode ? ` (${lastCode.trim()})` : ''} in ${seconds.toFixed(1)} s`,
        asked: created <= 25 && other.status === 201,
        note: `${size(created * 100_000_000)} reserved; another user then: ${other.status}`,
      }
    },
  )
}

/** Finding 8: early 413 of POST /board against clients still sending 5 MiB. */
export async function early413Rows(_ctx: Context, hs: HostileServer): Promise<void> {
  await hs.row('8 early 413: 40 POST /board of 5 MiB, 20 at a time (Node http client)', 'every client sees 413', async (s) => {
    // The body goes out in 64 KiB writes, as a client streams a file: the server answers after the
    // headers and the client is still sending when it does.
    const one = () =>
      new Promise<string>((resolve) => {
        const total = 5 * MiB
        const req = http.request(`${s.base}/board`, {
          method: 'POST',
          agent: false,
          headers: { authorization: `Bearer ${s.bearer}`, 'content-type': 'application/json', 'content-length': String(total) },
        })
        let done = false
        const finish = (x: string) => {
          if (done) return
          done = true
          clearTimeout(timer)
          resolve(x)
        }
        const timer = setTimeout(() => {
          finish('no answer in 30 s')
          req.destroy()
        }, 30_000)
        req.on('response', (res) => {
          res.resume()
          res.on('end', () => finish(String(res.statusCode)))
          res.on('error', () => finish(String(res.statusCode)))
        })
        req.on('error', (err: NodeJS.ErrnoException) => finish(err.code ?? 'error'))
        const chunk = Buffer.alloc(64 * 1024, 'x')
        let sent = 0
        const pump = () => {
          while (sent < total && !done && !req.destroyed) {
            sent += chunk.length
            if (!req.write(sent >= total ? chunk.subarray(0, chunk.length - (sent - total)) : chunk)) return void req.once('drain', pump)
          }
          if (sent >= total && !done) req.end()
        }
        pump()
      })
    const results: string[] = []
    for (let wave = 0; wave < 2; wave++) results.push(...(await Promise.all(Array.from({ length: 20 }, one))))
    return { value: tally(results), asked: results.every((x) => x === '413') }
  })
}

export async function scratch(ctx: Context): Promise<{ dir: string; done(): Promise<void> }> {
  const dir = await mkdtemp(join(ctx.work, 'hostile-'))
  return { dir, done: () => rm(dir, { recursive: true, force: true }) }
}
