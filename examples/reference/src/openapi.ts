/**
 * The reference server's OpenAPI document (attach-storage's, plus the `board` entity's paths from its
 * own schemas) and its page at `{api-prefix}/docs`: Swagger UI from the `swagger-ui-dist` package, every
 * file served by this server, so the page loads nothing from elsewhere.
 */
import { readFile } from 'node:fs/promises'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import {
  AttachBagAnswer,
  ErrorAnswer,
  type JsonObject,
  jsonSchemaOf,
  LIST_HEADERS_DOC,
  ListConventionQuery,
  openApiDocument,
} from 'attach-storage/openapi'
import * as v from 'valibot'

/** POST /board's body: a post and the AttachBag of its attachments, committed in the same request. */
export const BoardCreateBody = v.object({
  title: v.pipe(v.string(), v.minLength(1), v.maxLength(200)),
  body: v.optional(v.string()),
  attachContainer: v.optional(v.nullable(v.objectWithRest({ refDomain: v.optional(v.literal('board')) }, v.unknown()))),
})

/** A board post as answered. */
export const BoardPost = v.object({
  id: v.number(),
  title: v.string(),
  body: v.string(),
  createdBy: v.nullable(v.union([v.number(), v.string()])),
  createdDt: v.string(),
})

/** A board post with its attachments. */
export const BoardPostWithAttachments = v.object({ ...BoardPost.entries, attachContainer: AttachBagAnswer })

const error = { $ref: '#/components/schemas/Error' }
const refusals = {
  '4XX': { description: 'Refused: `{code, message}`', content: { 'application/json': { schema: error } } },
  '5XX': { description: 'Failed: `{code, message}`', content: { 'application/json': { schema: error } } },
}
const jsonContent = (schema: v.GenericSchema) => ({ 'application/json': { schema: jsonSchemaOf(schema) } })

/** The `/board` paths. */
export function boardPaths(): Record<string, JsonObject> {
  const security = [{ bearerAuth: [] }]
  const listQuery = Object.entries((jsonSchemaOf(ListConventionQuery) as { properties: Record<string, JsonObject> }).properties).map(
    ([name, schema]) => ({ name, in: 'query', required: false, schema }),
  )
  return {
    '/board': {
      get: {
        operationId: 'listBoard',
        tags: ['board'],
        summary: 'Board posts (list and pagination convention; search `title`, `id`, `createdDt`)',
        security,
        parameters: listQuery,
        responses: { 200: { description: 'The posts', headers: LIST_HEADERS_DOC, content: jsonContent(v.array(BoardPost)) }, ...refusals },
      },
      post: {
        operationId: 'createBoard',
        tags: ['board'],
        summary: 'Create a post and commit its attachments in the same request',
        security,
        requestBody: { required: true, content: jsonContent(BoardCreateBody) },
        responses: { 201: { description: 'The post with its attachments', content: jsonContent(BoardPostWithAttachments) }, ...refusals },
      },
    },
    '/board/{id}': {
      get: {
        operationId: 'getBoard',
        tags: ['board'],
        summary: 'One post with its attachments',
        security,
        parameters: [{ name: 'id', in: 'path', required: true, schema: { type: 'string', pattern: '^\\d{1,15}$' } }],
        responses: { 200: { description: 'The post', content: jsonContent(BoardPostWithAttachments) }, ...refusals },
      },
    },
  }
}

/** attach-storage's document with the `/board` paths. */
export function referenceOpenApi(config: { apiPrefix: string; assetsPrefix: string }): JsonObject {
  const doc = openApiDocument({ ...config, title: 'attach-storage reference server' }) as {
    paths: Record<string, JsonObject>
    tags: JsonObject[]
    components: { schemas: Record<string, JsonObject> }
  }
  doc.paths = { ...doc.paths, ...boardPaths() }
  doc.tags = [...doc.tags, { name: 'board', description: 'The host entity `board` (the spec’s list example)' }]
  doc.components.schemas.Error ??= jsonSchemaOf(ErrorAnswer)
  return doc
}

/** The Swagger UI files the page loads, from the installed `swagger-ui-dist`. */
const BUNDLE_FILES: Record<string, string> = {
  'swagger-ui.css': 'text/css; charset=utf-8',
  'swagger-ui-bundle.js': 'text/javascript; charset=utf-8',
}

const PAGE_HEADERS = {
  'x-content-type-options': 'nosniff',
  // Only this server: scripts, styles, images (Swagger UI's inline SVG and data: icons) and requests.
  'content-security-policy':
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
}

/**
 * The handlers of `GET {api-prefix}/openapi.json` (the reference document) and `GET {api-prefix}/docs`
 * with its files below `{api-prefix}/docs/`; both answer without authentication.
 */
export function openApiRoutes(config: { apiPrefix: string; assetsPrefix: string }) {
  const dist = dirname(createRequire(import.meta.url).resolve('swagger-ui-dist/package.json'))
  const documentPath = `${config.apiPrefix}/openapi.json`
  let document: string | undefined
  const init = `window.addEventListener('load', function () {
  window.ui = SwaggerUIBundle({
    url: ${JSON.stringify(documentPath)},
    dom_id: '#swagger-ui',
    deepLinking: true,
    validatorUrl: null,
    presets: [SwaggerUIBundle.presets.apis],
    layout: 'BaseLayout',
  })
})
`
  const page = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>attach-storage API</title>
<link rel="stylesheet" href="docs/swagger-ui.css">
<link rel="icon" href="data:,">
</head>
<body>
<div id="swagger-ui"></div>
<script src="docs/swagger-ui-bundle.js"></script>
<script src="docs/init.js"></script>
</body>
</html>
`
  const notFound = () =>
    new Response(JSON.stringify({ code: 'not-found', message: 'No such route' }), {
      status: 404,
      headers: { 'content-type': 'application/json; charset=utf-8' },
    })
  return {
    /** GET {api-prefix}/openapi.json */
    async openapi(_request: Request): Promise<Response> {
      document ??= JSON.stringify(referenceOpenApi(config))
      return new Response(document, {
        headers: { 'content-type': 'application/json; charset=utf-8', 'cache-control': 'no-cache', 'x-content-type-options': 'nosniff' },
      })
    },
    /** GET {api-prefix}/docs and its files (`docs/<file>`). */
    async docs(request: Request): Promise<Response> {
      const { pathname } = new URL(request.url)
      const base = `${config.apiPrefix}/docs`
      if (pathname === base) {
        return new Response(page, { headers: { 'content-type': 'text/html; charset=utf-8', 'cache-control': 'no-cache', ...PAGE_HEADERS } })
      }
      const file = pathname.startsWith(`${base}/`) ? pathname.slice(base.length + 1) : ''
      if (file === 'init.js') return new Response(init, { headers: { 'content-type': 'text/javascript; charset=utf-8', ...PAGE_HEADERS } })
      const type = Object.hasOwn(BUNDLE_FILES, file) ? BUNDLE_FILES[file] : undefined
      if (!type) return notFound()
      return new Response(await readFile(join(dist, file)), {
        headers: { 'content-type': type, 'cache-control': 'public, max-age=3600', ...PAGE_HEADERS },
      })
    },
  }
}
