/** The JSON group's record routes: config, direct-url, lookups, `_count`, the conditional list, the confirmed save, PUT and delete. */
import * as v from 'valibot'
import { listResponse } from '../../list/list-query.js'
import { AttachBagSchema } from '../../service/bag.js'
import { commitBag } from '../../service/commit.js'
import * as records from '../../service/records.js'
import { cleanDisplayName, cleanText } from '../../service/names.js'
import { jsonObject } from '../../validation.js'
import { defineRoute, type Route } from '../router.js'
import { json } from '../respond.js'
import {
  boundedArray,
  boundedString,
  LookupQuerySchema,
  LooseIntegerSchema,
  NAME_MAX,
  PositiveIdSchema,
  RECORDS_MAX,
  RefKeySchema,
  SEGMENT_MAX,
  SegmentSchema,
  TEXT_MAX,
} from './schemas.js'

const Segment = SegmentSchema

const ReferenceParams = v.object({ refDomain: Segment, refKey: Segment, refCategory: v.optional(Segment) })

/** A comma-separated list, blanks dropped; undefined when empty. */
const CommaList = v.pipe(
  v.string(),
  v.transform((s) =>
    s
      .split(',')
      .map((x) => x.trim())
      .filter((x) => x !== ''),
  ),
)

/** `refDomain`, `refKeyList` (at most 1000 keys) and `refCategoryList` of the conditional list. */
const ListQuery = v.object({
  refDomain: v.pipe(boundedString(SEGMENT_MAX, 'refDomain is required'), v.nonEmpty('refDomain is required')),
  refKeyList: v.pipe(
    v.string('refKeyList is required'),
    v.maxLength(1000 * 256, 'refKeyList may name at most 1000 keys'),
    CommaList,
    v.minLength(1, 'refKeyList is required'),
    v.maxLength(1000, 'refKeyList may name at most 1000 keys'),
  ),
  refCategoryList: v.optional(v.pipe(boundedString(64 * 1024), CommaList)),
})

const DirectUrlBody = jsonObject(
  {
    refDomain: boundedString(SEGMENT_MAX, 'refDomain is required'),
    refKey: RefKeySchema,
    refCategory: v.optional(boundedString(SEGMENT_MAX), 'default'),
    index: v.optional(LooseIntegerSchema('index must be a non-negative integer', 0), 0),
  },
  'The body must be a JSON object',
)

/** The records to delete: `[{id}]`, at most {@link RECORDS_MAX}. */
const IdList = boundedArray(
  v.object({ id: PositiveIdSchema }),
  RECORDS_MAX,
  `The body must be an array of attachment records (at most ${RECORDS_MAX})`,
)

const DISPLAY_NAME = 'displayName must be a non-empty string'

/** `ext` or `fmetaValue` as clients send it (text, a number, or null), kept as text of at most 1024 units. */
const LooseText = v.pipe(
  v.nullable(v.union([boundedString(TEXT_MAX), v.number(), v.boolean()])),
  v.transform((x) => cleanText(x)),
)

const FOCUS = 'focus must be {x, y} with numbers from 0 to 1 (from the top left), or null'

/** A focus coordinate: a number from 0 to 1. */
const Unit = v.pipe(v.number(FOCUS), v.minValue(0, FOCUS), v.maxValue(1, FOCUS))

/** The records' new metadata: `[{id, displayName?, ext?, fmetaValue?, sort?, focus?}]` (at most {@link RECORDS_MAX}), cleaned as stored. */
const MetadataList = boundedArray(
  v.object({
    id: PositiveIdSchema,
    displayName: v.optional(
      v.pipe(
        boundedString(NAME_MAX, DISPLAY_NAME),
        v.check((s) => cleanDisplayName(s, '') !== '', DISPLAY_NAME),
        v.transform((s) => cleanDisplayName(s)),
      ),
    ),
    ext: v.optional(LooseText),
    fmetaValue: v.optional(LooseText),
    sort: v.optional(LooseIntegerSchema('sort must be a non-negative integer', 0)),
    /** An image's focal point for cover crops (0..1 from the top left); `null` clears it. */
    focus: v.optional(v.nullable(v.strictObject({ x: Unit, y: Unit }, FOCUS))),
  }),
  RECORDS_MAX,
  `The body must be an array of attachment records (at most ${RECORDS_MAX})`,
)

/** The routes, in the order they are tried. */
export const recordRoutes: Route[] = [
  defineRoute({
    method: 'GET',
    path: 'config',
    handle: async (_in, { ctx }) => json(records.describe(ctx)),
  }),
  defineRoute({
    method: 'POST',
    path: 'direct-url',
    body: DirectUrlBody,
    handle: async ({ body }, { ctx, access }) => json(await records.directUrl(ctx, body, access)),
  }),
  defineRoute({
    method: 'GET',
    path: 'attach',
    query: ListQuery,
    handle: async ({ query }, { ctx, access, url }) => {
      const input = {
        refDomain: query.refDomain,
        refKeys: query.refKeyList,
        refCategories: query.refCategoryList?.length ? query.refCategoryList : undefined,
        list: records.parseAttachmentList(url.searchParams),
      }
      return listResponse(await records.listByReferences(ctx, input, access))
    },
  }),
  defineRoute({
    method: 'POST',
    path: 'attach',
    body: IdList,
    handle: async ({ body }, { ctx, access }) => {
      const count = await records.remove(
        ctx,
        body.map((x) => x.id),
        access,
      )
      return json({ success: true, count })
    },
  }),
  defineRoute({
    method: 'PUT',
    path: 'attach/',
    body: MetadataList,
    handle: async ({ body }, { ctx, access }) => json({ success: true, count: await records.update(ctx, body, access) }),
  }),
  defineRoute({
    method: 'POST',
    path: 'attach/:refDomain/:refKey',
    params: ReferenceParams,
    body: AttachBagSchema,
    handle: async ({ params, body }, { ctx, access }) => {
      const attachList = await commitBag(ctx, { refDomain: params.refDomain, refKey: params.refKey, bag: body }, { access })
      return json({ success: true, attachList })
    },
  }),
  defineRoute({
    method: 'GET',
    path: 'attach/:refDomain/:refKey/:refCategory?',
    params: ReferenceParams,
    query: LookupQuerySchema,
    handle: async ({ params, query }, { ctx, access }) => json(await records.lookup(ctx, { ...params, filters: query }, access)),
  }),
  defineRoute({
    method: 'GET',
    path: 'attach/:refDomain/:refKey/:refCategory/_count',
    params: v.object({ refDomain: Segment, refKey: Segment, refCategory: Segment }),
    handle: async ({ params }, { ctx, access }) => json(await records.count(ctx, params, access)),
  }),
]
