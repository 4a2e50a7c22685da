/**
 * The S3 side of the `s3` bench scenario, one process each:
 *   node --conditions=@attach-storage/source --import tsx bench/servers/s3.ts s3rver <dir>
 *       s3rver (with the store tests' fixes: atomic writes, multipart commands) on 127.0.0.1, data in <dir>;
 *       prints `listening on http://127.0.0.1:<port>` (bucket `bench`)
 *   node --conditions=@attach-storage/source --import tsx bench/servers/s3.ts sdk <endpoint>
 *       the baseline: a bare node:http server using the S3 SDK alone. POST /upload streams the request
 *       body into an object with @aws-sdk/lib-storage's Upload; GET /<key> streams GetObject to the client.
 *       With SDK_LOADS_APP=1 it first imports the reference app's modules (the Hono app and the S3 store),
 *       never calling them: the same server with the heap an application gives it.
 */
import http from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Readable } from 'node:stream'
import { GetObjectCommand } from '@aws-sdk/client-s3'
import { Upload } from '@aws-sdk/lib-storage'
import { s3rverClient } from '../lib/s3rver.js'

const [mode, arg] = process.argv.slice(2)

function listen(server: http.Server, close: () => Promise<void> = async () => {}): void {
  server.keepAliveTimeout = 65_000
  server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
    console.log(`listening on http://127.0.0.1:${(server.address() as AddressInfo).port}`)
  })
  const stop = () => server.close(() => close().finally(() => process.exit(0)))
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
}

if (mode === 's3rver') {
  process.env.TMPDIR = arg!
  const { startS3rver } = await import('../../packages/store-s3/src/test-server.js')
  const s3 = await startS3rver('bench')
  console.log(`listening on http://127.0.0.1:${s3.port}`)
  const stop = () => s3.close().finally(() => process.exit(0))
  process.on('SIGTERM', stop)
  process.on('SIGINT', stop)
} else if (mode === 'sdk') {
  if (process.env.SDK_LOADS_APP === '1') {
    await import('../../examples/hono-app/src/app.js')
    await import('../../packages/store-s3/src/index.js')
  }
  const client = s3rverClient(arg!)
  let seq = 0
  listen(
    http.createServer(async (req, res) => {
      try {
        if (req.method === 'POST') {
          const key = `sdk/upload-${++seq}`
          await new Upload({ client, params: { Bucket: 'bench', Key: key, Body: req }, queueSize: 4, partSize: 8 * 1024 * 1024 }).done()
          res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ key }))
          return
        }
        const out = await client.send(new GetObjectCommand({ Bucket: 'bench', Key: decodeURIComponent(req.url!.slice(1)) }))
        res.writeHead(200, { 'content-length': String(out.ContentLength), 'content-type': 'application/octet-stream' })
        ;(out.Body as Readable).pipe(res)
      } catch (err) {
        res.writeHead(500).end(String((err as Error).message))
      }
    }),
    async () => client.destroy(),
  )
} else {
  console.error('usage: s3.ts s3rver <dir> | sdk <endpoint>')
  process.exit(2)
}
