/** The binary group's file routes: views and downloads by id and by reference (resized on request), temporary and direct files. */
import * as v from 'valibot'
import { badRequest } from '../../errors.js'
import type { ResizeRequest } from '../../media/resize.js'
import { callerOf } from '../../service/access.js'
import * as serving from '../../service/serving.js'
import { parseInput } from '../../validation.js'
import { defineRoute, type Route } from '../router.js'
import { notModified, serveFile, webAnswerRequest } from '../serve.js'
import {
  ActionSchema,
  IdSegmentSchema,
  IndexSegmentSchema,
  LookupQuerySchema,
  ResizeQuerySchema,
  SEGMENT_MAX,
  TEXT_MAX,
} from './schemas.js'

/** A path segment of at most SEGMENT_MAX units (what it names is checked by the use case). */
const Part = v.pipe(v.string(), v.maxLength(SEGMENT_MAX))

/** The resize request of a view's query; `format=auto` picks AVIF or WebP from `Accept` (answers vary by it). */
export function resizeOf(q: v.InferOutput<typeof ResizeQuerySchema>, accept: string | null): ResizeRequest | undefined {
  const cover = q.fit === 'cover'
  if (previewOf(q) && (q.variant !== undefined || q.w !== undefined || q.h !== undefined || q.format || q.fit || q.crop)) {
    throw badRequest('query.preview: the preview image takes no w, h, format, fit, crop or variant')
  }
  if (q.variant !== undefined) {
    if (q.w !== undefined || q.h !== undefined || (q.format !== undefined && q.format !== '') || q.fit || q.crop) {
      throw badRequest('query.variant: a named variant takes no w, h, format, fit or crop')
    }
    // Resolved against the record's category once it is known (service/variants.ts).
    return { w: undefined, h: undefined, format: undefined, negotiated: false, variant: q.variant }
  }
  if (cover && (q.w === undefined || q.h === undefined)) {
    throw badRequest(`query.${q.w === undefined ? 'w' : 'h'}: fit=cover needs both w and h`)
  }
  if (q.crop && !cover) throw badRequest('query.crop: crop=attention goes with fit=cover')
  if (q.w === undefined && q.h === undefined) return undefined
  // The record's focus is added once the record is known (service/serving.ts).
  const fit = cover ? ({ fit: 'cover' } as const) : {}
  if (q.format !== 'auto') return { w: q.w, h: q.h, format: q.format || undefined, negotiated: false, ...fit }
  return { w: q.w, h: q.h, format: negotiatedFormat(accept), negotiated: true, ...fit }
}

/** True when the query asks for a PDF's or a video's preview image itself (`?preview=1`). */
export const previewOf = (q: v.InferOutput<typeof ResizeQuerySchema>): boolean => q.preview === '1' || q.preview === 'true'

function negotiatedFormat(accept: string | null): 'avif' | 'webp' | undefined {
  const a = (accept ?? '').toLowerCase()
  return a.includes('image/avif') ? 'avif' : a.includes('image/webp') ? 'webp' : undefined
}

/**
 * What a view without a box shows of a picture browsers cannot show (HEIC): the picture within
 * {@link SHOWN_SIDE} pixels, as JPEG or the asked `format`. Used only for such records (service/serving.ts).
 */
export function shownOf(q: v.InferOutput<typeof ResizeQuerySchema>, accept: string | null): ResizeRequest {
  if (q.format === 'auto') return { w: SHOWN_SIDE, h: SHOWN_SIDE, format: negotiatedFormat(accept), negotiated: true }
  const format = q.format || undefined
  const negotiated = false
  return { w: SHOWN_SIDE, h: SHOWN_SIDE, format, negotiated }
}

/** The largest side of a HEIC photo's view without a box (a 12-megapixel photo's 4032 fits). */
const SHOWN_SIDE = 4096

/** The request's conditional headers as the use case asks them (a variant's 304 comes before any resize). */
const conditionalOf =
  (request: Request): serving.ServeOptions['notModified'] =>
  (target) =>
    notModified(webAnswerRequest(request), target)

const ByReferenceQuery = v.object({ ...LookupQuerySchema.entries, ...ResizeQuerySchema.entries })

/** The routes, in the order they are tried. */
export const servingRoutes: Route[] = [
  defineRoute({
    method: 'GET',
    path: 'attach/:action/:id',
    params: v.object({ action: ActionSchema, id: IdSegmentSchema }),
    query: ResizeQuerySchema,
    handle: async ({ params, query }, { ctx, access, request }) => {
      const accept = request.headers.get('accept')
      const resize = resizeOf(query, accept)
      const shown = params.action === 'view' ? shownOf(query, accept) : undefined
      const notModified = conditionalOf(request)
      const target = await serving.resolveById(
        ctx,
        { id: params.id, resize, shown, preview: previewOf(query), lookOnly: request.method === 'HEAD', notModified },
        access,
      )
      return serveFile(request, target, params.action)
    },
  }),
  defineRoute({
    method: 'GET',
    path: 'attach/:action/:refDomain/:refKey/:refCategory/:idx?',
    params: v.object({
      action: ActionSchema,
      refDomain: Part,
      refKey: Part,
      refCategory: Part,
      idx: v.optional(Part),
    }),
    query: ByReferenceQuery,
    handle: async ({ params, query }, { ctx, access, request }) => {
      const { action, idx, ...ref } = params
      const { ext, extAlt, fmetaValue } = query
      const target = await serving.resolveByReference(
        ctx,
        {
          ...ref,
          idx: idx === undefined ? 0 : parseInput(IndexSegmentSchema, idx, 'idx'),
          filters: { ext, extAlt, fmetaValue },
          resize: resizeOf(query, request.headers.get('accept')),
          preview: previewOf(query),
          shown: action === 'view' ? shownOf(query, request.headers.get('accept')) : undefined,
          lookOnly: request.method === 'HEAD',
          notModified: conditionalOf(request),
        },
        access,
      )
      return serveFile(request, target, action)
    },
  }),
  defineRoute({
    method: 'GET',
    path: 'attach-temp/:action/:refDomain/:refCategory/:savedName',
    params: v.object({ action: ActionSchema, refDomain: Part, refCategory: Part, savedName: Part }),
    query: ResizeQuerySchema,
    handle: async ({ params, query }, { storage, ctx, access, request }) => {
      const { action, ...file } = params
      // A guarded temporary file is its uploader's only: who asks, as the request's token says.
      const user = access.user ?? (await callerOf(storage.authenticate, request))
      // A HEIC photo's view answers a picture browsers show (within w/h when asked); nothing else is resized.
      const accept = request.headers.get('accept')
      const shown = action === 'view' && query.variant === undefined ? (resizeOf(query, accept) ?? shownOf(query, accept)) : undefined
      return serveFile(request, await serving.resolveTemporary(ctx, { ...file, shown }, { ...access, user }), action)
    },
  }),
  defineRoute({
    method: 'GET',
    path: 'attach-direct/:action/:refDomain/:refCategory',
    params: v.object({ action: ActionSchema, refDomain: Part, refCategory: Part }),
    query: v.object({ path: v.optional(v.pipe(v.string(), v.maxLength(TEXT_MAX))) }),
    handle: async ({ params, query }, { ctx, access, request }) => {
      const { action, ...where } = params
      return serveFile(request, await serving.resolveDirect(ctx, { ...where, path: query.path ?? null }, access), action)
    },
  }),
]
