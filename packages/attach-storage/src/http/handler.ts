import { AttachStorageError, badRequest, notFound, tooLarge, unauthorized } from '../errors.js'
import type { AttachStorage } from '../service/attach-storage.js'
import type { AuthUser } from '../service/types.js'
import { listResponse } from '../list/list-query.js'
import { parseResizeRequest } from '../media/resize.js'
import { receiveMultipart } from './multipart.js'
import { streamResponse } from './node-body.js'
import { contentDisposition, serveFile } from './serve.js'

/** The JSON body limit of the JSON group (AttachBags, record lists). */
const JSON_LIMIT = 2 * 1024 * 1024

/** A Web-standard handler: `(request) => Promise<Response>`. */
export type FetchHandler = (request: Request) => Promise<Response>

/** The handlers of both route groups. */
export interface AttachHandler {
  /** Serves the JSON group (`api-prefix`). */
  api: FetchHandler
  /** Serves the binary group (`assets-prefix`). */
  assets: FetchHandler
  /** Serves both groups, dispatching on the prefix; other paths answer 404. */
  fetch: FetchHandler
  /** True when the path lies under one of the two prefixes. */
  matches(pathname: string): boolean
}

export function json(body: unknown, status = 200, headers?: HeadersInit): Response {
  const h = new Headers(headers)
  h.set('content-type', 'application/json; charset=utf-8')
  h.set('cache-control', 'no-store')
  h.set('x-content-type-options', 'nosniff')
  return new Response(JSON.stringify(body), { status, headers: h })
}

/** Turns any error into its JSON answer; unexpected errors become a bare 500 (logged, never a stack). */
export function errorResponse(err: unknown, storage: AttachStorage): Response {
  if (err instanceof AttachStorageError) {
    // A refusal for load (503 `busy`, with Retry-After) is the bound working, not a fault: answered as it is.
    if (err.code === 'busy') return err.toResponse()
    if (err.status >= 500 && err.code !== 'attach-save-failure') {
      // Server-side detail (store names, keys, hosts) goes to the log, not to the client.
      storage.logger.error('attach-storage:', err)
      const message = err.status === 503 ? 'The service is not ready' : 'The storage backend failed; try again later'
      return new AttachStorageError(err.code, message, { status: err.status, headers: err.headers }).toResponse()
    }
    return err.toResponse()
  }
  storage.logger.error('attach-storage: unexpected error', err)
  return new AttachStorageError('internal-error', 'An internal error occurred', { status: 500 }).toResponse()
}

/** Reads a JSON body of at most `limit` bytes; 400 when malformed, 413 when larger. */
export async function readJson(request: Request, limit = JSON_LIMIT): Promise<unknown> {
  const ct = request.headers.get('content-type') ?? ''
  if (ct && !/^application\/([a-z.+-]*\+)?json\b/i.test(ct)) throw badRequest('The body must be application/json')
  const declared = Number(request.headers.get('content-length') ?? NaN)
  if (Number.isFinite(declared) && declared > limit) throw tooLarge(`JSON bodies are limited to ${limit} bytes`)
  if (!request.body) throw badRequest('A JSON body is required')
  const chunks: Uint8Array[] = []
  let size = 0
  const reader = request.body.getReader()
  for (;;) {
    const { done, value } = await reader.read()
    if (done) break
    size += value.byteLength
    if (size > limit) {
      await reader.cancel().catch(() => undefined)
      throw tooLarge(`JSON bodies are limited to ${limit} bytes`)
    }
    chunks.push(value)
  }
  const text = Buffer.concat(chunks).toString('utf8')
  try {
    return JSON.parse(text)
  } catch {
    throw badRequest('The body is not valid JSON')
  }
}

function segments(pathname: string, prefix: string): string[] | undefined {
  if (pathname !== prefix && !pathname.startsWith(prefix + '/')) return undefined
  const rest = pathname.slice(prefix.length)
  const parts = rest.split('/').slice(1)
  try {
    return parts.map((p) => decodeURIComponent(p))
  } catch {
    throw badRequest('The path is not valid percent-encoding')
  }
}

const ACTIONS = new Set(['view', 'download'])

/** A JavaScript string literal safe inside an HTML <script> element. */
function scriptString(value: string): string {
  // JSON escapes quotes and backslashes; these would end the script element or the line.
  return JSON.stringify(value).replace(/[<>&'\u2028\u2029]/g, (c) => '\\u' + c.charCodeAt(0).toString(16).padStart(4, '0'))
}

function action(a: string | undefined): 'view' | 'download' {
  if (!a || !ACTIONS.has(a)) throw notFound('No such route')
  return a as 'view' | 'download'
}

function index(s: string | undefined, name: string): number {
  if (s === undefined) return 0
  if (!/^\d{1,9}$/.test(s)) throw badRequest(`${name} must be a non-negative integer`)
  return Number(s)
}

function lookupFilters(url: URL) {
  const get = (k: string) => url.searchParams.get(k) ?? undefined
  return { ext: get('ext'), extAlt: get('extAlt'), fmetaValue: get('fmetaValue') }
}

const list = (s: string | null) =>
  s === null || s === '' ? undefined : s.split(',').map((x) => x.trim()).filter((x) => x !== '')

/**
 * Builds the Web-standard handlers of a service. Mount `api` under `api-prefix` and `assets` under
 * `assets-prefix` (the adapters do), or route everything through `fetch`.
 */
export function createAttachHandler(storage: AttachStorage): AttachHandler {
  const { apiPrefix, assetsPrefix } = storage.config

  async function authenticate(request: Request): Promise<AuthUser> {
    if (!storage.authenticate) throw unauthorized('No authenticator is configured for the JSON group')
    let user: AuthUser | null = null
    try {
      user = await storage.authenticate(request)
    } catch {
      user = null
    }
    if (!user) throw unauthorized('A valid Bearer token is required')
    return user
  }

  async function api(request: Request): Promise<Response> {
    try {
      if (!storage.config.enabled) throw notFound('Attachment storage is disabled')
      const url = new URL(request.url)
      const seg = segments(url.pathname, apiPrefix)
      if (!seg) throw notFound('No such route')
      const method = request.method
      const user = await authenticate(request)
      const [head, ...rest] = seg

      if (head === 'config' && rest.length === 0 && method === 'GET') return json(storage.describe())
      if (head === 'direct-url' && rest.length === 0 && method === 'POST') {
        const body = await readJson(request)
        if (!body || typeof body !== 'object') throw badRequest('The body must be a JSON object')
        return json(await storage.directUrl(body as { refDomain: unknown; refKey: unknown }, request))
      }
      if (head === 'ckupload' && rest.length === 1 && (rest[0] === 'dnd' || rest[0] === 'modal') && method === 'POST') {
        return await editorUpload(request, url, rest[0], user)
      }
      if (head !== 'attach') throw notFound('No such route')

      // POST /attach/tmp, POST /attach/direct
      if (method === 'POST' && rest.length === 1 && (rest[0] === 'tmp' || rest[0] === 'direct')) {
        const direct = rest[0] === 'direct'
        const fileFields = direct ? ['files', 'file', 'fileMap'] : ['file', 'fileMap']
        const upload = await receiveMultipart(request, storage, { fileFields })
        const files = upload.files.map((f) => f.file)
        if (files.length === 0) throw badRequest(`No file was sent (multipart part ${fileFields.join(' or ')})`, 'no-file')
        const input = {
          refDomain: upload.fields.refDomain,
          refCategory: upload.fields.refCategory,
          filters: upload.fields.filters,
          user,
        }
        if (direct) return json({ files: await storage.completeDirectUpload(files, input) })
        const items = await storage.completeTemporaryUpload(files, input)
        const key = upload.fields.resultKey && /^[A-Za-z_$][\w$]{0,63}$/.test(upload.fields.resultKey) ? upload.fields.resultKey : 'files'
        return json({ [key]: items })
      }
      // GET /attach?refDomain=&refKeyList=&refCategoryList=
      if (rest.length === 0 && method === 'GET') {
        const refDomain = url.searchParams.get('refDomain')
        if (!refDomain) throw badRequest('refDomain is required')
        const keys = list(url.searchParams.get('refKeyList'))
        if (!keys) throw badRequest('refKeyList is required')
        if (keys.length > 1000) throw badRequest('refKeyList may name at most 1000 keys')
        const result = await storage.listByReferences(refDomain, keys, list(url.searchParams.get('refCategoryList')), url.searchParams, request)
        return listResponse(result)
      }
      // POST /attach (permanent delete)
      if (rest.length === 0 && method === 'POST') {
        const count = await storage.remove(request, await readJson(request), user)
        return json({ success: true, count })
      }
      // PUT /attach/ (metadata update; the trailing slash is required)
      if (rest.length === 1 && rest[0] === '' && method === 'PUT') {
        const count = await storage.update(request, await readJson(request), user)
        return json({ success: true, count })
      }
      // POST /attach/{refDomain}/{refKey} (confirmed save)
      if (rest.length === 2 && method === 'POST') {
        const [refDomain, refKey] = rest as [string, string]
        storage.registry.domain(refDomain)
        const attachList = await storage.commitBag(refDomain, refKey, await readJson(request), { user, request })
        return json({ success: true, attachList })
      }
      if (method === 'GET' && rest.length >= 2 && rest.length <= 4 && !rest.includes('')) {
        const [refDomain, refKey, refCategory, tail] = rest as [string, string, string?, string?]
        if (rest.length === 4) {
          if (tail !== '_count') throw notFound('No such route')
          return json(await storage.count(refDomain, refKey, refCategory!, request))
        }
        if (rest.length <= 3) return json(await storage.lookup(refDomain, refKey, refCategory, lookupFilters(url), request))
      }
      throw notFound('No such route')
    } catch (err) {
      return errorResponse(err, storage)
    }
  }

  /** CKEditor 4 / 5 uploads: part `upload`, a direct upload into domain `editor`. */
  async function editorUpload(request: Request, url: URL, kind: 'dnd' | 'modal', user: AuthUser): Promise<Response> {
    let funcNum: string | null = null
    if (kind === 'modal') {
      funcNum = url.searchParams.get('CKEditorFuncNum')
      if (funcNum !== null && !/^\d{1,10}$/.test(funcNum)) throw badRequest('CKEditorFuncNum must be digits')
    }
    const upload = await receiveMultipart(request, storage, { fileFields: ['upload'] })
    if (kind === 'modal') {
      funcNum ??= upload.fields.CKEditorFuncNum ?? null
      if (funcNum === null || !/^\d{1,10}$/.test(funcNum)) {
        await storage.discardReceived(upload.files.map((f) => f.file))
        throw badRequest('CKEditorFuncNum must be digits')
      }
    }
    const files = upload.files.map((f) => f.file)
    if (files.length !== 1) {
      await storage.discardReceived(files)
      throw badRequest('Send exactly one file as the multipart part "upload"', 'no-file')
    }
    const [item] = await storage.completeEditorUpload(files, { user })
    const ok = item && 'url' in item ? item : undefined
    const message = item && 'error' in item ? item.error.message : ''
    if (kind === 'dnd') {
      return json(ok ? { uploaded: 1, fileName: ok.displayName, url: ok.url } : { uploaded: 0, error: { message } })
    }
    const call = `window.parent.CKEDITOR.tools.callFunction(${funcNum}, ${scriptString(ok?.url ?? '')}, ${scriptString(message)});`
    return new Response(`<!DOCTYPE html><html><body><script>${call}</script></body></html>`, {
      headers: {
        'content-type': 'text/html; charset=utf-8',
        'x-content-type-options': 'nosniff',
        'cache-control': 'no-store',
      },
    })
  }

  async function zipDownload(request: Request): Promise<Response> {
    const { fileName, stream } = await storage.zip(request, await readJson(request))
    request.signal?.addEventListener('abort', () => stream.destroy(), { once: true })
    return streamResponse(stream, {
      headers: {
        'content-type': 'application/zip',
        'content-disposition': contentDisposition('attachment', fileName),
        'x-content-type-options': 'nosniff',
        'cache-control': 'no-store',
      },
    })
  }

  async function assets(request: Request): Promise<Response> {
    try {
      if (!storage.config.enabled) throw notFound('Attachment storage is disabled')
      const url = new URL(request.url)
      const seg = segments(url.pathname, assetsPrefix)
      if (!seg) throw notFound('No such route')
      const [group, act, ...rest] = seg
      if (request.method === 'POST' && group === 'attach' && act === 'download' && rest.length === 0) {
        return await zipDownload(request)
      }
      if (request.method !== 'GET' && request.method !== 'HEAD') throw notFound('No such route')
      if (group === 'editor' && act === 'image') {
        return await serveFile(request, await storage.resolveEditorImage(request, rest), 'view')
      }
      if (group === 'attach') {
        const a = action(act)
        const resize = parseResizeRequest(url, request.headers.get('accept'))
        if (rest.length === 1 && /^\d{1,15}$/.test(rest[0]!)) {
          return await serveFile(request, await storage.resolveById(request, Number(rest[0]), resize), a)
        }
        if (rest.length === 3 || rest.length === 4) {
          const [refDomain, refKey, refCategory, idx] = rest as [string, string, string, string?]
          const target = await storage.resolveByReference(
            request,
            { refDomain, refKey, refCategory, idx: index(idx, 'idx') },
            lookupFilters(url),
            resize,
          )
          return await serveFile(request, target, a)
        }
      }
      if (group === 'attach-temp' && rest.length === 3) {
        const [refDomain, refCategory, savedName] = rest as [string, string, string]
        return await serveFile(request, await storage.resolveTemporary(request, refDomain, refCategory, savedName), action(act))
      }
      if (group === 'attach-direct' && rest.length === 2) {
        const [refDomain, refCategory] = rest as [string, string]
        const target = await storage.resolveDirect(request, refDomain, refCategory, url.searchParams.get('path'))
        return await serveFile(request, target, action(act))
      }
      throw notFound('No such route')
    } catch (err) {
      return errorResponse(err, storage)
    }
  }

  const under = (pathname: string, prefix: string) => pathname === prefix || pathname.startsWith(prefix + '/')

  return {
    api,
    assets,
    matches: (pathname) => under(pathname, apiPrefix) || under(pathname, assetsPrefix),
    async fetch(request) {
      const { pathname } = new URL(request.url)
      if (under(pathname, apiPrefix)) return api(request)
      if (under(pathname, assetsPrefix)) return assets(request)
      return errorResponse(notFound('No such route'), storage)
    },
  }
}
