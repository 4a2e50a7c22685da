import { createHmac } from 'node:crypto'
import { join, resolve } from 'node:path'
import type { Kysely } from 'kysely'
import {
  accessOf,
  AttachStorageError,
  bearerToken,
  createAttachHandler,
  createAttachStorage,
  createHealthHandlers,
  createJwtVerifier,
  openDatabase,
  readJson,
  type AttachHandler,
  type AttachStorage,
  type AuthUser,
  type HealthHandlers,
  type FileDescription,
  type Logger,
} from 'attach-storage'
import { loadConfigFile, mergeSettings } from 'attach-storage/config'
import { type ListeningServer, serveViewsFirst } from 'attach-storage/node'
import { listResponse, parseListRequest, runList, type ListProvider } from 'attach-storage/list'
import { createPrometheusMetrics } from 'attach-storage/metrics'
import { collectDefaultMetrics } from 'prom-client'
import { openApiRoutes } from './openapi.js'
import { createPage, signDevToken } from './page.js'

/** The reference server's environment (see shared contract). */
export interface ServerEnv {
  PORT?: string
  /** pino's level when run as a server (run-server.ts). @default 'info' */
  LOG_LEVEL?: string
  ATTACH_DATA_DIR?: string
  ATTACH_JWT_SECRET?: string
  ATTACH_CDN_URL?: string
  ATTACH_MAX_FILE_SIZE?: string
  ATTACH_CORS_ORIGINS?: string
  ATTACH_DATABASE_URL?: string
  ATTACH_CONFIG?: string
  ATTACH_SIGNING_SECRET?: string
  /** clamd's address (`tcp://host:port` or `unix:/path`): uploads into `demo/scanned` are scanned (docs/scanning.md). */
  ATTACH_CLAMD?: string
  /**
   * `off`: views by id go through the framework like every other request, instead of being answered at
   * the `node:http` level before it (`serveViewsFirst`, docs/serving.md). For comparisons (the bench).
   * @default 'on'
   */
  ATTACH_VIEWS_FIRST?: string
  [key: string]: string | undefined
}

export const DEV_SECRET = 'attach-storage-development-secret-change-me'

/** CORS settings from ATTACH_CORS_ORIGINS, for the framework's own CORS middleware. */
export interface CorsSettings {
  origins: string[] | '*'
  allowHeaders: string[]
  allowMethods: string[]
  exposeHeaders: string[]
  maxAge: number
}

/**
 * The reference server without a framework: the storage and its Web handlers, the `board` entity's
 * routes as `(request) => Promise<Response>`, and the CORS settings. Each example app mounts these.
 */
export interface Reference {
  storage: AttachStorage
  /** The JSON and binary groups. */
  attach: AttachHandler
  db: Kysely<any>
  /** POST /board */
  createBoard(request: Request): Promise<Response>
  /** GET /board/:id */
  getBoard(request: Request, id: string): Promise<Response>
  /** GET /board: the spec's list and pagination convention. */
  listBoard(request: Request): Promise<Response>
  /** GET {api-prefix}/openapi.json: attach-storage's document with the board paths (no authentication). */
  openapi(request: Request): Promise<Response>
  /** GET {api-prefix}/docs and {api-prefix}/docs/*: the document's page and its files (no authentication). */
  docs(request: Request): Promise<Response>
  /** PUT /board/:id: the author changes the title, body and attachments (`attachContainer`). */
  updateBoard(request: Request, id: string): Promise<Response>
  /** DELETE /board/:id: the author deletes the post and its attachments. */
  deleteBoard(request: Request, id: string): Promise<Response>
  /** GET / and GET /page/*: the board page (src/page.ts). */
  page(request: Request): Promise<Response>
  /** CORS settings, or undefined when ATTACH_CORS_ORIGINS is unset. */
  cors: CorsSettings | undefined
  /**
   * Views by id answered before the framework on its Node server (`serveViewsFirst` of
   * `attach-storage/node`, with the CORS settings above), unless ATTACH_VIEWS_FIRST is `off`. Each
   * app's server calls it once the framework has made its server.
   */
  viewsFirst(server: ListeningServer): void
  /** GET /healthz and GET /readyz, without authentication (docs/operations.md). */
  health: HealthHandlers
  /** GET /metrics: Prometheus's text format, without authentication. */
  metrics(): Promise<Response>
  /** The JSON 404 answered for unknown routes. */
  notFound(): Response
  close(): Promise<void>
}

/** The request headers of tus 1.0 a browser must be allowed to send (docs/resumable.md). */
export const TUS_REQUEST_HEADERS = [
  'Tus-Resumable',
  'Upload-Length',
  'Upload-Defer-Length',
  'Upload-Metadata',
  'Upload-Offset',
  'Upload-Concat',
  'Upload-Checksum',
  'X-HTTP-Method-Override',
  'X-Requested-With',
]

/** The response headers of tus 1.0 a browser client must be able to read. */
export const TUS_RESPONSE_HEADERS = [
  'Location',
  'Tus-Resumable',
  'Tus-Version',
  'Tus-Extension',
  'Tus-Max-Size',
  'Tus-Checksum-Algorithm',
  'Upload-Offset',
  'Upload-Length',
  'Upload-Defer-Length',
  'Upload-Expires',
  'Upload-Metadata',
]

/** The largest JSON body the board routes read, like the JSON group's. */
const BOARD_JSON_LIMIT = 2 * 1024 * 1024
/** The longest post text (characters). */
const BOARD_TEXT_MAX = 1024 * 1024

const json = (body: unknown, status = 200) =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json; charset=utf-8' } })

/** The SQL dialect of the database the reference opens. */
type Dialect = 'sqlite' | 'postgres' | 'mysql'

/** The host's own refusals, answered like attach-storage's (`{code, message}` with the status). */
const badRequest = (message: string) => new AttachStorageError('bad-request', message, { status: 400 })
const notFound = (message: string) => new AttachStorageError('not-found', message, { status: 404 })
const unauthorized = (message: string) => new AttachStorageError('unauthorized', message, { status: 401 })

/** Creates the `board` host table (the spec's list example) if it is not there. */
/**
 * Direct-to-cloud uploads (`attach/presign`) are on where the server's store is S3 or Azure: unless the
 * settings name a `presign-store`, the temporary store, else the default store, of either type becomes it.
 */
export function withPresignStore(settings: Record<string, unknown>): Record<string, unknown> {
  const pick = (camel: string, kebab: string) => settings[camel] ?? settings[kebab]
  if (pick('presignStore', 'presign-store') !== undefined) return settings
  const stores = (settings.stores ?? {}) as Record<string, { type?: unknown }>
  const cloud = [pick('tmpStore', 'tmp-store'), pick('defaultStore', 'default-store')].find(
    (name) => typeof name === 'string' && (stores[name]?.type === 's3' || stores[name]?.type === 'azure'),
  )
  return cloud === undefined ? settings : { ...settings, presignStore: cloud }
}

async function migrateBoard(db: Kysely<any>, dialect: Dialect): Promise<void> {
  await db.schema
    .createTable('board')
    .ifNotExists()
    .addColumn('id', dialect === 'postgres' ? 'bigserial' : dialect === 'mysql' ? 'bigint' : 'integer', (c) =>
      dialect === 'postgres' ? c.primaryKey() : c.primaryKey().autoIncrement(),
    )
    .addColumn('title', 'varchar(200)', (c) => c.notNull())
    .addColumn('body', 'text', (c) => c.notNull())
    .addColumn('created_by', 'varchar(255)')
    .addColumn('created_dt', 'varchar(24)', (c) => c.notNull())
    .execute()
  // MySQL 8 has no CREATE INDEX IF NOT EXISTS: there, an existing index (error 1061) is fine.
  for (const [name, columns] of [
    ['board_created_dt_idx', ['created_dt', 'id']],
    ['board_title_idx', ['title', 'id']],
  ] as const) {
    const create = db.schema
      .createIndex(name)
      .on('board')
      .columns([...columns])
    if (dialect !== 'mysql') await create.ifNotExists().execute()
    else
      await create.execute().catch((err: { errno?: number }) => {
        if (err?.errno !== 1061) throw err
      })
  }
}

/** GET /board's whitelist, sortable columns and fallback order (contract). */
export const BOARD_LIST: ListProvider = {
  fields: {
    title: { type: 'string', ops: ['eq', 'like'] },
    id: { type: 'integer', ops: ['eq', 'gt', 'lt'] },
    createdDt: { type: 'datetime', ops: ['gt', 'lt'], column: 'created_dt' },
  },
  sortable: { id: 'id', title: 'title', createdDt: 'created_dt' },
  primaryKey: 'id',
  defaultOrder: [{ column: 'id', direction: 'desc' }],
  positionIdx: true,
  maxPerPage: 1000,
}

/** A stored user id as answered: a decimal integer as a number (as attach-storage answers `createdBy`). */
const userId = (id: string): number | string => (/^(0|[1-9]\d{0,15})$/.test(id) && Number.isSafeInteger(Number(id)) ? Number(id) : id)

const boardRow = (r: Record<string, unknown>) => ({
  id: Number(r.id),
  title: r.title as string,
  body: r.body as string,
  createdBy: r.created_by === null ? null : userId(String(r.created_by)),
  createdDt: r.created_dt as string,
})

/** Builds the reference server of the contract from its environment. */
export async function createReference(env: ServerEnv = process.env, logger: Logger = console): Promise<Reference> {
  // Checked before anything opens, so a typo costs no clean-up.
  const viewsFirst = env.ATTACH_VIEWS_FIRST ?? 'on'
  if (viewsFirst !== 'on' && viewsFirst !== 'off')
    throw new Error(`ATTACH_VIEWS_FIRST must be on or off, not ${JSON.stringify(viewsFirst)}`)
  const dataDir = resolve(env.ATTACH_DATA_DIR ?? './.data')
  const secret = env.ATTACH_JWT_SECRET ?? DEV_SECRET
  if (!env.ATTACH_JWT_SECRET) logger.warn('ATTACH_JWT_SECRET is not set: using the development secret; never do this in production')
  const verify = createJwtVerifier({ secret })
  const authenticate = (request: Request) => verify(bearerToken(request))

  // The `private` category: a valid token (header or access_token query parameter); for a saved file,
  // the token's user must be the one who created it.
  const privateAccess = async (request: Request, file: FileDescription) => {
    const token = bearerToken(request) ?? new URL(request.url).searchParams.get('access_token') ?? undefined
    const user = await verify(token)
    if (!user) return false
    return file.id === null || String(file.createdBy) === String(user.id)
  }

  let settings: Record<string, unknown> = {
    directory: { baseDir: join(dataDir, 'files'), tmpDir: join(dataDir, 'tmp') },
    db: { type: 'sqlite', file: join(dataDir, 'attach.db') },
    upload: { maxFileSize: env.ATTACH_MAX_FILE_SIZE ? Number(env.ATTACH_MAX_FILE_SIZE) : 104857600 },
    // Resumable uploads (tus 1.0) at /api/storage/attach/tus.
    resumable: { enabled: true },
    domains: {
      demo: {
        categories: {
          default: {},
          image: { filters: ['image'] },
          private: {},
          // With ATTACH_CLAMD, uploads into demo/scanned are scanned by clamd first (docs/scanning.md).
          ...(env.ATTACH_CLAMD ? { scanned: { scan: { clamd: env.ATTACH_CLAMD } } } : {}),
        },
      },
      // Each board image gets a 320-pixel WebP thumbnail and two widths for the page's srcset, made in the
      // background after its save (docs/variants.md; records answer their boxes, which the page's srcset reads).
      board: {
        categories: {
          default: {},
          image: { filters: ['image'], variants: { thumb: { w: 320, h: 320, format: 'webp' }, medium: { w: 960 }, large: { w: 1920 } } },
        },
      },
    },
  }
  if (env.ATTACH_CDN_URL) settings.cdnUrl = env.ATTACH_CDN_URL
  // Signed view URLs of guarded files: their own secret, or one derived from the JWT secret.
  let signingSecret = env.ATTACH_SIGNING_SECRET
  if (!signingSecret) {
    logger.warn('ATTACH_SIGNING_SECRET is not set: signed view URLs use a secret derived from ATTACH_JWT_SECRET')
    signingSecret = createHmac('sha256', secret).update('attach-storage signed view URLs').digest('base64url')
  }
  settings.signing = { secret: signingSecret }
  if (env.ATTACH_CONFIG) settings = withPresignStore(mergeSettings(settings, await loadConfigFile(env.ATTACH_CONFIG)))
  const dbUrl = env.ATTACH_DATABASE_URL
  const dialect: Dialect = !dbUrl ? 'sqlite' : dbUrl.startsWith('mysql') ? 'mysql' : 'postgres'
  const db = await openDatabase(
    dialect === 'sqlite' ? { type: 'sqlite', file: join(dataDir, 'attach.db') } : { type: dialect, url: dbUrl! },
  )
  const boardAuthorOnly = async (user: AuthUser | null, refKey: string, _request: Request | null, context?: { trx?: Kysely<any> }) => {
    if (!user || !/^\d{1,15}$/.test(refKey)) return false
    // Within the board's transaction the post is read through it (it alone sees a new post).
    const row = await (context?.trx ?? db).selectFrom('board').select('created_by').where('id', '=', Number(refKey)).executeTakeFirst()
    return row !== undefined && row.created_by !== null && String(row.created_by) === String(user.id)
  }
  // Prometheus metrics of the service and of the process, at GET /metrics.
  const metrics = createPrometheusMetrics()
  collectDefaultMetrics({ register: metrics.registry })
  let storage: AttachStorage
  try {
    await migrateBoard(db, dialect)
    storage = await createAttachStorage({
      config: settings,
      instrumentation: metrics.instrumentation,
      db,
      authenticate,
      logger,
      // Crash tests only: with ATTACH_TEST_PAUSE set, a confirmed save whose request names a step in
      // `x-attach-test-pause` prints `attach-test-paused <step>` there and never goes on (the test kills it).
      testPause: env.ATTACH_TEST_PAUSE
        ? async (step, request) => {
            if (request?.headers.get('x-attach-test-pause') !== step) return
            console.log(`attach-test-paused ${step}`)
            await new Promise(() => {})
          }
        : undefined,
      registrar(registry) {
        registry.registerCategory('demo', 'private', { secureAccess: privateAccess })
        // Only a board post's author may change its attachments; a refKey with no post yet is refused.
        registry.registerDomain('board', { store: registry.domain('board').store, mayChange: boardAuthorOnly })
      },
    })
  } catch (err) {
    await db.destroy()
    throw err
  }

  const cors: CorsSettings | undefined = env.ATTACH_CORS_ORIGINS
    ? (() => {
        const origins = env.ATTACH_CORS_ORIGINS.split(',')
          .map((s) => s.trim())
          .filter(Boolean)
        return {
          origins: origins.includes('*') ? '*' : origins,
          allowHeaders: ['Authorization', 'Content-Type', 'Range', 'If-None-Match', 'If-Modified-Since', ...TUS_REQUEST_HEADERS],
          allowMethods: ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'],
          exposeHeaders: [
            'x-app-total-count',
            'x-app-page',
            'x-app-data-count',
            'Content-Disposition',
            'Content-Range',
            'ETag',
            ...TUS_RESPONSE_HEADERS,
          ],
          maxAge: 600,
        }
      })()
    : undefined

  // The host entity `board`, whose save commits its attachments in the same request.
  const requireUser = async (request: Request): Promise<AuthUser> => {
    const user = await authenticate(request)
    if (!user) throw unauthorized('A valid Bearer token is required')
    return user
  }
  const guard =
    <A extends unknown[]>(fn: (...args: A) => Promise<Response>) =>
    async (...args: A): Promise<Response> => {
      try {
        return await fn(...args)
      } catch (err) {
        if (err instanceof AttachStorageError) return err.toResponse()
        logger.error('board:', err)
        return new AttachStorageError('internal-error', 'An internal error occurred', { status: 500 }).toResponse()
      }
    }

  /**
   * A board post's JSON body (POST and PUT): `title` (required on POST), `body`, and an
   * `attachContainer` of domain `board` whose categories are registered.
   */
  async function readPost(
    request: Request,
    titleRequired: boolean,
  ): Promise<{ title: string | undefined; text: string | undefined; attachContainer: unknown }> {
    const body = await readJson(request, BOARD_JSON_LIMIT)
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw badRequest('The body must be a JSON object')
    const { title, body: text, attachContainer } = body as Record<string, unknown>
    if ((titleRequired || title !== undefined) && (typeof title !== 'string' || title.trim() === '' || title.length > 200)) {
      throw badRequest('title must be a non-empty string of at most 200 characters')
    }
    if (text !== undefined && (typeof text !== 'string' || text.length > BOARD_TEXT_MAX)) {
      throw badRequest(`body must be a string of at most ${BOARD_TEXT_MAX} characters`)
    }
    if (attachContainer !== undefined && attachContainer !== null) {
      if (typeof attachContainer !== 'object' || Array.isArray(attachContainer))
        throw badRequest('attachContainer must be an AttachBag object')
      const d = (attachContainer as { refDomain?: unknown }).refDomain
      if (d !== undefined && d !== 'board') throw badRequest('attachContainer.refDomain must be "board"')
      let entries = 0
      for (const [key, list] of Object.entries(attachContainer)) {
        if (key === 'refDomain') continue
        if (key !== '_deleted') storage.registry.category('board', key)
        if (Array.isArray(list)) entries += list.length
      }
      // Refused before the post is written: commitAttachContainer() would refuse it after.
      const max = storage.config.save.maxEntries
      if (entries > max) {
        throw new AttachStorageError('too-many-entries', `attachContainer holds ${entries} entries; at most ${max}`, { status: 400 })
      }
    }
    return { title: title as string | undefined, text: text as string | undefined, attachContainer }
  }

  const createBoard = guard(async (request: Request) => {
    const user = await requireUser(request)
    const { title, text, attachContainer } = await readPost(request, true)
    const createdDt = new Date().toISOString()
    const values = { title, body: text ?? '', created_by: String(user.id), created_dt: createdDt }
    // The post and its attachments are one transaction: when the commit fails (its 500
    // attach-save-failure lists why), no post is left, and every temporary file can be committed again.
    const post = await storage.transaction(async (trx) => {
      const inserted =
        dialect === 'mysql'
          ? await trx
              .insertInto('board')
              .values(values)
              .executeTakeFirstOrThrow()
              .then((r) => ({ id: Number(r.insertId), ...values }))
          : await trx.insertInto('board').values(values).returningAll().executeTakeFirstOrThrow()
      const post = boardRow(inserted)
      await storage.commitAttachContainer({
        refDomain: 'board',
        refKey: post.id,
        attachContainer: (attachContainer ?? null) as never,
        entity: post,
        user,
        request,
        trx,
      })
      return post
    })
    return json({ ...post, attachContainer: await storage.lookup('board', String(post.id), { request }) }, 201)
  })

  const getBoard = guard(async (request: Request, id: string) => {
    await requireUser(request)
    if (!/^\d{1,15}$/.test(id)) throw badRequest('id must be a positive integer')
    const row = await db.selectFrom('board').selectAll().where('id', '=', Number(id)).executeTakeFirst()
    if (!row) throw notFound(`No board post ${id}`)
    return json({ ...boardRow(row), attachContainer: await storage.lookup('board', id, { request }) })
  })

  /** The post, when the request's user wrote it: 404 when there is none, 403 for another user. */
  const ownPost = async (request: Request, id: string) => {
    const user = await requireUser(request)
    if (!/^\d{1,15}$/.test(id)) throw badRequest('id must be a positive integer')
    const row = await db.selectFrom('board').selectAll().where('id', '=', Number(id)).executeTakeFirst()
    if (!row) throw notFound(`No board post ${id}`)
    if (String(row.created_by) !== String(user.id)) {
      throw new AttachStorageError('forbidden', 'Only the author may change this post', { status: 403 })
    }
    return { user, post: boardRow(row) }
  }

  const updateBoard = guard(async (request: Request, id: string) => {
    const { user, post } = await ownPost(request, id)
    const { title, text, attachContainer } = await readPost(request, false)
    const changes: Record<string, string> = {}
    if (typeof title === 'string') changes.title = title
    if (typeof text === 'string') changes.body = text
    // The post's changes and its attachments' are one transaction, as on creation.
    await storage.transaction(async (trx) => {
      if (Object.keys(changes).length) await trx.updateTable('board').set(changes).where('id', '=', post.id).execute()
      await storage.commitAttachContainer({
        refDomain: 'board',
        refKey: post.id,
        attachContainer: (attachContainer ?? null) as never,
        entity: post,
        user,
        request,
        trx,
      })
    })
    return json({ ...post, ...changes, attachContainer: await storage.lookup('board', id, { request }) })
  })

  const deleteBoard = guard(async (request: Request, id: string) => {
    const { user } = await ownPost(request, id)
    const bag = await storage.lookup('board', id, { request })
    const ids = Object.entries(bag).flatMap(([k, v]) => (k === 'refDomain' || typeof v === 'string' ? [] : v.map((r) => r.id)))
    const count = await storage.remove(ids, accessOf(user, request))
    await db.deleteFrom('board').where('id', '=', Number(id)).execute()
    return json({ success: true, id: Number(id), count })
  })

  const listBoard = guard(async (request: Request) => {
    await requireUser(request)
    const params = new URL(request.url).searchParams
    const result = await runList(db.selectFrom('board').selectAll(), BOARD_LIST, parseListRequest(params, BOARD_LIST), {
      mapRow: (row) => boardRow(row),
    })
    return listResponse(result)
  })

  return {
    storage,
    attach: createAttachHandler(storage),
    db,
    createBoard,
    getBoard,
    listBoard,
    ...openApiRoutes(storage.config),
    updateBoard,
    deleteBoard,
    page: createPage({ devToken: secret === DEV_SECRET ? () => signDevToken(secret) : undefined, cdnUrl: env.ATTACH_CDN_URL }),
    cors,
    viewsFirst(server) {
      if (viewsFirst === 'off') return
      serveViewsFirst(server, storage, { cors: cors ? { origins: cors.origins, exposeHeaders: cors.exposeHeaders } : false })
    },
    health: createHealthHandlers(storage),
    metrics: () => metrics.answer(),
    notFound: () => notFound('No such route').toResponse(),
    async close() {
      await storage.close()
      await db.destroy()
    },
  }
}
