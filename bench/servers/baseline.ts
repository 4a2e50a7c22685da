/**
 * Baseline servers of `npm run bench`, one per process:
 *   node --conditions=@attach-storage/source --import tsx bench/servers/baseline.ts <mode> <dir>
 * Each listens on 127.0.0.1 (PORT, 0 = any) and prints `listening on http://127.0.0.1:<port>`.
 *
 * Modes:
 *   bare-upload <dir>     POST: pipes the raw request body (the whole multipart body) to a file in <dir>;
 *                         with BENCH_FSYNC=1 it also fsyncs the file before answering
 *   multer-upload <dir>   Express 5 + multer disk storage, part `file`, into <dir>
 *   bare-view <dir>       GET /<name>: stat + createReadStream(<dir>/<name>).pipe(res)
 *   hono-static <dir>     Hono + @hono/node-server's serveStatic({root: <dir>})
 *   express-static <dir>  Express 5 + express.static(<dir>)
 *   fastify-static <dir>  Fastify 5 + @fastify/static({root: <dir>}) (only when @fastify/static is installed)
 *   archiver-zip <dir>    POST JSON {title, names}: archiver's ZipArchive({store: true}) of <dir>/<name>... piped to res
 */
import { createReadStream, createWriteStream } from 'node:fs'
import { open, stat } from 'node:fs/promises'
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import { basename, join } from 'node:path'

const [mode, dir] = process.argv.slice(2)
if (!mode || !dir) {
  console.error('usage: baseline.ts <mode> <dir>')
  process.exit(2)
}
const port = Number(process.env.PORT ?? 0)
const host = '127.0.0.1'

function listen(server: http.Server): void {
  server.keepAliveTimeout = 65_000
  server.listen(port, host, () => {
    console.log(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}`)
  })
  const stop = () => server.close(() => process.exit(0))
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
}

const TYPES: Record<string, string> = { jpg: 'image/jpeg', jpeg: 'image/jpeg', bin: 'application/octet-stream', txt: 'text/plain' }
const typeOf = (name: string) => TYPES[name.split('.').pop()!.toLowerCase()] ?? 'application/octet-stream'

let seq = 0
const fsyncToo = process.env.BENCH_FSYNC === '1'

switch (mode) {
  case 'bare-upload': {
    listen(
      http.createServer((req, res) => {
        const path = join(dir, `upload-${process.pid}-${++seq}`)
        const file = createWriteStream(path)
        let size = 0
        req.on('data', (c: Buffer) => (size += c.length))
        req.pipe(file)
        file.on('finish', async () => {
          if (fsyncToo) {
            // The same durability as a store that fsyncs before answering.
            const h = await open(path, 'r+')
            await h.sync()
            await h.close()
          }
          res.writeHead(200, { 'content-type': 'application/json' })
          res.end(JSON.stringify({ size }))
        })
        file.on('error', (err) => {
          res.writeHead(500)
          res.end(String(err))
        })
      }),
    )
    break
  }
  case 'multer-upload': {
    const express = (await import('express')).default
    const multer = (await import('multer')).default
    const upload = multer({ storage: multer.diskStorage({ destination: dir }) })
    const app = express()
    app.post('/upload', upload.single('file'), (req, res) => {
      res.json({ size: req.file?.size, fields: req.body })
    })
    listen(http.createServer(app))
    break
  }
  case 'bare-view': {
    listen(
      http.createServer(async (req, res) => {
        const name = basename(decodeURIComponent(new URL(req.url!, 'http://x').pathname))
        const path = join(dir, name)
        try {
          const s = await stat(path)
          res.writeHead(200, { 'content-type': typeOf(name), 'content-length': s.size })
          createReadStream(path).pipe(res)
        } catch {
          res.writeHead(404)
          res.end()
        }
      }),
    )
    break
  }
  case 'hono-static': {
    const { Hono } = await import('hono')
    const { serve } = await import('@hono/node-server')
    const { serveStatic } = await import('@hono/node-server/serve-static')
    const app = new Hono()
    app.use('/*', serveStatic({ root: dir }))
    const server = serve({ fetch: app.fetch, port, hostname: host }, (info) => {
      console.log(`listening on http://127.0.0.1:${info.port}`)
    })
    const stop = () => server.close(() => process.exit(0))
    process.on('SIGTERM', stop)
    process.on('SIGINT', stop)
    break
  }
  case 'express-static': {
    const express = (await import('express')).default
    const app = express()
    app.use(express.static(dir))
    listen(http.createServer(app))
    break
  }
  case 'fastify-static': {
    // Only when @fastify/static is installed (the bench never installs it); computed specifiers keep the
    // type check independent of it.
    const fastifyName = 'fastify'
    const staticName = '@fastify/static'
    const Fastify = (await import(fastifyName)).default as (o?: object) => any
    const fastifyStatic = (await import(staticName)).default
    const app = Fastify()
    await app.register(fastifyStatic, { root: dir })
    await app.listen({ port, host })
    console.log(`listening on http://127.0.0.1:${app.server.address().port}`)
    const stop = () => app.close().then(() => process.exit(0))
    process.on('SIGTERM', stop)
    process.on('SIGINT', stop)
    break
  }
  case 'archiver-zip': {
    const { ZipArchive } = await import('archiver')
    listen(
      http.createServer(async (req, res) => {
        const chunks: Buffer[] = []
        for await (const c of req) chunks.push(c as Buffer)
        const { title, names } = JSON.parse(Buffer.concat(chunks).toString()) as { title: string; names: string[] }
        res.writeHead(200, {
          'content-type': 'application/zip',
          'content-disposition': `attachment; filename="${title}.zip"`,
        })
        const zip = new ZipArchive({ store: true })
        zip.on('error', (err) => res.destroy(err))
        zip.pipe(res)
        for (const n of names) zip.file(join(dir, basename(n)), { name: basename(n) })
        await zip.finalize()
      }),
    )
    break
  }
  default:
    console.error(`unknown mode ${mode}`)
    process.exit(2)
}
