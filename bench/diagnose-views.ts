/**
 * Where the time of a 50 KB view goes: the reference server's view path taken apart, one layer at a time,
 * each variant on its own port of ONE server process, loaded in turn by wrk (32 connections, 2 threads).
 * Besides req/s it prints the server's CPU per request (user + system over the run / requests), which
 * stays meaningful on a busy machine where req/s does not.
 *
 *   node --conditions=@attach-storage/source --import tsx bench/diagnose-views.ts [seconds]
 *
 * Variants, from the bare baseline up to the reference server:
 *   bare           node:http, stat + createReadStream(path).pipe(res)         (views-50k's baseline)
 *   bare readFile  node:http, readFile + res.end: one write, what a small-file fast path could do
 *   +sqlite        bare + the record read with one cached better-sqlite3 statement
 *   +kysely        bare + AttachRepository.findById (Kysely, statement prepared per query)
 *   +resolve       bare + storage.resolveById (record, category, secure-access check), path stream
 *   +store.get     resolveById + LocalStore.get (FileHandle stream) piped to res, no Web streams
 *   node bridge    createAttachHandler(storage).fetch through attach-storage/node (Web Request/Response)
 *   hono app       the reference server as `npm start` runs it (Hono + @hono/node-server)
 *   hono static    Hono + serveStatic on the same file (views-50k's other baseline)
 */
import { execFileSync } from 'node:child_process'
import { createReadStream } from 'node:fs'
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises'
import { pipeline } from 'node:stream/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import Database from 'better-sqlite3'
import { serve } from '@hono/node-server'
import { serveStatic } from '@hono/node-server/serve-static'
import { Hono } from 'hono'
import { AttachRepository } from '../packages/attach-storage/src/repository/attach-repository.js'
import { createNodeHandler } from 'attach-storage/node'
import { createReferenceApp } from '../examples/hono-app/src/app.js'
import { paddedJpeg } from './lib/files.js'
import { JWT_SECRET, jsonCall, token, uploadMultipart } from './lib/http.js'
import { cpuSeconds } from './lib/proc.js'
import { ensureWrk, wrk } from './lib/wrk.js'

const seconds = Number(process.argv[2] ?? 8)
const w = ensureWrk((s) => console.error(s))
if (!w.ok) {
  console.error(w.reason)
  process.exit(1)
}
const dataDir = await mkdtemp(join(process.env.BENCH_TMP ?? '/dev/shm', 'attach-diag-'))
const quiet = { info() {}, warn() {}, error() {}, debug() {} }
const ref = await createReferenceApp({ ATTACH_DATA_DIR: dataDir, ATTACH_JWT_SECRET: JWT_SECRET }, quiet)
const file = await paddedJpeg(join(dataDir, 'photo.jpg'), 50 * 1024)

const listen = (server: http.Server) =>
  new Promise<string>((r) => server.listen(0, '127.0.0.1', () => r(`http://127.0.0.1:${(server.address() as AddressInfo).port}`)))
const honoServer = serve({ fetch: ref.app.fetch, port: 0, hostname: '127.0.0.1' }) as http.Server
await new Promise((r) => honoServer.once('listening', r))
const honoBase = `http://127.0.0.1:${(honoServer.address() as AddressInfo).port}`

// Saved through the API, as the bench does.
const bearer = await token('1')
const up = await uploadMultipart(
  `${honoBase}/api/storage/attach/tmp`,
  { refDomain: 'demo', refCategory: 'default' },
  [{ field: 'file', path: file }],
  {
    authorization: `Bearer ${bearer}`,
  },
)
const item = JSON.parse(up.body!.toString()).files[0]
const saved = await jsonCall(`${honoBase}/api/storage/attach/demo/1`, 'POST', { default: [{ savedName: item.name }] }, bearer)
const id: number = saved.attachList[0].id
const storage = ref.storage
const repo = new AttachRepository(ref.db)
const sqlite = new Database(join(dataDir, 'attach.db'), { readonly: true })
const byId = sqlite.prepare('SELECT * FROM attach_file WHERE id = ? AND deleted = 0')

const sendFile = async (res: http.ServerResponse, path: string, type: string) => {
  const s = await stat(path)
  res.writeHead(200, { 'content-type': type, 'content-length': s.size })
  // As the bench's baseline does (a 50 KB file is read whole at once, so nothing stays open).
  createReadStream(path).pipe(res)
}
const variants: Array<[string, string]> = []
variants.push(['bare', await listen(http.createServer((_req, res) => void sendFile(res, file, 'image/jpeg')))])
variants.push([
  'bare, readFile + res.end (one write)',
  await listen(
    http.createServer(async (_req, res) => {
      const body = await readFile(file)
      res.writeHead(200, { 'content-type': 'image/jpeg', 'content-length': body.length })
      res.end(body)
    }),
  ),
])
variants.push([
  '+sqlite (cached statement)',
  await listen(
    http.createServer((_req, res) => {
      byId.get(id)
      void sendFile(res, file, 'image/jpeg')
    }),
  ),
])
variants.push([
  '+kysely (AttachRepository.findById)',
  await listen(
    http.createServer(async (_req, res) => {
      await repo.findById(id)
      await sendFile(res, file, 'image/jpeg')
    }),
  ),
])
variants.push([
  '+resolve (resolveById, path stream)',
  await listen(
    http.createServer(async (req, res) => {
      const t = await storage.resolveById({ id }, { user: null, request: new Request(`http://127.0.0.1${req.url}`) })
      await sendFile(res, join(dataDir, 'files', t.key), t.fileType)
    }),
  ),
])
variants.push([
  '+store.get (FileHandle stream, Node pipe)',
  await listen(
    http.createServer(async (req, res) => {
      const t = await storage.resolveById({ id }, { user: null, request: new Request(`http://127.0.0.1${req.url}`) })
      const s = await t.store.get(t.key)
      res.writeHead(200, { 'content-type': t.fileType, 'content-length': t.fileSize })
      // pipeline: a client that goes away mid-answer closes the file too.
      pipeline(s, res).catch(() => undefined)
    }),
  ),
])
variants.push(['node bridge (Web Request/Response, no Hono)', await listen(http.createServer(createNodeHandler(ref.attach.fetch)))])
variants.push(['hono app (the reference server)', honoBase])
const staticApp = new Hono()
staticApp.use('/*', serveStatic({ root: dataDir }))
const staticServer = serve({ fetch: staticApp.fetch, port: 0, hostname: '127.0.0.1' }) as http.Server
await new Promise((r) => staticServer.once('listening', r))
variants.push(['hono serveStatic (no lookup)', `http://127.0.0.1:${(staticServer.address() as AddressInfo).port}`])

// wrk runs in its own process; this process serves. CPU is read from /proc for this process.
console.log(`node ${process.version}, ${seconds} s per variant after a 2 s warm-up, 50 KB file, 32 connections\n`)
console.log(`${'variant'.padEnd(46)} ${'req/s'.padStart(8)} ${'CPU µs/req'.padStart(11)} ${'+ over bare'.padStart(12)}`)
let bareCpu = NaN
for (const [name, base] of variants) {
  const url = name.startsWith('hono serveStatic')
    ? `${base}/photo.jpg`
    : name.startsWith('bare') || name.startsWith('+')
      ? `${base}/x`
      : `${base}/assets/storage/attach/view/${id}`
  const check = await fetch(url)
  if (check.status !== 200 || (await check.arrayBuffer()).byteLength !== 50 * 1024) throw new Error(`${name}: ${check.status}`)
  await wrk(url, { connections: 32, threads: 2, seconds: 2 })
  const c0 = cpuSeconds(process.pid)
  const r = await wrk(url, { connections: 32, threads: 2, seconds })
  const perReq = ((cpuSeconds(process.pid) - c0) * 1e6) / r.requests
  if (name === 'bare') bareCpu = perReq
  console.log(
    `${name.padEnd(46)} ${Math.round(r.rps).toString().padStart(8)} ${Math.round(perReq).toString().padStart(11)} ${(name === 'bare' ? '' : `${perReq >= bareCpu ? '+' : ''}${Math.round(perReq - bareCpu)}`).padStart(12)}`,
  )
}
console.log(`\nload average ${execFileSync('cat', ['/proc/loadavg']).toString().trim()}`)
sqlite.close()
await ref.close()
await rm(dataDir, { recursive: true, force: true })
process.exit(0)
