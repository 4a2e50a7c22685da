/** Rich-text editor routes: CKEditor 4/5 uploads (JSON group) and the editor images they point at (binary group). */
import * as v from 'valibot'
import { badRequest } from '../../errors.js'
import { resolveEditorImage } from '../../service/serving.js'
import { completeEditorUpload, discardReceived } from '../../service/uploads.js'
import { json } from '../respond.js'
import { defineRoute, type Route } from '../router.js'
import { serveFile } from '../serve.js'
import { boundedString, SEGMENT_MAX } from './schemas.js'
import { receiveUpload } from './uploads.js'

const FUNC_NUM = /^\d{1,10}$/

/** A JavaScript string literal safe inside an HTML <script> element. */
function scriptString(value: string): string {
  // JSON escapes quotes and backslashes; these would end the script element or the line.
  return JSON.stringify(value).replace(/[<>&'\u2028\u2029]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`)
}

/** `CKEditorFuncNum`: digits, from the query or else the form. */
const FuncNumQuery = v.object({
  CKEditorFuncNum: v.optional(v.pipe(v.string(), v.regex(FUNC_NUM, 'CKEditorFuncNum must be digits'))),
})

/** The text parts of an editor upload: `CKEditorFuncNum` (checked to be digits by the route). */
export const EditorFieldsSchema = v.object({ CKEditorFuncNum: v.optional(boundedString(SEGMENT_MAX)) })

/** The CKEditor routes of the JSON group. */
export const editorUploadRoutes: Route[] = [
  defineRoute({
    method: 'POST',
    path: 'ckupload/:kind',
    params: v.object({ kind: v.picklist(['dnd', 'modal']) }),
    query: FuncNumQuery,
    handle: async ({ params, query }, env) => {
      const { files, fields } = await receiveUpload(env, ['upload'], EditorFieldsSchema)
      const funcNum = query.CKEditorFuncNum ?? fields.CKEditorFuncNum
      const badFuncNum = params.kind === 'modal' && (funcNum === undefined || !FUNC_NUM.test(funcNum))
      if (badFuncNum || files.length !== 1) {
        await discardReceived(env.ctx, files)
        throw badFuncNum
          ? badRequest('CKEditorFuncNum must be digits')
          : badRequest('Send exactly one file as the multipart part "upload"', 'no-file')
      }
      const [item] = await completeEditorUpload(env.ctx, files, {}, env.access)
      const ok = item && 'url' in item ? item : undefined
      const message = item && 'error' in item ? item.error.message : ''
      if (params.kind === 'dnd') {
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
    },
  }),
]

/** `{refCategory}/{yyyy}/{MM}/{savedName}` of an editor image. */
const EditorImageParams = v.object({
  parts: v.pipe(
    v.strictTuple([
      boundedString(SEGMENT_MAX),
      v.pipe(v.string(), v.regex(/^\d{4}$/)),
      v.pipe(v.string(), v.regex(/^\d{2}$/)),
      boundedString(SEGMENT_MAX),
    ]),
    v.transform(([refCategory, yyyy, MM, savedName]) => ({ refCategory, yyyy, MM, savedName })),
  ),
})

/** The editor images of the binary group. */
export const editorImageRoutes: Route[] = [
  defineRoute({
    method: 'GET',
    path: 'editor/image/*parts',
    params: EditorImageParams,
    handle: async ({ params }, { ctx, access, request }) => serveFile(request, await resolveEditorImage(ctx, params.parts, access), 'view'),
  }),
]
