/**
 * Shared set-up of the handler tests: a service on a real database (SQLite file or PostgreSQL) and a
 * real local store in a temp directory, the reference domains, and token helpers. Test-only.
 */
import type { Dirent } from 'node:fs'
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join, relative } from 'node:path'
import { SignJWT } from 'jose'
import { openTestDatabase, type TestDialect } from '../../../../test/databases.js'
import { createAttachStorage, type AttachStorage, type AttachStorageOptions } from '../service/attach-storage.js'
import { bearerToken, createJwtVerifier } from '../service/auth.js'
import type { FileDescription, Logger } from '../service/types.js'
import { createAttachHandler, type AttachHandler } from '../http/handler.js'
import { openApiDocument } from '../http/openapi.js'
import { answerChecker, checkAnswer } from '../http/openapi-check.js'

export const SECRET = 'test-secret-of-at-least-16-bytes'

export async function token(sub: string, options: { secret?: string; exp?: string | number } = {}): Promise<string> {
  return new SignJWT({})
    .setProtectedHeader({ alg: 'HS256' })
    .setSubject(sub)
    .setIssuedAt()
    .setExpirationTime(options.exp ?? '1h')
    .sign(new TextEncoder().encode(options.secret ?? SECRET))
}

export interface Kit {
  storage: AttachStorage
  handler: AttachHandler
  /** Where the database is: the SQLite file, or the PostgreSQL / MySQL URL. */
  dbLocation: string
  dir: string
  baseDir: string
  tmpDir: string
  warnings: string[]
  /** Every file under a directory, as relative paths, once every variant already answered is written. */
  files(dir?: string): Promise<string[]>
  call(path: string, init?: RequestInit & { user?: string | null }): Promise<Response>
  upload(path: string, parts: Array<[string, string | Blob, string?]>, user?: string | null): Promise<Response>
  cleanup(): Promise<void>
}

export async function makeKit(
  dialect: TestDialect = 'sqlite',
  overrides: Partial<AttachStorageOptions> & { config?: Record<string, unknown> } = {},
): Promise<Kit> {
  const dir = await mkdtemp(join(tmpdir(), 'attach-kit-'))
  const baseDir = join(dir, 'files')
  const tmpDir = join(dir, 'tmp')
  const t = await openTestDatabase(dialect)
  const warnings: string[] = []
  const logger: Logger = {
    info: () => {},
    warn: (m: string) => warnings.push(m),
    error: (m: string) => warnings.push(m),
  }
  const verify = createJwtVerifier({ secret: SECRET })
  const privateAccess = async (request: Request, file: FileDescription) => {
    const user = await verify(bearerToken(request) ?? new URL(request.url).searchParams.get('access_token') ?? undefined)
    if (!user) return false
    return file.id === null || String(file.createdBy) === String(user.id)
  }
  let storage: AttachStorage
  try {
    storage = await createAttachStorage({
      db: t.db,
      jwt: { secret: SECRET },
      logger,
      ...overrides,
      config: {
        directory: { baseDir, tmpDir },
        domains: {
          demo: { categories: { default: {}, image: { filters: ['image'] }, private: {} } },
          board: { categories: { default: {}, image: { filters: ['image'] } } },
        },
        ...overrides.config,
      },
      registrar: async (registry, s) => {
        registry.registerCategory('demo', 'private', { secureAccess: privateAccess })
        registry.registerCategory('demo', 'throws', {
          secureAccess: () => {
            throw new Error('boom')
          },
        })
        await overrides.registrar?.(registry, s)
      },
    })
  } catch (err) {
    // A configuration the test expects to be refused leaves no database or directory behind.
    await t.cleanup()
    await rm(dir, { recursive: true, force: true })
    throw err
  }
  const handler = createAttachHandler(storage)
  // Every JSON answer the kit gets is checked against the OpenAPI document (a mismatch fails the test).
  const checker = answerChecker(openApiDocument(storage.config))
  const send = async (request: Request) => checkAnswer(checker, request, await handler.fetch(request))
  const auth = async (user: string | null | undefined): Promise<Record<string, string>> =>
    user === null ? {} : { authorization: `Bearer ${await token(user ?? '7')}` }
  const kit: Kit = {
    storage,
    handler,
    dbLocation: t.location,
    dir,
    baseDir,
    tmpDir,
    warnings,
    async files(d = baseDir) {
      await storage.resizer.settled()
      const out: string[] = []
      const walk = async (p: string) => {
        let entries: Dirent[]
        try {
          entries = await readdir(p, { withFileTypes: true })
        } catch {
          return
        }
        for (const e of entries) {
          if (e.isDirectory()) await walk(join(p, e.name))
          else out.push(relative(d, join(p, e.name)))
        }
      }
      await walk(d)
      return out.sort()
    },
    async call(path, init = {}) {
      const { user, ...rest } = init
      const headers = new Headers(rest.headers)
      for (const [k, v] of Object.entries(await auth(user))) if (!headers.has(k)) headers.set(k, v)
      if (typeof rest.body === 'string' && !headers.has('content-type')) headers.set('content-type', 'application/json')
      return send(new Request(`http://x${path}`, { ...rest, headers }))
    },
    async upload(path, parts, user) {
      const fd = new FormData()
      for (const [k, v, name] of parts) {
        if (typeof v === 'string') fd.append(k, v)
        else fd.append(k, v, name ?? 'file.bin')
      }
      // The multipart body as the bytes a client sends. A Request made from the FormData itself streams
      // it from undici's serializer, whose producer on Node 24 keeps enqueueing after the handler stopped
      // reading (a 413) and rejects unhandled with "ReadableStream is already closed".
      const form = new Response(fd)
      const headers = new Headers(await auth(user))
      headers.set('content-type', form.headers.get('content-type')!)
      return send(new Request(`http://x${path}`, { method: 'POST', body: await form.blob(), headers }))
    },
    async cleanup() {
      await storage.close()
      await t.cleanup()
      await rm(dir, { recursive: true, force: true })
    },
  }
  return kit
}

/** A tiny valid PNG of the given size. */
export async function png(width = 4, height = 3): Promise<Blob> {
  const sharp = (await import('sharp')).default
  const buf = await sharp({ create: { width, height, channels: 3, background: { r: 200, g: 10, b: 10 } } })
    .png()
    .toBuffer()
  return new Blob([new Uint8Array(buf)], { type: 'image/png' })
}

/** A valid JPEG of the given size, with an EXIF `orientation` when one is given. */
export async function jpeg(width: number, height: number, orientation?: number): Promise<Blob> {
  const sharp = (await import('sharp')).default
  let img = sharp({ create: { width, height, channels: 3, background: { r: 10, g: 120, b: 200 } } }).jpeg()
  if (orientation) img = img.withMetadata({ orientation })
  return new Blob([new Uint8Array(await img.toBuffer())], { type: 'image/jpeg' })
}

/** Temporary upload then confirmed save of one file into `demo/{refKey}/{refCategory}`; answers its record. */
export async function saveFile(kit: Kit, blob: Blob, name: string, refKey: string, refCategory = 'default'): Promise<any> {
  const up = await kit.upload('/api/storage/attach/tmp', [
    ['refDomain', 'demo'],
    ['refCategory', refCategory],
    ['file', blob, name],
  ])
  const item = (await up.json()).files[0]
  if (!item?.name) throw new Error(`temporary upload failed: ${JSON.stringify(item)}`)
  const res = await kit.call(`/api/storage/attach/demo/${refKey}`, {
    method: 'POST',
    body: JSON.stringify({ [refCategory]: [{ savedName: item.name, displayName: name }] }),
  })
  if (res.status !== 200) throw new Error(`confirmed save answered ${res.status}: ${await res.text()}`)
  const list = (await res.json()).attachList
  return list[list.length - 1]
}

/**
 * A tus upload of `bytes` in one PATCH into `demo/{refCategory}`: the creation (expected 201) and the
 * PATCH's answer, and the upload's address (its last segment is the temporary name a save takes).
 */
export async function tusInOnePatch(
  kit: Kit,
  bytes: Uint8Array<ArrayBuffer> | Uint8Array,
  fileName: string,
  refCategory: string,
): Promise<{ location: string; patched: Response }> {
  const b64 = (x: string) => Buffer.from(x).toString('base64')
  const tus = { 'tus-resumable': '1.0.0' }
  const created = await kit.call('/api/storage/attach/tus', {
    method: 'POST',
    headers: {
      ...tus,
      'upload-length': String(bytes.length),
      'upload-metadata': `filename ${b64(fileName)},refDomain ${b64('demo')},refCategory ${b64(refCategory)}`,
    },
  })
  if (created.status !== 201) throw new Error(`tus creation answered ${created.status}: ${await created.text()}`)
  const location = created.headers.get('location')!
  const patched = await kit.call(location, {
    method: 'PATCH',
    headers: { ...tus, 'content-type': 'application/offset+octet-stream', 'upload-offset': '0' },
    body: new Uint8Array(bytes),
  })
  return { location, patched }
}
