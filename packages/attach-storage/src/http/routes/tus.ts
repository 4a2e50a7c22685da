/**
 * Resumable uploads, tus 1.0 (https://tus.io/protocols/resumable-upload) at `{api-prefix}/attach/tus`
 * with the extensions creation, creation-with-upload, creation-defer-length, termination, expiration and
 * checksum (sha1, sha256, md5).
 * The upload's id (the last segment of `Location`) is the temporary file's `name`. Errors answer
 * `{code, message}` (HEAD: the status alone), always with `Tus-Resumable`.
 */
import { PassThrough } from 'node:stream'
import * as v from 'valibot'
import { AttachStorageError, badRequest } from '../../errors.js'
import {
  appendResumable,
  type Checksum,
  createResumable,
  type ResumableStatus,
  resumableStatus,
  terminateResumable,
} from '../../service/resumable.js'
import { SAVED_NAME } from '../../service/layout.js'
import { nodeRequestBodyOf } from '../node-body.js'
import { answeredError } from '../respond.js'
import { defineRoute, noRoute, type Route, type RouteEnv } from '../router.js'

const TUS_VERSION = '1.0.0'
const EXTENSIONS = 'creation,creation-with-upload,creation-defer-length,termination,expiration,checksum'
/** The algorithms of `Upload-Checksum` (tus's checksum extension), as `Tus-Checksum-Algorithm` lists them. */
const CHECKSUM_ALGORITHMS = ['sha1', 'sha256', 'md5'] as const
const OCTETS = 'application/offset+octet-stream'

const IdParams = v.object({ id: v.pipe(v.string(), v.regex(SAVED_NAME)) })

/** A tus header holding a non-negative integer; 400 when present and malformed. */
function integerHeader(request: Request, name: string): number | undefined {
  const raw = request.headers.get(name)
  if (raw === null) return undefined
  if (!/^\d{1,16}$/.test(raw.trim())) throw badRequest(`${name} must be a non-negative integer`)
  return Number(raw.trim())
}

/** `Upload-Metadata`: comma-separated `key base64value` pairs. */
export function parseMetadata(raw: string | null): Record<string, string> {
  const out: Record<string, string> = {}
  if (!raw) return out
  if (raw.length > 16 * 1024) throw badRequest('Upload-Metadata is longer than 16 KiB')
  for (const pair of raw.split(',')) {
    const [key, value, extra] = pair.trim().split(' ')
    if (!key || extra !== undefined || (value !== undefined && !/^[A-Za-z0-9+/]*={0,2}$/.test(value))) {
      throw badRequest('Upload-Metadata is malformed')
    }
    out[key] = value === undefined ? '' : Buffer.from(value, 'base64').toString('utf8')
  }
  return out
}

/**
 * `Upload-Checksum: <algorithm> <base64 digest>` of a request's bytes; undefined without one. 400 for an
 * algorithm not in {@link CHECKSUM_ALGORITHMS} or a malformed value.
 */
function checksumHeader(request: Request): Checksum | undefined {
  const raw = request.headers.get('upload-checksum')
  if (raw === null) return undefined
  const m = /^\s*([A-Za-z0-9-]+) ([A-Za-z0-9+/]+={0,2})\s*$/.exec(raw)
  if (!m) throw badRequest('Upload-Checksum must be an algorithm and a base64 digest')
  const algorithm = m[1]!.toLowerCase()
  if (!(CHECKSUM_ALGORITHMS as readonly string[]).includes(algorithm)) {
    throw badRequest(`Upload-Checksum algorithm ${m[1]} is not supported; use one of ${CHECKSUM_ALGORITHMS.join(', ')}`)
  }
  return { algorithm: algorithm as Checksum['algorithm'], digest: Buffer.from(m[2]!, 'base64') }
}

function headersOf(status: Partial<ResumableStatus>): Headers {
  const h = new Headers({ 'tus-resumable': TUS_VERSION, 'cache-control': 'no-store' })
  if (status.offset !== undefined) h.set('upload-offset', String(status.offset))
  if (status.length !== undefined) {
    if (status.length === null) h.set('upload-defer-length', '1')
    else h.set('upload-length', String(status.length))
  }
  if (status.expires && !status.done) h.set('upload-expires', status.expires.toUTCString())
  return h
}

const bodies = new WeakMap<Request, { stream: AsyncIterable<Uint8Array>; signal?: AbortSignal; release(): void }>()
/**
 * The request's bytes (one reader per request), or null without a body: on Node, the request's own
 * stream while nothing has read it (`NODE_REQUEST_BODY`), seen through a pass-through so that giving
 * up on it (an error answer) never destroys the connection the answer goes out on; else the Web body,
 * read chunk by chunk as they are asked for (nothing read ahead, so every chunk read before the body
 * failed is kept). Take it before anything else of the request is read (see {@link signalOf}).
 */
function bodyOf(request: Request): AsyncIterable<Uint8Array> | null {
  const known = bodies.get(request)
  if (known) return known.stream
  const node = nodeRequestBodyOf(request)
  if (node) {
    const stream = new PassThrough({ highWaterMark: 64 * 1024 })
    const gone = new AbortController()
    node.once('error', (err) => stream.destroy(err))
    node.once('close', () => {
      if (node.readableEnded) return
      const err = new AttachStorageError('aborted', 'The client went away before the request body ended', { status: 400 })
      gone.abort(err)
      stream.destroy(err)
    })
    node.pipe(stream)
    bodies.set(request, { stream, signal: gone.signal, release: () => stream.destroy() })
    return stream
  }
  if (!request.body) return null
  const reader = request.body.getReader()
  let done = false
  const stream = (async function* () {
    try {
      for (;;) {
        const r = await reader.read()
        if (r.done) {
          done = true
          return
        }
        yield r.value
      }
    } finally {
      if (!done) await reader.cancel().catch(() => undefined)
    }
  })()
  bodies.set(request, { stream, release: () => void reader.cancel().catch(() => undefined) })
  return stream
}

/**
 * The client going away, for a request whose body {@link bodyOf} took: Node's stream closing early when
 * it was taken (the Web request's `signal` is then left alone: on @hono/node-server reading it would
 * make a Web body that reads the same stream), else the request's signal.
 */
function signalOf(request: Request): AbortSignal | undefined {
  return bodies.get(request)?.signal ?? request.signal
}

/**
 * Whether a request failed because its client went away: its body's stream closed before the end, the
 * request's signal aborted, or the failure is an abort (the store call its signal cut, Node's `aborted`).
 */
function wentAway(request: Request, err: unknown): boolean {
  const b = bodies.get(request)
  if (b?.signal?.aborted) return true
  if (b && !b.signal && request.signal.aborted) return true
  if (err instanceof AttachStorageError) return err.code === 'aborted'
  const e = err as { name?: unknown; code?: unknown; message?: unknown } | null
  return !!e && (e.name === 'AbortError' || e.code === 'ECONNRESET' || e.code === 'ABORT_ERR' || e.message === 'aborted')
}

/** Runs a tus handler: the resumable switch, `Tus-Resumable`, and errors with the tus headers. */
function tus(handle: (env: RouteEnv, id: string) => Promise<Response>, options: { versionFree?: boolean } = {}) {
  return async (input: { params: unknown }, env: RouteEnv): Promise<Response> => {
    if (!env.ctx.config.resumable.enabled) throw noRoute()
    const id = (input.params as { id?: string } | undefined)?.id ?? ''
    try {
      if (!options.versionFree && env.request.headers.get('tus-resumable') !== TUS_VERSION) {
        throw new AttachStorageError('bad-request', `Tus-Resumable ${TUS_VERSION} is required`, {
          status: 412,
          headers: { 'tus-version': TUS_VERSION },
        })
      }
      return await handle(env, id)
    } catch (err) {
      // Bytes not read are not waited for.
      const b = bodies.get(env.request)
      const gone = wentAway(env.request, err)
      if (b) b.release()
      else if (env.request.body && !env.request.bodyUsed) await env.request.body.cancel().catch(() => undefined)
      if (gone) {
        // A client going away is no server error: one line, no stack; it resumes from its offset (HEAD).
        env.ctx.logger.info(
          `attach-storage: tus ${env.request.method} of upload ${id || '(being created)'} cut off by the client; it resumes from its offset (HEAD)`,
        )
      }
      const cause = gone ? new AttachStorageError('aborted', 'The client went away before the request body ended', { status: 400 }) : err
      const e = answeredError(cause, env.ctx.logger)
      const res = e.toResponse({ 'tus-resumable': TUS_VERSION })
      return env.request.method === 'HEAD' ? new Response(null, { status: res.status, headers: res.headers }) : res
    }
  }
}

const options = tus(
  async (env) =>
    new Response(null, {
      status: 204,
      headers: {
        'tus-resumable': TUS_VERSION,
        'tus-version': TUS_VERSION,
        'tus-extension': EXTENSIONS,
        'tus-max-size': String(env.ctx.config.upload.maxFileSize),
        'tus-checksum-algorithm': CHECKSUM_ALGORITHMS.join(','),
      },
    }),
  { versionFree: true },
)

const unsupported = () => new AttachStorageError('unsupported-media-type', `The body must be ${OCTETS}`, { status: 415 })
const isOctets = (request: Request) => (request.headers.get('content-type') ?? '').split(';')[0]!.trim().toLowerCase() === OCTETS

/** PATCH: the bytes at `Upload-Offset`. */
async function append(env: RouteEnv, id: string): Promise<Response> {
  const r = env.request
  if (!isOctets(r)) throw unsupported()
  const offset = integerHeader(r, 'upload-offset')
  if (offset === undefined) throw badRequest('Upload-Offset is required')
  const checksum = checksumHeader(r)
  const contentLength = integerHeader(r, 'content-length')
  const length = integerHeader(r, 'upload-length')
  const body = bodyOf(r)
  const status = await appendResumable(env.ctx, id, { offset, body, contentLength, length, checksum, signal: signalOf(r) }, env.access)
  return new Response(null, { status: 204, headers: headersOf({ ...status, length: undefined }) })
}

/** DELETE: the upload goes, finished or not. */
async function terminate(env: RouteEnv, id: string): Promise<Response> {
  await terminateResumable(env.ctx, id, env.access)
  return new Response(null, { status: 204, headers: { 'tus-resumable': TUS_VERSION } })
}

/** The routes, in the order they are tried. */
export const tusRoutes: Route[] = [
  defineRoute({ method: 'OPTIONS', path: 'attach/tus', handle: options }),
  defineRoute({ method: 'OPTIONS', path: 'attach/tus/:id', params: IdParams, handle: options }),
  defineRoute({
    method: 'POST',
    path: 'attach/tus',
    handle: tus(async (env) => {
      const r = env.request
      const length = integerHeader(r, 'upload-length')
      const deferred = r.headers.get('upload-defer-length')
      if (length === undefined && deferred !== '1') throw badRequest('Upload-Length or Upload-Defer-Length: 1 is required')
      if (length !== undefined && deferred !== null) throw badRequest('Upload-Length and Upload-Defer-Length exclude each other')
      const meta = parseMetadata(r.headers.get('upload-metadata'))
      const filename = meta.filename ?? meta.name
      if (!filename) throw badRequest('Upload-Metadata needs filename')
      if (!meta.refDomain) throw badRequest('Upload-Metadata needs refDomain')
      const contentLength = integerHeader(r, 'content-length')
      const checksum = checksumHeader(r)
      const withBytes = isOctets(r)
      if (!withBytes && r.body && contentLength !== 0) {
        // A body that is not the upload's bytes.
        if (contentLength !== undefined || r.headers.get('content-type')) throw unsupported()
      }
      let status = await createResumable(
        env.ctx,
        { length, filename, refDomain: meta.refDomain, refCategory: meta.refCategory || 'default' },
        env.access,
      )
      const location = `${env.ctx.config.apiPrefix}/attach/tus/${status.name}`
      if ((withBytes && r.body) || length === 0) {
        status = await appendResumable(
          env.ctx,
          status.name,
          { offset: 0, body: withBytes ? bodyOf(r) : null, contentLength, checksum, signal: signalOf(r) },
          env.access,
        )
      }
      const h = headersOf({ ...status, length: undefined })
      h.set('location', location)
      return new Response(null, { status: 201, headers: h })
    }),
  }),
  defineRoute({
    method: 'HEAD',
    path: 'attach/tus/:id',
    params: IdParams,
    handle: tus(async (env, id) => new Response(null, { status: 200, headers: headersOf(await resumableStatus(env.ctx, id, env.access)) })),
  }),
  defineRoute({ method: 'PATCH', path: 'attach/tus/:id', params: IdParams, handle: tus(append) }),
  defineRoute({
    method: 'POST',
    path: 'attach/tus/:id',
    params: IdParams,
    // `X-HTTP-Method-Override` (tus-js-client's `overridePatchMethod`), for networks that refuse PATCH.
    handle: tus(async (env, id) => {
      const method = env.request.headers.get('x-http-method-override')?.toUpperCase()
      if (method === 'PATCH') return append(env, id)
      if (method === 'DELETE') return terminate(env, id)
      throw noRoute()
    }),
  }),
  defineRoute({ method: 'DELETE', path: 'attach/tus/:id', params: IdParams, handle: tus(terminate) }),
]
