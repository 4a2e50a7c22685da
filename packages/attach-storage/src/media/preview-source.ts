/**
 * Where a preview tool reads a stored file from: the file itself on a local store; else a short-lived
 * presigned address (ffmpeg reads it with range requests, never the whole file); else a loopback HTTP
 * server of our own that answers range requests from `store.get(key, range)`. For poppler, which needs
 * a file, a bounded copy in a temporary folder.
 */
import { randomBytes } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { lstat, mkdtemp, rm } from 'node:fs/promises'
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import type { Store } from '../stores/store.js'
import { PreviewError } from './preview-tools.js'

/** The file behind `key` when the store keeps local files and it is a regular file there (no link). */
async function localFile(store: Store, key: string): Promise<string | undefined> {
  if (!store.localPath) return undefined
  const path = store.localPath(key)
  try {
    return (await lstat(path)).isFile() ? path : undefined
  } catch {
    return undefined
  }
}

/**
 * Where ffmpeg/ffprobe read the stored object at `key` (`size` bytes, as the record says):
 *
 * 1. `kind: 'path'`: `store.localPath(key)` when the store has local files and a regular file is there
 *    (a symbolic link is not followed: it goes the third way, where the store's own `get` refuses it).
 * 2. `kind: 'url'`: `store.presignGet(key, { expiresIn: ttlSeconds, … })` when the store signs addresses
 *    (S3, Azure): the tool reads the store directly, with range requests. Keep `ttlSeconds` short: the
 *    address reads the whole object until it expires.
 * 3. `kind: 'url'`: a loopback HTTP server on 127.0.0.1 (a free port) whose one path is 32 random bytes
 *    (base64url), answering GET/HEAD of that one object with `Accept-Ranges`, `Content-Length`, 206 and
 *    `Content-Range` for a range (`bytes=a-b`, `bytes=a-`, `bytes=-n`), 416 past the end, 404 anything
 *    else; bytes come from `store.get(key, range)` as a stream, with back-pressure.
 *
 * `close()` stops the server and its connections (a no-op for 1 and 2); call it once the tool is done.
 */
export async function toolInput(
  store: Store,
  key: string,
  size: number,
  options: { ttlSeconds: number },
): Promise<{ input: string; kind: 'path' | 'url'; close(): Promise<void> }> {
  const path = await localFile(store, key)
  if (path) return { input: path, kind: 'path', close: async () => {} }
  if (store.presignGet) {
    const url = await store.presignGet(key, {
      expiresIn: Math.max(1, Math.ceil(options.ttlSeconds)),
      contentType: 'application/octet-stream',
      contentDisposition: 'attachment',
    })
    return { input: url, kind: 'url', close: async () => {} }
  }
  return loopbackServer(store, key, size)
}

/** The bytes a `Range` header asks for, `'whole'` for none (or several ranges), `'unsatisfiable'` past the end. */
function parseRange(header: string | undefined, size: number): { start: number; end: number } | 'whole' | 'unsatisfiable' {
  if (!header) return 'whole'
  const m = /^bytes=(\d*)-(\d*)$/.exec(header.trim())
  if (!m || (m[1] === '' && m[2] === '')) return 'whole'
  if (m[1] === '') {
    const suffix = Number(m[2])
    if (suffix === 0 || size === 0) return 'unsatisfiable'
    return { start: Math.max(0, size - suffix), end: size - 1 }
  }
  const start = Number(m[1])
  const end = m[2] === '' ? size - 1 : Math.min(size - 1, Number(m[2]))
  if (!Number.isSafeInteger(start) || start >= size || end < start) return 'unsatisfiable'
  return { start, end }
}

async function loopbackServer(store: Store, key: string, size: number): Promise<{ input: string; kind: 'url'; close(): Promise<void> }> {
  const secret = `/${randomBytes(32).toString('base64url')}`
  const answer = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (req.url !== secret || (req.method !== 'GET' && req.method !== 'HEAD')) {
      res.writeHead(404, { 'content-length': '0' }).end()
      return
    }
    const range = parseRange(req.headers.range, size)
    if (range === 'unsatisfiable') {
      res.writeHead(416, { 'content-range': `bytes */${size}`, 'content-length': '0' }).end()
      return
    }
    const { start, end } = range === 'whole' ? { start: 0, end: size - 1 } : range
    const headers = {
      'accept-ranges': 'bytes',
      'content-type': 'application/octet-stream',
      'content-length': String(Math.max(0, end - start + 1)),
    }
    if (range === 'whole') res.writeHead(200, headers)
    else res.writeHead(206, { ...headers, 'content-range': `bytes ${start}-${end}/${size}` })
    if (req.method === 'HEAD' || end < start) {
      res.end()
      return
    }
    const body = await store.get(key, range === 'whole' ? undefined : { start, end })
    await pipeline(body, res)
  }
  const server = createServer((req, res) => {
    answer(req, res).catch(() => {
      // The store failed or the tool hung up: the tool sees a short answer and fails on its own.
      if (!res.headersSent) res.writeHead(502, { 'content-length': '0' })
      res.destroy()
    })
  })
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject)
    server.listen(0, '127.0.0.1', () => resolve())
  })
  const { port } = server.address() as AddressInfo
  let closed: Promise<void> | undefined
  return {
    input: `http://127.0.0.1:${port}${secret}`,
    kind: 'url',
    close: () => {
      closed ??= new Promise<void>((resolve) => {
        server.closeAllConnections()
        server.close(() => resolve())
      })
      return closed
    },
  }
}

/**
 * A local file of the stored object at `key`, for tools that need one (pdfinfo and pdftoppm seek all over
 * a PDF): `store.localPath(key)` when it is a regular file there, else a copy streamed from
 * `store.get(key)` into a new folder under `tmpDir` (default: the OS's temporary folder).
 *
 * A copy is bounded by `maxBytes`: a `size` over it, or a stream that turns out longer, throws
 * {@link PreviewError} `too-long` (permanent: the same file stays too large) before or while copying,
 * with nothing left behind. A store error while copying is rethrown as it is, the partial copy removed.
 * `close()` removes the copy and its folder (a no-op for a local file).
 */
export async function toolFile(
  store: Store,
  key: string,
  size: number,
  options: { maxBytes: number; tmpDir?: string },
): Promise<{ path: string; close(): Promise<void> }> {
  const local = await localFile(store, key)
  if (local) return { path: local, close: async () => {} }
  const tooLarge = (bytes: number) =>
    new PreviewError('too-long', `the file has ${bytes} bytes, more than the ${options.maxBytes} a preview tool may copy`)
  if (size > options.maxBytes) throw tooLarge(size)
  const dir = await mkdtemp(join(options.tmpDir ?? tmpdir(), 'attach-preview-'))
  const remove = () => rm(dir, { recursive: true, force: true })
  const path = join(dir, 'input')
  try {
    let copied = 0
    const limit = new Transform({
      transform(chunk: Buffer, _encoding, callback) {
        copied += chunk.length
        if (copied > options.maxBytes) callback(tooLarge(copied))
        else callback(null, chunk)
      },
    })
    await pipeline(await store.get(key), limit, createWriteStream(path, { flags: 'wx', mode: 0o600 }))
  } catch (error) {
    await remove()
    throw error
  }
  let closed: Promise<void> | undefined
  return {
    path,
    close: () => {
      closed ??= remove()
      return closed
    },
  }
}
