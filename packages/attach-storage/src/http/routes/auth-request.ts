/**
 * The decision route of nginx's `auth_request` (docs/serving.md, "Signed views decided once"): asked once
 * per signed view URL, it answers whether nginx may send the file itself, and for how long it may keep that
 * answer in its `proxy_cache` keyed by the URL. A signed URL names one record until its expiry, so the
 * decision is the URL's alone (no cookie, no token counts here).
 */
import * as v from 'valibot'
import { AttachStorageError } from '../../errors.js'
import * as serving from '../../service/serving.js'
import { signatureIn } from '../../service/signing.js'
import type { ServiceContext } from '../../service/context.js'
import { parseInput } from '../../validation.js'
import { defineRoute, type Route } from '../router.js'
import { fileAnswer } from '../serve.js'
import { IdSegmentSchema, ResizeQuerySchema } from './schemas.js'
import { shownOf } from './serving.js'

/** The request header in which nginx tells its cache bound, in seconds. */
export const CACHE_BOUND_HEADER = 'x-attach-cache-bound'

/** The cache bound when nginx tells none, in seconds. */
export const DEFAULT_CACHE_BOUND = 60

/** The largest cache bound taken (a revoked record is served at most this long after its deletion). */
export const MAX_CACHE_BOUND = 3600

/** The answer's headers that carry what nginx sets on the file it sends (read with `auth_request_set`). */
export const DECISION_HEADERS = {
  file: 'x-attach-file',
  type: 'x-attach-content-type',
  disposition: 'x-attach-disposition',
  cache: 'x-attach-cache-control',
  csp: 'x-attach-csp',
} as const

/**
 * "Not decided here": a 403 that nginx never caches (`X-Accel-Expires: 0`); its `error_page 403` then asks
 * the view route itself, which answers as always (the file, a resized variant, a JSON refusal).
 */
const notHere = (why: string) =>
  new AttachStorageError('forbidden', `Not served by the front server: ${why}`, {
    status: 403,
    headers: { 'x-accel-expires': '0' },
  })

/** What the view of a picture browsers cannot show (HEIC) answers without a query: the JPEG it is shown as. */
const SHOWN = shownOf(v.parse(ResizeQuerySchema, {}), null)

const Bound = v.pipe(v.string(), v.regex(/^\d{1,6}$/, 'must be whole seconds'), v.transform(Number))

/** The decision route's query: the signed URL's own. */
export const DecideQuerySchema = v.object({ exp: v.pipe(v.string(), v.maxLength(12)), sig: v.pipe(v.string(), v.maxLength(64)) })

/**
 * The decision on the signed view of record `id` (`params`: the URL's query; `told`: nginx's
 * `X-Attach-Cache-Bound`): the 200's headers (`X-Accel-Expires` and the hand-off), or a refusal thrown.
 * The route answers it, and so does the Node fast path of views (`node/fast-views.ts`).
 */
export async function decideSignedView(
  ctx: ServiceContext,
  id: number,
  params: URLSearchParams,
  told: string | null,
): Promise<Array<[string, string]>> {
  const boundSeconds = told === null ? DEFAULT_CACHE_BOUND : Math.min(parseInput(Bound, told, CACHE_BOUND_HEADER), MAX_CACHE_BOUND)
  // Only the plain view of a signed URL: any other parameter (a resize, a preview) is the view route's.
  for (const k of params.keys()) if (k !== 'exp' && k !== 'sig') throw notHere('the view takes parameters')
  const signature = signatureIn(params)
  if (!signature || !ctx.signer?.verify(id, signature)) throw notHere('no valid signature')
  // The signature alone grants (a category without a secure-access function has no signed URLs).
  // A refusal (no such record, deleted, refused) is the view route's to answer: nginx's auth_request
  // takes only 2xx, 401 and 403.
  const target = await serving.resolveById(ctx, { id, shown: SHOWN }, { user: null, request: null, signature }).catch((err: unknown) => {
    throw err instanceof AttachStorageError && err.status < 500 ? notHere(err.message) : err
  })
  if (!target.private || target.delivery?.mode !== 'x-accel-redirect' || target.vary) {
    throw notHere('the file is not a guarded one nginx sends from its internal location')
  }
  const answer = await fileAnswer({ method: 'GET', header: () => null }, target, 'view')
  const header = (name: string) => answer.headers.find(([n]) => n === name)?.[1] ?? ''
  const secondsLeft = Number(signature.expires) - Math.floor(ctx.now().getTime() / 1000)
  const keep = Math.max(0, Math.min(secondsLeft, boundSeconds))
  return [
    ['x-accel-expires', String(keep)],
    [DECISION_HEADERS.file, target.delivery.uri],
    [DECISION_HEADERS.type, header('content-type')],
    [DECISION_HEADERS.disposition, header('content-disposition')],
    [DECISION_HEADERS.cache, header('cache-control')],
    [DECISION_HEADERS.csp, header('content-security-policy')],
    ['content-length', '0'],
  ]
}

/** The routes, tried before the file routes. */
export const authRequestRoutes: Route[] = [
  defineRoute({
    method: 'GET',
    path: 'attach-decide/view/:id',
    params: v.object({ id: IdSegmentSchema }),
    query: DecideQuerySchema,
    doc: {
      summary: "nginx's auth_request decision for a signed view URL",
      description: 'A 200 with the hand-off (`X-Attach-File` and the headers nginx sets) and `X-Accel-Expires`, else a 403 never cached.',
      responses: {
        200: {
          description: 'nginx may send the file itself for `X-Accel-Expires` seconds (no body)',
          headers: {
            'x-accel-expires': { description: 'Seconds nginx may keep this answer: min(exp - now, bound)', schema: { type: 'string' } },
            [DECISION_HEADERS.file]: { description: 'The X-Accel-Redirect target of the file', schema: { type: 'string' } },
          },
        },
      },
    },
    handle: async ({ params }, { ctx, url, request }) =>
      new Response(null, {
        status: 200,
        headers: await decideSignedView(ctx, params.id, url.searchParams, request.headers.get(CACHE_BOUND_HEADER)),
      }),
  }),
]
