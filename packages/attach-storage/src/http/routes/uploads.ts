/** The JSON group's upload routes: the temporary upload (step 1 of the two-step save) and the direct upload. */
import * as v from 'valibot'
import { badRequest } from '../../errors.js'
import { stripsOnReceipt } from '../../service/strip-kept.js'
import { admitTemporaryUpload, completeDirectUpload, completeTemporaryUpload, discardReceived } from '../../service/uploads.js'
import type { ReceivedFile } from '../../service/types.js'
import { parseInput } from '../../validation.js'
import { receiveMultipart } from '../multipart.js'
import { json } from '../respond.js'
import { defineRoute, type Route, type RouteEnv } from '../router.js'
import { boundedString, SEGMENT_MAX } from './schemas.js'

/** A JSON object given as a text part. */
const JsonObjectText = v.pipe(
  boundedString(64 * 1024),
  v.rawTransform(({ dataset, addIssue, NEVER }) => {
    try {
      const parsed: unknown = JSON.parse(dataset.value)
      if (parsed && typeof parsed === 'object' && !Array.isArray(parsed)) return parsed as Record<string, unknown>
    } catch {
      // answered below
    }
    addIssue({ message: 'filters must be a JSON object' })
    return NEVER
  }),
)

/** The text parts of an upload: where the files go, the request filters, and the answer's key. */
export const UploadFieldsSchema = v.object({
  refDomain: v.pipe(boundedString(SEGMENT_MAX, 'refDomain is required'), v.nonEmpty('refDomain is required')),
  refCategory: v.pipe(
    v.optional(boundedString(SEGMENT_MAX), ''),
    v.transform((c) => (c === '' ? 'default' : c)),
  ),
  filters: v.pipe(
    v.optional(boundedString(64 * 1024), ''),
    v.transform((f) => (f === '' ? undefined : f)),
    v.optional(JsonObjectText),
  ),
  /** The answer's member name (`files` by default); one that is no identifier is ignored. */
  resultKey: v.pipe(
    v.optional(boundedString(SEGMENT_MAX), 'files'),
    v.transform((k) => (/^[A-Za-z_$][\w$]{0,63}$/.test(k) ? k : 'files')),
  ),
})

/**
 * Streams a multipart request's files into the temporary area and parses its text parts; a request
 * without a file, or whose text parts fail `schema`, is refused with every received file removed.
 */
export async function receiveUpload<S extends v.GenericSchema>(
  env: RouteEnv,
  fileFields: string[],
  schema: S,
  stripWhen?: (fields: Record<string, string>) => boolean,
): Promise<{ files: ReceivedFile[]; fields: v.InferOutput<S> }> {
  const upload = await receiveMultipart(env.request, env.storage, { fileFields, stripWhen })
  const files = upload.files.map((f) => f.file)
  try {
    if (files.length === 0) throw badRequest(`No file was sent (multipart part ${fileFields.join(' or ')})`, 'no-file')
    return { files, fields: parseInput(schema, upload.fields, 'fields') }
  } catch (err) {
    await discardReceived(env.ctx, files)
    throw err
  }
}

/** A JPEG sent after its refDomain and refCategory parts is stripped as it comes when its category strips. */
const stripWhen = (env: RouteEnv) => (f: Record<string, string>) => stripsOnReceipt(env.ctx, f.refDomain, f.refCategory)

const target = (f: v.InferOutput<typeof UploadFieldsSchema>) => ({ refDomain: f.refDomain, refCategory: f.refCategory, filters: f.filters })

/** The routes, in the order they are tried. */
export const uploadRoutes: Route[] = [
  defineRoute({
    method: 'POST',
    path: 'attach/tmp',
    handle: async (_in, env) => {
      await admitTemporaryUpload(env.ctx, env.access)
      const { files, fields } = await receiveUpload(env, ['file', 'fileMap'], UploadFieldsSchema, stripWhen(env))
      return json({ [fields.resultKey]: await completeTemporaryUpload(env.ctx, files, target(fields), env.access) })
    },
  }),
  defineRoute({
    method: 'POST',
    path: 'attach/direct',
    handle: async (_in, env) => {
      const { files, fields } = await receiveUpload(env, ['files', 'file', 'fileMap'], UploadFieldsSchema, stripWhen(env))
      return json({ files: await completeDirectUpload(env.ctx, files, target(fields), env.access) })
    },
  }),
]
