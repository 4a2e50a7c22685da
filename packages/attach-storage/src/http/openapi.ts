/**
 * The OpenAPI 3.1 document of both groups, generated at runtime from the route tables: the path, query
 * and body schemas that validate each route, and what each route answers ({@link RouteDoc}). A host
 * serves it as it is (the JSON group answers `GET {api-prefix}/openapi.json`) or adds its own paths.
 */
import { type ConversionConfig, toJsonSchema } from '@valibot/to-json-schema'
import * as v from 'valibot'
import {
  AttachBagAnswer,
  ConfigAnswer,
  CountAnswer,
  DirectUploadAnswer,
  EditorDndAnswer,
  ErrorAnswer,
  PresignAnswer,
  SavedAnswer,
  TemporaryUploadAnswer,
  AttachmentViewAnswer,
} from './answers.js'
import { API_ROUTES, ASSET_ROUTES, type FetchHandler } from './handler.js'
import { json } from './respond.js'
import type { Route } from './router.js'

/** A JSON Schema (2020-12) or any OpenAPI object, as plain JSON. */
export type JsonObject = Record<string, unknown>

/** One answer of a route. */
export interface ResponseDoc {
  description: string
  /** The JSON body, as the valibot schema of what is answered. */
  json?: v.GenericSchema
  /** Other bodies, by media type (OpenAPI media type objects). */
  content?: Record<string, JsonObject>
  /** Response headers, by name (OpenAPI header objects). */
  headers?: Record<string, JsonObject>
}

/** What the document says of a route beyond the schemas the route validates with. */
export interface RouteDoc {
  summary: string
  description?: string
  /** Answers by status (`200`, `206`, `304`, ...); every 4xx/5xx is the `{code, message}` error. */
  responses: Record<string, ResponseDoc>
  /** A `multipart/form-data` body, as the valibot schema of its parts (files as {@link BinaryPart}). */
  multipart?: v.GenericSchema
  /** Query parameters read besides the route's query schema (an object schema). */
  extraQuery?: v.GenericSchema
  /** The path as OpenAPI writes it, when the route's pattern cannot say it (a `*rest` pattern). */
  path?: string
  /** The path parameters of `path` (an object schema). */
  pathParams?: v.GenericSchema
  /** A HEAD operation beside the GET (the binary group serves HEAD as GET). */
  head?: boolean
}

/** A file part of a multipart body. */
export const BinaryPart = v.pipe(v.string(), v.metadata({ format: 'binary' }))

/** The list and pagination convention's query (spec: `_usePaging`, `currentPage`, ...). */
export const ListConventionQuery = v.object({
  _usePaging: v.optional(v.picklist(['0', '1', 'true', 'false'])),
  currentPage: v.optional(v.pipe(v.string(), v.regex(/^\d+$/))),
  dataPerPage: v.optional(v.pipe(v.string(), v.regex(/^\d+$/))),
  skipCount: v.optional(v.picklist(['0', '1', 'true', 'false'])),
  sortBy: v.optional(v.string()),
  q: v.optional(v.string()),
})

/** The headers of a paged list answer. */
export const LIST_HEADERS_DOC: Record<string, JsonObject> = {
  'x-app-total-count': { description: 'Rows matching the search (unless skipCount)', schema: { type: 'integer' } },
  'x-app-page': { description: 'The page answered', schema: { type: 'integer' } },
  'x-app-data-count': { description: 'Rows per page', schema: { type: 'integer' } },
}

const CONVERSION: ConversionConfig = { target: 'draft-2020-12', typeMode: 'input', errorMode: 'ignore' }

/** The JSON Schema (2020-12) of what a valibot schema accepts. */
export function jsonSchemaOf(schema: v.GenericSchema): JsonObject {
  // `jsonObject()` and the AttachBag are pipe(custom, object): the object says the shape.
  const pipe = (schema as { pipe?: Array<{ kind: string; type: string }> }).pipe
  if (pipe?.[0]?.type === 'custom') {
    const inner = pipe.slice(1).findLast((item) => item.kind === 'schema')
    if (inner) return jsonSchemaOf(inner as unknown as v.GenericSchema)
  }
  const { $schema: _, ...out } = toJsonSchema(schema, CONVERSION) as JsonObject
  return out
}

const WHY_DESCRIPTION = 'Refused: `{code, message}` (plus `failures` on `attach-save-failure`)'

/** Options of {@link openApiDocument}. */
export interface OpenApiOptions {
  /** @default '/api/storage' */
  apiPrefix?: string
  /** @default '/assets/storage' */
  assetsPrefix?: string
  /** @default 'attach-storage' */
  title?: string
  /** The document's `info.version`. @default '0.1.0' */
  version?: string
  /** The JSON group's routes. @default the handler's API_ROUTES */
  apiRoutes?: Route[]
  /** The binary group's routes. @default the handler's ASSET_ROUTES */
  assetRoutes?: Route[]
}

/**
 * The OpenAPI 3.1 document of both groups. Paths are written in full (`/api/storage/...`); the JSON
 * group's operations need a Bearer JWT (`bearerAuth`), the binary group's and the document's own none.
 * It states only the public shape of the routes: no setting, store or secret.
 */
export function openApiDocument(options: OpenApiOptions = {}): JsonObject {
  const apiPrefix = options.apiPrefix ?? '/api/storage'
  const assetsPrefix = options.assetsPrefix ?? '/assets/storage'
  const paths: Record<string, Record<string, JsonObject>> = {}
  const add = (prefix: string, routes: Route[], group: 'json' | 'binary') => {
    for (const route of routes) {
      const doc = route.doc ?? ROUTE_DOCS[`${route.method} ${route.path}`]
      for (const [path, params] of openApiPaths(route, doc)) {
        const full = `${prefix}${path}`
        const op = operationOf(route, doc, params, group)
        paths[full] ??= {}
        paths[full]![route.method.toLowerCase()] = op
        if (doc?.head) paths[full]!.head = headOf(op)
      }
    }
  }
  add(apiPrefix, options.apiRoutes ?? API_ROUTES, 'json')
  add(assetsPrefix, options.assetRoutes ?? ASSET_ROUTES, 'binary')
  paths[`${apiPrefix}/openapi.json`] = {
    get: {
      operationId: 'openApiDocument',
      tags: ['json'],
      summary: 'This document (no authentication)',
      security: [],
      responses: { 200: { description: 'The OpenAPI 3.1 document', content: { 'application/json': { schema: { type: 'object' } } } } },
    },
  }
  return {
    openapi: '3.1.0',
    info: {
      title: options.title ?? 'attach-storage',
      version: options.version ?? '0.1.0',
      description:
        'File attachments: uploads, records bound to entities, and files served back. The JSON group needs a Bearer JWT; the binary group is guarded per category.',
      license: { name: 'MIT', identifier: 'MIT' },
    },
    servers: [{ url: '/' }],
    tags: [
      { name: 'json', description: `The JSON group (${apiPrefix})` },
      { name: 'binary', description: `The binary group (${assetsPrefix})` },
    ],
    paths,
    components: {
      securitySchemes: { bearerAuth: { type: 'http', scheme: 'bearer', bearerFormat: 'JWT' } },
      schemas: {
        Error: jsonSchemaOf(ErrorAnswer),
        AttachmentView: jsonSchemaOf(AttachmentViewAnswer),
      },
    },
  }
}

/**
 * `GET {api-prefix}/openapi.json` in front of the JSON group: answered without authentication, built
 * once; other requests go to `api`.
 */
export function withOpenApi(
  config: { apiPrefix: string; assetsPrefix: string; enabled: boolean },
  api: FetchHandler,
  document: () => JsonObject = () => openApiDocument(config),
): FetchHandler {
  const path = `${config.apiPrefix}/openapi.json`
  let body: JsonObject | undefined
  return async (request) => {
    if (config.enabled && (request.method === 'GET' || request.method === 'HEAD') && new URL(request.url).pathname === path) {
      body ??= document()
      const answer = json(body)
      return request.method === 'HEAD' ? new Response(null, { headers: answer.headers }) : answer
    }
    return api(request)
  }
}

/** The OpenAPI paths of a route (an optional last segment gives two) with their path parameters' names. */
function openApiPaths(route: Route, doc: RouteDoc | undefined): Array<[string, string[]]> {
  if (doc?.path !== undefined) return [[doc.path, [...doc.path.matchAll(/\{(\w+)\}/g)].map((m) => m[1]!)]]
  const parts = route.path === '' ? [] : route.path.split('/')
  const out: Array<[string, string[]]> = []
  const names: string[] = []
  let path = ''
  for (const p of parts) {
    if (p.startsWith(':') && p.endsWith('?')) {
      out.push([path, [...names]])
      names.push(p.slice(1, -1))
      path += `/{${p.slice(1, -1)}}`
    } else if (p.startsWith(':')) {
      names.push(p.slice(1))
      path += `/{${p.slice(1)}}`
    } else if (p.startsWith('*')) {
      names.push(p.slice(1))
      path += `/{${p.slice(1)}}`
    } else if (p !== '') {
      path += `/${p}`
    }
  }
  if (route.path.endsWith('/')) path += '/'
  out.push([path, names])
  return out
}

/** Each member of an object schema as a JSON Schema, with whether it is required. */
function membersOf(schema: v.GenericSchema | undefined): Array<[string, JsonObject, boolean]> {
  if (!schema) return []
  const js = jsonSchemaOf(schema) as { properties?: Record<string, JsonObject>; required?: string[] }
  return Object.entries(js.properties ?? {}).map(([name, s]) => [name, s, js.required?.includes(name) ?? false])
}

function operationOf(route: Route, doc: RouteDoc | undefined, pathNames: string[], group: 'json' | 'binary'): JsonObject {
  const pathSchemas = new Map(membersOf(doc?.pathParams ?? route.params).map(([n, s]) => [n, s]))
  const parameters: JsonObject[] = pathNames.map((name) => ({
    name,
    in: 'path',
    required: true,
    schema: pathSchemas.get(name) ?? { type: 'string' },
  }))
  for (const [name, schema, required] of [...membersOf(route.query), ...membersOf(doc?.extraQuery)]) {
    parameters.push({ name, in: 'query', required, schema })
  }
  const op: JsonObject = {
    operationId: operationIdOf(route, pathNames, group),
    tags: [group],
    summary: doc?.summary ?? `${route.method} ${route.path}`,
  }
  if (doc?.description) op.description = doc.description
  if (parameters.length) op.parameters = parameters
  if (route.body) op.requestBody = { required: true, content: { 'application/json': { schema: jsonSchemaOf(route.body) } } }
  else if (doc?.multipart) op.requestBody = { required: true, content: { 'multipart/form-data': { schema: jsonSchemaOf(doc.multipart) } } }
  const responses: Record<string, JsonObject> = {}
  for (const [status, r] of Object.entries(doc?.responses ?? { 200: { description: 'OK' } })) {
    const out: JsonObject = { description: r.description }
    const content: Record<string, JsonObject> = { ...r.content }
    if (r.json) content['application/json'] = { schema: jsonSchemaOf(r.json) }
    if (Object.keys(content).length) out.content = content
    if (r.headers) out.headers = r.headers
    responses[status] = out
  }
  responses['4XX'] = { description: WHY_DESCRIPTION, content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } } }
  responses['5XX'] = {
    description: 'Failed: `{code, message}`',
    content: { 'application/json': { schema: { $ref: '#/components/schemas/Error' } } },
  }
  op.responses = responses
  op.security = group === 'json' ? [{ bearerAuth: [] }] : []
  return op
}

/** The HEAD twin of a GET: the same answers without bodies. */
function headOf(get: JsonObject): JsonObject {
  const responses: Record<string, JsonObject> = {}
  for (const [status, r] of Object.entries(get.responses as Record<string, JsonObject>)) {
    const { content: _, ...rest } = r
    responses[status] = rest
  }
  return { ...get, operationId: `${get.operationId}Head`, summary: `${get.summary} (headers only)`, responses }
}

function operationIdOf(route: Route, pathNames: string[], group: string): string {
  const words =
    `${group} ${route.method.toLowerCase()} ${route.path.replace(/[:*?]\w*\??/g, '')} ${pathNames.length ? `by ${pathNames.join(' ')}` : ''}`
      .split(/[^A-Za-z0-9]+/)
      .filter(Boolean)
  return words.map((w, i) => (i === 0 ? w : w[0]!.toUpperCase() + w.slice(1))).join('')
}

/** The multipart parts of an upload. */
const UploadParts = (files: string[]) =>
  v.object({
    refDomain: v.string(),
    refCategory: v.optional(v.string()),
    filters: v.optional(v.pipe(v.string(), v.description('JSON object of request filters, added to the category’s own'))),
    resultKey: v.optional(v.pipe(v.string(), v.description('Member name of the answer (default `files`)'))),
    ...Object.fromEntries(files.map((f) => [f, v.optional(v.union([BinaryPart, v.array(BinaryPart)]))])),
  })

const FILE_HEADERS: Record<string, JsonObject> = {
  'content-type': { schema: { type: 'string' } },
  'content-length': { schema: { type: 'integer' } },
  'content-disposition': { description: '`inline` (view) or `attachment` (download), with the display name', schema: { type: 'string' } },
  etag: { schema: { type: 'string' } },
  'last-modified': { schema: { type: 'string' } },
  'accept-ranges': { schema: { type: 'string' } },
  'cache-control': { schema: { type: 'string' } },
}

const FILE_RESPONSES: Record<string, ResponseDoc> = {
  200: {
    description: 'The file’s bytes',
    content: { '*/*': { schema: { type: 'string', contentMediaType: 'application/octet-stream' } } },
    headers: FILE_HEADERS,
  },
  206: {
    description: 'The requested range (`Range`)',
    content: { '*/*': { schema: { type: 'string', contentMediaType: 'application/octet-stream' } } },
    headers: { ...FILE_HEADERS, 'content-range': { schema: { type: 'string' } } },
  },
  304: { description: 'Not modified (`If-None-Match`, `If-Modified-Since`)', headers: { etag: { schema: { type: 'string' } } } },
}

/** A signed view URL's `exp` and `sig` (guarded categories with signing configured). */
const SignatureQuery = v.object({ exp: v.optional(v.string()), sig: v.optional(v.string()) })

const STRING_HEADER = { schema: { type: 'string' } }
const INTEGER_HEADER = { schema: { type: 'integer', minimum: 0 } }
/** What `OPTIONS attach/tus` answers. */
const TUS_CAPABILITIES = {
  'tus-version': STRING_HEADER,
  'tus-extension': STRING_HEADER,
  'tus-max-size': INTEGER_HEADER,
  'tus-checksum-algorithm': STRING_HEADER,
}

/** What the document says of each core route, by `METHOD path`. A route's own `doc` wins. */
const ROUTE_DOCS: Record<string, RouteDoc> = {
  'POST attach/tmp': {
    summary: 'Temporary upload (step 1 of the two-step save)',
    description: 'Files as parts `file` or `fileMap`; each answered item’s `name` is the `savedName` of the confirmed save.',
    multipart: UploadParts(['file', 'fileMap']),
    responses: { 200: { description: 'Each file, stored or refused (`error`)', json: TemporaryUploadAnswer } },
  },
  'POST attach/direct': {
    summary: 'Direct upload (stored at once, no record)',
    multipart: UploadParts(['files', 'file', 'fileMap']),
    responses: { 200: { description: 'Each file, stored or refused (`error`)', json: DirectUploadAnswer } },
  },
  'POST attach/presign': {
    summary: 'Presigned upload address in the temporary store (S3, Azure)',
    responses: { 200: { description: 'Where and how to send the bytes; `name` is the `savedName`', json: PresignAnswer } },
  },
  'OPTIONS attach/tus': {
    summary: 'Resumable uploads (tus 1.0): the server’s version, extensions and limits',
    responses: { 204: { description: 'The tus capabilities', headers: TUS_CAPABILITIES } },
  },
  'OPTIONS attach/tus/:id': {
    summary: 'Resumable uploads (tus 1.0): the server’s version, extensions and limits',
    responses: { 204: { description: 'The tus capabilities', headers: TUS_CAPABILITIES } },
  },
  'POST attach/tus': {
    summary: 'Resumable upload, creation (tus 1.0 `creation`, `creation-with-upload`, `creation-defer-length`)',
    description:
      'Headers: `Tus-Resumable: 1.0.0`, `Upload-Length` (or `Upload-Defer-Length: 1`), `Upload-Metadata` with `filename`, `refDomain`, `refCategory` (base64 values); optionally the first bytes as `application/offset+octet-stream` with `Upload-Checksum`. The last segment of `Location` is the `savedName` of the confirmed save once the upload is complete (docs/resumable.md).',
    responses: {
      201: {
        description: 'Created',
        headers: {
          location: STRING_HEADER,
          'upload-offset': INTEGER_HEADER,
          'upload-expires': STRING_HEADER,
          'tus-resumable': STRING_HEADER,
        },
      },
    },
  },
  'HEAD attach/tus/:id': {
    summary: 'Resumable upload: where it stands',
    responses: {
      200: {
        description: 'The bytes received and the declared length',
        headers: { 'upload-offset': INTEGER_HEADER, 'upload-length': INTEGER_HEADER, 'upload-expires': STRING_HEADER },
      },
    },
  },
  'PATCH attach/tus/:id': {
    summary: 'Resumable upload: bytes at `Upload-Offset`',
    description:
      '`Content-Type: application/offset+octet-stream`, `Upload-Offset`, optionally `Upload-Checksum` (sha1, sha256, md5). The request bringing the last byte completes the upload through the category’s filters. 409 for another offset, 415 for another type, 460 for another digest.',
    responses: { 204: { description: 'Kept; the new offset', headers: { 'upload-offset': INTEGER_HEADER } } },
  },
  'POST attach/tus/:id': {
    summary: 'Resumable upload: PATCH or DELETE sent as POST with `X-HTTP-Method-Override`',
    responses: { 204: { description: 'As the overridden method answers', headers: { 'upload-offset': INTEGER_HEADER } } },
  },
  'DELETE attach/tus/:id': {
    summary: 'Resumable upload: termination (finished or not)',
    responses: { 204: { description: 'Removed' } },
  },
  'POST ckupload/:kind': {
    summary: 'CKEditor 4/5 image upload (`dnd`: JSON, `modal`: HTML calling CKEDITOR.tools.callFunction)',
    multipart: v.object({ upload: BinaryPart, CKEditorFuncNum: v.optional(v.pipe(v.string(), v.regex(/^\d{1,10}$/))) }),
    responses: {
      200: {
        description: '`dnd`: `{uploaded, fileName, url}` or `{uploaded: 0, error}`; `modal`: an HTML page',
        json: EditorDndAnswer,
        content: { 'text/html': { schema: { type: 'string' } } },
      },
    },
  },
  'GET config': {
    summary: 'The CDN address and each domain’s store and categories',
    responses: { 200: { description: 'The public configuration', json: ConfigAnswer } },
  },
  'POST direct-url': {
    summary: 'The address of one attachment by reference and index',
    responses: { 200: { description: 'The address (a JSON string)', json: v.string() } },
  },
  'GET attach': {
    summary: 'The records of several reference keys (list and pagination convention)',
    extraQuery: ListConventionQuery,
    responses: {
      200: { description: 'Records ordered by refKey, refCategory, sort', json: v.array(AttachmentViewAnswer), headers: LIST_HEADERS_DOC },
    },
  },
  'POST attach': {
    summary: 'Delete records (`[{id}]`)',
    responses: { 200: { description: 'How many were deleted', json: CountAnswer } },
  },
  'PUT attach/': {
    summary: 'Change records’ metadata (displayName, ext, fmetaValue, sort, focus)',
    responses: { 200: { description: 'How many were changed', json: CountAnswer } },
  },
  'POST attach/:refDomain/:refKey': {
    summary: 'Confirmed save of an AttachBag (step 2 of the two-step save)',
    responses: { 200: { description: 'The reference’s records after the save', json: SavedAnswer } },
  },
  'GET attach/:refDomain/:refKey/:refCategory?': {
    summary: 'The records of a reference (all categories, or one), as an AttachBag',
    responses: { 200: { description: 'An AttachBag: `refDomain` and each category’s records', json: AttachBagAnswer } },
  },
  'GET attach/:refDomain/:refKey/:refCategory/_count': {
    summary: 'How many records of a reference category the caller may read',
    responses: { 200: { description: 'The count (a JSON number)', json: v.number() } },
  },
  'POST attach/download': {
    summary: 'Several attachments as one streamed ZIP archive',
    responses: {
      200: {
        description: 'The archive',
        content: { 'application/zip': { schema: { type: 'string', contentMediaType: 'application/zip' } } },
        headers: { 'content-disposition': { schema: { type: 'string' } } },
      },
    },
  },
  'GET editor/image/*parts': {
    summary: 'An image uploaded through the editor routes',
    path: '/editor/image/{refCategory}/{yyyy}/{MM}/{savedName}',
    pathParams: v.object({
      refCategory: v.string(),
      yyyy: v.pipe(v.string(), v.regex(/^\d{4}$/)),
      MM: v.pipe(v.string(), v.regex(/^\d{2}$/)),
      savedName: v.string(),
    }),
    head: true,
    responses: FILE_RESPONSES,
  },
  'GET attach/:action/:id': {
    summary: 'View or download an attachment by id (resized with `w`, `h`, `format`)',
    extraQuery: SignatureQuery,
    head: true,
    responses: FILE_RESPONSES,
  },
  'GET attach/:action/:refDomain/:refKey/:refCategory/:idx?': {
    summary: 'View or download an attachment by reference and index',
    extraQuery: SignatureQuery,
    head: true,
    responses: FILE_RESPONSES,
  },
  'GET attach-temp/:action/:refDomain/:refCategory/:savedName': {
    summary: 'View or download a temporary file',
    head: true,
    responses: FILE_RESPONSES,
  },
  'GET attach-direct/:action/:refDomain/:refCategory': {
    summary: 'View or download a direct upload by its path',
    head: true,
    responses: FILE_RESPONSES,
  },
}
