import type { AttachBag, AttachmentView, SaveFailure } from 'attach-storage'
import type { AttachContainer } from './container.js'

/** Where the client finds the server and how it authenticates. */
export interface ClientOptions {
  /**
   * The server's origin (`https://example.com`); relative addresses are used when empty (a page of the
   * same origin). Node needs it.
   * @default ''
   */
  baseUrl?: string
  /** @default '/api/storage' */
  apiPrefix?: string
  /** @default '/assets/storage' */
  assetsPrefix?: string
  /** The Bearer token of the JSON group, or a function answering it for each request. */
  token?: string | null | (() => string | null | undefined | Promise<string | null | undefined>)
  /** The `fetch` to use. @default globalThis.fetch */
  fetch?: typeof fetch
}

/**
 * Why a call failed. `kind` says where: `filter` (a filter of the category refused the file; `code` is the
 * filter's, e.g. `size` or `type`), `http` (the server answered 4xx/5xx `{code, message}`), `network`
 * (no answer), `aborted` (the caller aborted).
 */
export interface ClientError {
  kind: 'filter' | 'http' | 'network' | 'aborted'
  code: string
  message: string
  /** The HTTP status, for `http` and `filter`. */
  status?: number
  /** The entries that failed, on a partial failure (`attach-save-failure`). */
  failures?: SaveFailure[]
}

/** A typed result: calls never throw for what the server or the network did. */
export type Result<T> = { ok: true; value: T } | { ok: false; error: ClientError }

/** A file in the temporary area: what a confirmed save needs (`name` is its `savedName`). */
export interface TemporaryFile {
  name: string
  displayName: string
  size: number
  type: string
}

export interface UploadOptions {
  refDomain: string
  /** @default 'default' */
  refCategory?: string
  /** Per-request filters, added to the category's (`{size: {maxSize: '2MB'}}`). */
  filters?: Record<string, unknown>
  /** Called with bytes sent and the total while the body goes out (XHR in browsers). */
  onProgress?: (loaded: number, total: number) => void
  signal?: AbortSignal
  /** The file name sent, for a Blob without one. */
  fileName?: string
}

/** What a confirmed save answers. */
export interface SaveResult {
  success: true
  attachList: AttachmentView[]
}

const ok = <T>(value: T): Result<T> => ({ ok: true, value })
const fail = <T>(error: ClientError): Result<T> => ({ ok: false, error })

/** Reads an error answer (`{code, message, failures?}`) into a ClientError, whatever its body. */
export function errorFromBody(status: number, body: unknown): ClientError {
  const b = (body && typeof body === 'object' ? body : {}) as Record<string, unknown>
  const error: ClientError = {
    kind: 'http',
    status,
    code: typeof b.code === 'string' ? b.code : `http-${status}`,
    message: typeof b.message === 'string' ? b.message : `The server answered ${status}`,
  }
  if (Array.isArray(b.failures)) error.failures = b.failures as SaveFailure[]
  return error
}

/** The result of one temporary upload answer: the item, or the filter's refusal. */
export function readUploadAnswer(status: number, body: unknown): Result<TemporaryFile> {
  if (status < 200 || status > 299) return fail(errorFromBody(status, body))
  const item = (body as { files?: unknown[] } | null)?.files?.[0] as Record<string, unknown> | undefined
  if (!item) return fail({ kind: 'http', status, code: 'bad-answer', message: 'The server answered no file' })
  const error = item.error as { code?: unknown; message?: unknown } | undefined
  if (error) {
    return fail({
      kind: 'filter',
      status,
      code: typeof error.code === 'string' ? error.code : 'filter',
      message: typeof error.message === 'string' ? error.message : 'The file was refused',
    })
  }
  return ok({ name: String(item.name), displayName: String(item.displayName), size: Number(item.size), type: String(item.type) })
}

const parse = (text: string): unknown => {
  try {
    return JSON.parse(text)
  } catch {
    return null
  }
}

const abortedError = (): ClientError => ({ kind: 'aborted', code: 'aborted', message: 'The upload was aborted' })

/** The client of attach-storage's JSON and binary groups. */
export class AttachClient {
  readonly #o: Required<Omit<ClientOptions, 'token' | 'fetch'>> & Pick<ClientOptions, 'token' | 'fetch'>

  constructor(options: ClientOptions = {}) {
    this.#o = {
      baseUrl: (options.baseUrl ?? '').replace(/\/$/, ''),
      apiPrefix: options.apiPrefix ?? '/api/storage',
      assetsPrefix: options.assetsPrefix ?? '/assets/storage',
      token: options.token,
      fetch: options.fetch,
    }
  }

  /** The address of a JSON-group path. */
  api(path: string): string {
    return `${this.#o.baseUrl}${this.#o.apiPrefix}${path}`
  }

  /** The address of a binary-group path. */
  assets(path: string): string {
    return `${this.#o.baseUrl}${this.#o.assetsPrefix}${path}`
  }

  /** The view (or download) address of a saved attachment, resized when `w` or `h` is given. */
  viewUrl(id: number, options: { w?: number; h?: number; download?: boolean } = {}): string {
    const q = new URLSearchParams()
    if (options.w) q.set('w', String(options.w))
    if (options.h) q.set('h', String(options.h))
    const query = q.size ? `?${q}` : ''
    return this.assets(`/attach/${options.download ? 'download' : 'view'}/${id}${query}`)
  }

  /** The preview address of a temporary file. */
  temporaryUrl(refDomain: string, refCategory: string, name: string): string {
    return this.assets(`/attach-temp/view/${enc(refDomain)}/${enc(refCategory)}/${enc(name)}`)
  }

  async #headers(json: boolean): Promise<Record<string, string>> {
    const t = this.#o.token
    const token = typeof t === 'function' ? await t() : t
    const h: Record<string, string> = {}
    if (token) h.authorization = `Bearer ${token}`
    if (json) h['content-type'] = 'application/json'
    return h
  }

  async #request<T>(method: string, url: string, body?: unknown, signal?: AbortSignal): Promise<Result<T>> {
    const f = this.#o.fetch ?? globalThis.fetch
    let res: Response
    try {
      res = await f(url, {
        method,
        headers: await this.#headers(body !== undefined),
        body: body === undefined ? undefined : JSON.stringify(body),
        signal,
      })
    } catch (err) {
      if (signal?.aborted) return fail(abortedError())
      return fail({ kind: 'network', code: 'network', message: (err as Error).message })
    }
    const data = parse(await res.text())
    return res.ok ? ok(data as T) : fail(errorFromBody(res.status, data))
  }

  /**
   * Sends one file to the temporary area. With `onProgress` in a browser it goes through XHR (upload
   * progress events); otherwise through `fetch`. A filter's refusal is a failed result of kind `filter`.
   */
  async upload(file: Blob, options: UploadOptions): Promise<Result<TemporaryFile>> {
    const form = new FormData()
    form.append('refDomain', options.refDomain)
    form.append('refCategory', options.refCategory ?? 'default')
    if (options.filters) form.append('filters', JSON.stringify(options.filters))
    const name = options.fileName ?? (file as File).name ?? 'file'
    form.append('file', file, name)
    const url = this.api('/attach/tmp')
    const headers = await this.#headers(false)
    if (options.signal?.aborted) return fail(abortedError())
    if (options.onProgress && typeof XMLHttpRequest !== 'undefined') return xhrUpload(url, headers, form, file.size, options)
    const res = await this.#requestForm(url, headers, form, options.signal)
    if (res.ok) options.onProgress?.(file.size, file.size)
    return res.ok ? readUploadAnswer(res.value.status, res.value.body) : res
  }

  async #requestForm(
    url: string,
    headers: Record<string, string>,
    form: FormData,
    signal?: AbortSignal,
  ): Promise<Result<{ status: number; body: unknown }>> {
    try {
      const res = await (this.#o.fetch ?? globalThis.fetch)(url, { method: 'POST', headers, body: form, signal })
      return ok({ status: res.status, body: parse(await res.text()) })
    } catch (err) {
      if (signal?.aborted) return fail(abortedError())
      return fail({ kind: 'network', code: 'network', message: (err as Error).message })
    }
  }

  /** Confirmed save of an `attachContainer` for a reference (`POST attach/{refDomain}/{refKey}`). */
  save(refDomain: string, refKey: string | number, bag: AttachContainer, signal?: AbortSignal): Promise<Result<SaveResult>> {
    return this.#request('POST', this.api(`/attach/${enc(refDomain)}/${enc(String(refKey))}`), bag, signal)
  }

  /** The AttachBag of a reference, every category or one. */
  lookup(refDomain: string, refKey: string | number, refCategory?: string): Promise<Result<AttachBag>> {
    const path = `/attach/${enc(refDomain)}/${enc(String(refKey))}${refCategory ? `/${enc(refCategory)}` : ''}`
    return this.#request('GET', this.api(path))
  }

  /** Deletes saved attachments for good (records and files). */
  delete(records: Array<{ id: number }>): Promise<Result<{ success: true; count: number }>> {
    return this.#request(
      'POST',
      this.api('/attach'),
      records.map((r) => ({ id: r.id })),
    )
  }

  /** A ZIP of several attachments, as a Blob and its file name. */
  async zip(ids: number[], title?: string): Promise<Result<{ blob: Blob; fileName: string }>> {
    try {
      const res = await (this.#o.fetch ?? globalThis.fetch)(this.assets('/attach/download'), {
        method: 'POST',
        headers: await this.#headers(true),
        body: JSON.stringify(title ? { ids, title } : { ids }),
      })
      if (!res.ok) return fail(errorFromBody(res.status, parse(await res.text())))
      const cd = res.headers.get('content-disposition') ?? ''
      const m = /filename\*=UTF-8''([^;]+)/i.exec(cd) ?? /filename="?([^";]+)"?/i.exec(cd)
      return ok({ blob: await res.blob(), fileName: m?.[1] ? decodeURIComponent(m[1]) : 'attachments.zip' })
    } catch (err) {
      return fail({ kind: 'network', code: 'network', message: (err as Error).message })
    }
  }
}

const enc = encodeURIComponent

function xhrUpload(
  url: string,
  headers: Record<string, string>,
  form: FormData,
  size: number,
  options: UploadOptions,
): Promise<Result<TemporaryFile>> {
  return new Promise((resolve) => {
    const xhr = new XMLHttpRequest()
    xhr.open('POST', url)
    for (const [k, v] of Object.entries(headers)) xhr.setRequestHeader(k, v)
    xhr.upload.onprogress = (e) => options.onProgress?.(e.loaded, e.lengthComputable ? e.total : size)
    const onAbort = () => xhr.abort()
    options.signal?.addEventListener('abort', onAbort, { once: true })
    const done = (r: Result<TemporaryFile>) => {
      options.signal?.removeEventListener('abort', onAbort)
      resolve(r)
    }
    xhr.onload = () => {
      const r = readUploadAnswer(xhr.status, parse(xhr.responseText))
      if (r.ok) options.onProgress?.(size, size)
      done(r)
    }
    xhr.onerror = () => done(fail({ kind: 'network', code: 'network', message: 'The upload failed: no answer from the server' }))
    xhr.onabort = () => done(fail(abortedError()))
    xhr.send(form)
  })
}
