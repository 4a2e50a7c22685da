/** The load generator's HTTP clients: streamed multipart uploads, downloads that discard, JSON calls. */
import { randomBytes } from 'node:crypto'
import { createReadStream, statSync } from 'node:fs'
import http from 'node:http'
import { basename } from 'node:path'
import { SignJWT } from 'jose'

export const JWT_SECRET = 'attach-storage-bench-secret-0123456789'

/** A Bearer token for the reference server (HS256, `sub` = user id). */
export function token(sub = '1'): Promise<string> {
  return new SignJWT({})
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(sub)
    .setExpirationTime('2h')
    .sign(new TextEncoder().encode(JWT_SECRET))
}

const agent = new http.Agent({ keepAlive: false })

export interface Timed {
  status: number
  bytes: number
  seconds: number
  /** The first `keep` bytes of the answer. */
  body: Buffer | undefined
  headers: http.IncomingHttpHeaders
}

export interface MultipartFile {
  field: string
  path: string
  name?: string
  type?: string
}

/**
 * POSTs a multipart/form-data body built from text fields and files streamed from disk (read streams of
 * 1 MiB chunks), with an exact Content-Length. Times the request from its first byte to the end of the
 * response.
 */
export function uploadMultipart(
  url: string,
  fields: Record<string, string>,
  files: MultipartFile[],
  headers: Record<string, string> = {},
): Promise<Timed> {
  const boundary = `----attachbench${randomBytes(12).toString('hex')}`
  const parts: Array<Buffer | MultipartFile> = []
  for (const [k, v] of Object.entries(fields)) {
    parts.push(Buffer.from(`--${boundary}\r\nContent-Disposition: form-data; name="${k}"\r\n\r\n${v}\r\n`))
  }
  for (const f of files) {
    const name = f.name ?? basename(f.path)
    parts.push(
      Buffer.from(
        `--${boundary}\r\nContent-Disposition: form-data; name="${f.field}"; filename="${name}"\r\n` +
          `Content-Type: ${f.type ?? 'application/octet-stream'}\r\n\r\n`,
      ),
    )
    parts.push(f)
    parts.push(Buffer.from('\r\n'))
  }
  parts.push(Buffer.from(`--${boundary}--\r\n`))
  const length = parts.reduce((n, p) => n + (Buffer.isBuffer(p) ? p.length : statSync(p.path).size), 0)
  const started = performance.now()
  return new Promise<Timed>((resolve, reject) => {
    const req = http.request(
      url,
      {
        method: 'POST',
        agent,
        headers: { ...headers, 'content-type': `multipart/form-data; boundary=${boundary}`, 'content-length': String(length) },
      },
      (res) => collect(res, started, true).then(resolve, reject),
    )
    req.on('error', reject)
    ;(async () => {
      for (const p of parts) {
        if (Buffer.isBuffer(p)) {
          if (!req.write(p)) await new Promise((r) => req.once('drain', r))
          continue
        }
        for await (const chunk of createReadStream(p.path, { highWaterMark: 1024 * 1024 })) {
          if (!req.write(chunk)) await new Promise((r) => req.once('drain', r))
        }
      }
      req.end()
    })().catch((err) => req.destroy(err))
  })
}

function collect(res: http.IncomingMessage, started: number, keep: boolean | number): Promise<Timed> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = []
    let bytes = 0
    const limit = keep === true ? Infinity : keep === false ? 0 : keep
    let kept = 0
    res.on('data', (c: Buffer) => {
      bytes += c.length
      if (kept < limit) {
        const part = kept + c.length <= limit ? c : c.subarray(0, limit - kept)
        chunks.push(part)
        kept += part.length
      }
    })
    res.on('end', () =>
      resolve({
        status: res.statusCode ?? 0,
        bytes,
        seconds: (performance.now() - started) / 1000,
        body: Buffer.concat(chunks),
        headers: res.headers,
      }),
    )
    res.on('error', reject)
  })
}

/** A request whose answer is counted and discarded but for its first `keep` bytes (64 KiB unless told). */
export function request(
  url: string,
  init: { method?: string; headers?: Record<string, string>; body?: string | Buffer; keep?: boolean | number } = {},
): Promise<Timed> {
  const started = performance.now()
  return new Promise<Timed>((resolve, reject) => {
    const req = http.request(url, { method: init.method ?? 'GET', agent, headers: init.headers }, (res) =>
      collect(res, started, init.keep ?? 64 * 1024).then(resolve, reject),
    )
    req.on('error', reject)
    req.end(init.body)
  })
}

/** JSON call; throws with the answer when the status is not 2xx. */
export async function jsonCall<T = any>(url: string, method: string, body: unknown, bearer?: string): Promise<T> {
  const headers: Record<string, string> = { 'content-type': 'application/json' }
  if (bearer) headers.authorization = `Bearer ${bearer}`
  const r = await request(url, { method, headers, body: JSON.stringify(body), keep: true })
  const text = r.body?.toString() ?? ''
  if (r.status < 200 || r.status >= 300) throw new Error(`${method} ${url}: ${r.status} ${text.slice(0, 500)}`)
  return JSON.parse(text) as T
}

export function mibps(bytes: number, seconds: number): number {
  return bytes / 1024 / 1024 / seconds
}

export function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2
}
