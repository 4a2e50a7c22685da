/** The binary group's ZIP download: several attachments in one streamed archive. */
import * as v from 'valibot'
import { zip } from '../../service/zip.js'
import { streamResponse } from '../node-body.js'
import { jsonObject } from '../../validation.js'
import { defineRoute, type Route } from '../router.js'
import { contentDisposition } from '../serve.js'

/** `{title?, ids}`: at most `zip.max-files` ids, checked by the use case. */
const ZipBody = jsonObject(
  {
    title: v.optional(
      v.nullable(
        v.pipe(
          v.string('title must be a string of at most 200 characters'),
          v.maxLength(200, 'title must be a string of at most 200 characters'),
        ),
      ),
    ),
    ids: v.pipe(
      v.array(
        v.pipe(
          v.number('ids must be positive integers'),
          v.safeInteger('ids must be positive integers'),
          v.minValue(1, 'ids must be positive integers'),
        ),
        'ids must be a non-empty array of attachment ids',
      ),
      v.maxLength(10_000, 'ids may name at most 10000 attachments'),
    ),
  },
  'The body must be a JSON object {title, ids}',
)

/** The routes, in the order they are tried. */
export const zipRoutes: Route[] = [
  defineRoute({
    method: 'POST',
    path: 'attach/download',
    body: ZipBody,
    handle: async ({ body }, { ctx, access, request }) => {
      const { fileName, stream } = await zip(ctx, body, access)
      // A client gone frees the slot at once, also when it went while the archive was being prepared.
      if (request.signal?.aborted) stream.destroy()
      else request.signal?.addEventListener('abort', () => stream.destroy(), { once: true })
      return streamResponse(stream, {
        headers: {
          'content-type': 'application/zip',
          'content-disposition': contentDisposition('attachment', fileName),
          'x-content-type-options': 'nosniff',
          'cache-control': 'no-store',
        },
      })
    },
  }),
]
