/** The JSON group's direct-to-cloud route: POST attach/presign answers a write address in the temporary store. */
import * as v from 'valibot'
import { presignUpload } from '../../service/direct-to-cloud.js'
import { cleanDisplayName } from '../../service/names.js'
import { jsonObject } from '../../validation.js'
import { json } from '../respond.js'
import { defineRoute, type Route } from '../router.js'

const SIZE = 'size must be the number of bytes the client will send (an integer from 0)'

/** `{refDomain, refCategory?, fileName, size, type?}`: where the file goes, its name and its exact length. */
export const PresignBodySchema = jsonObject(
  {
    refDomain: v.pipe(
      v.string('refDomain must be a string'),
      v.maxLength(1024, 'refDomain is too long'),
      v.nonEmpty('refDomain is required'),
    ),
    refCategory: v.pipe(
      v.optional(v.pipe(v.string('refCategory must be a string'), v.maxLength(1024, 'refCategory is too long')), ''),
      v.transform((c) => (c === '' ? 'default' : c)),
    ),
    fileName: v.pipe(
      v.string('fileName must be a string'),
      v.maxLength(4096, 'fileName must be a file name of at most 4096 characters'),
      v.check((s) => cleanDisplayName(s, '') !== '', 'fileName must be a non-empty file name'),
    ),
    size: v.pipe(v.number(SIZE), v.safeInteger(SIZE), v.minValue(0, SIZE)),
    type: v.optional(
      v.pipe(v.string('type must be a media type'), v.regex(/^[\w.+-]{1,127}\/[\w.+-]{1,127}$/, 'type must be a media type')),
    ),
  },
  'The body must be a JSON object',
)

/** The routes, in the order they are tried. */
export const presignRoutes: Route[] = [
  defineRoute({
    method: 'POST',
    path: 'attach/presign',
    body: PresignBodySchema,
    handle: async ({ body }, { ctx, access }) => json(await presignUpload(ctx, body, access)),
  }),
]
