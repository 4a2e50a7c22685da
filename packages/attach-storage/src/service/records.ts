/** Lookups, counts, the conditional list, `direct-url`, metadata updates and permanent deletes. */
import { badRequest, forbidden, notFound } from '../errors.js'
import { LIST_HEADERS, type ListRequest, type ListResult, parseListRequest } from '../list/list-query.js'
import { isResizable, variantPrefix } from '../media/resize.js'
import type { AttachmentRecord, AttachmentView } from '../model.js'
import { ATTACHMENT_LIST, type MetadataUpdate } from '../repository/attach-repository.js'
import { checkAccess, describeRecord, ownedRecords } from './access.js'
import type { ServiceContext } from './context.js'
import { dropBlob } from './housekeeping.js'
import { checkRefKey, storeKey } from './layout.js'
import { type AccessContext, accessOf, type AttachBag, type LookupFilters, type LookupOptions } from './types.js'
import { namedOf, publicBase, readableViews, view } from './urls.js'
import { previewStates } from './previews.js'
import { madeVariants } from './variants.js'

/** Most matching rows a conditional list over guarded categories reads to find the readable ones. */
const GUARDED_LIST_MAX = 10_000

/** Pages rows already filtered in memory the way {@link runList} pages a query (same headers). */
function pageInMemory<T>(rows: T[], request: ListRequest, maxPerPage: number): ListResult<T> {
  const headers = new Headers()
  if (!request.paging) return { rows, headers }
  const perPage = Math.min(Math.floor(request.perPage), maxPerPage)
  const offset = (request.page - 1) * perPage
  if (!Number.isSafeInteger(offset)) throw badRequest(`currentPage ${request.page} is too large`)
  if (!request.skipCount) headers.set(LIST_HEADERS.totalCount, String(rows.length))
  headers.set(LIST_HEADERS.page, String(request.page))
  headers.set(LIST_HEADERS.dataCount, String(perPage))
  const result: ListResult<T> = { rows: rows.slice(offset, offset + perPage), page: request.page, perPage, headers }
  if (!request.skipCount) result.total = rows.length
  return result
}

/** One reference, or one of its categories. */
export interface ReferenceInput {
  refDomain: string
  refKey: string
  refCategory?: string
}

/** The conditional list's input: the references, and the list convention's request (page, `q`). */
export interface ReferencesListInput {
  refDomain: string
  refKeys: string[]
  /** Only these categories (default: every registered category of the domain). */
  refCategories?: string[]
  list: ListRequest
}

/** Reads the conditional list's query (list convention: `_usePaging`, `currentPage`, `dataPerPage`, `skipCount`, `q`). */
export function parseAttachmentList(params: URLSearchParams): ListRequest {
  return parseListRequest(params, ATTACHMENT_LIST)
}

/** Applies `ext`, `extAlt` and `fmetaValue` to one category's records (in `sort` order). */
export function applyFilters<T extends Pick<AttachmentRecord, 'ext' | 'fmetaValue'>>(list: T[], f: LookupFilters): T[] {
  let out = list
  if (f.fmetaValue !== undefined && f.fmetaValue !== '') out = out.filter((r) => r.fmetaValue === f.fmetaValue)
  if (f.ext !== undefined && f.ext !== '') out = out.filter((r) => r.ext === f.ext)
  if (f.extAlt !== undefined && f.extAlt !== '') {
    const alts = f.extAlt.split(':')
    let picked: T[] | undefined
    for (const alt of alts) {
      const m = out.filter((r) => r.ext === alt)
      if (m.length) {
        picked = m
        break
      }
    }
    out = picked ?? out.slice(0, 1)
  }
  return out
}

/** The access of an in-process call: an access context as given, or the host's request (or none) without a user. */
export function accessFrom(request: Request | AccessContext | null | undefined): AccessContext {
  return request instanceof Request || request === null || request === undefined ? accessOf(null, request ?? null) : request
}

const LOOKUP_OPTIONS = new Set(['category', 'filters', 'request'])

/** The options of a lookup; an unknown name (a typo that would drop a guard or a filter) throws 400. */
export function lookupOptions(options: LookupOptions): LookupOptions {
  for (const key of Object.keys(options)) {
    if (!LOOKUP_OPTIONS.has(key)) throw badRequest(`Unknown lookup option "${key}"; known options: category, filters, request`)
  }
  return options
}

/**
 * The AttachBag of a reference: `{refDomain, <category>: records[]}` in `sort` order, every registered
 * category of the domain present (or only `refCategory` when given).
 */
export async function lookup(
  ctx: ServiceContext,
  input: ReferenceInput & { filters?: LookupFilters },
  access: AccessContext,
): Promise<AttachBag> {
  const { refDomain, refCategory, filters = {} } = input
  const domain = ctx.registry.domain(refDomain)
  if (refCategory !== undefined) ctx.registry.category(refDomain, refCategory)
  const refKey = checkRefKey(input.refKey)
  const records = await ctx.repo.listByReference(refDomain, refKey, refCategory)
  const lists: Record<string, AttachmentView[]> = {}
  const cats = refCategory !== undefined ? [refCategory] : [...domain.categories.keys()]
  for (const c of cats) lists[c] = []
  const views = await readableViews(ctx, records, access)
  for (const c of new Set(views.map((v) => v.refCategory))) {
    lists[c] = applyFilters(
      views.filter((v) => v.refCategory === c),
      filters,
    )
  }
  // `refDomain` first, as answered before.
  return { refDomain, ...lists } as AttachBag
}

/** The number of attachments of one reference category that the request may read. */
export async function count(ctx: ServiceContext, input: Required<ReferenceInput>, access: AccessContext): Promise<number> {
  const { refDomain, refKey, refCategory } = input
  const category = ctx.registry.category(refDomain, refCategory)
  if (!category.secureAccess) return ctx.repo.countByReference(refDomain, checkRefKey(refKey), refCategory)
  const records = await ctx.repo.listByReference(refDomain, checkRefKey(refKey), refCategory)
  return (await readableViews(ctx, records, access)).length
}

/**
 * The conditional list: records of several references of a domain, ordered by refKey, refCategory,
 * sort, following the list and pagination convention (`_usePaging`, `currentPage`, `dataPerPage`,
 * `skipCount`, and `q` on displayName, ext, fmetaValue, fileType, createdDt). Each `url` carries the
 * record's index within its own reference category, whatever page it is on.
 */
export async function listByReferences(
  ctx: ServiceContext,
  input: ReferencesListInput,
  access: AccessContext,
): Promise<ListResult<AttachmentView>> {
  const { refDomain, refKeys, refCategories, list: request } = input
  const domain = ctx.registry.domain(refDomain)
  for (const c of refCategories ?? []) ctx.registry.category(refDomain, c)
  const keys = refKeys.map(checkRefKey)
  const selected = refCategories ?? [...domain.categories.keys()]
  const guarded = selected.some((c) => domain.categories.get(c)?.secureAccess !== undefined)
  const list = (req: typeof request, cap?: number) =>
    ctx.repo.listConditional({ refDomain, refKeys: keys, refCategories: selected, list: req, cap })
  let result: ListResult<AttachmentRecord>
  if (!guarded) {
    result = await list(request)
  } else {
    // A secure-access function is code, not SQL: the readable rows are found in memory, from at most
    // GUARDED_LIST_MAX matching rows, then paged there, so counts and pages leave out what the caller
    // may not read.
    const all = await list({ ...request, paging: false }, GUARDED_LIST_MAX)
    if (all.rows.length > GUARDED_LIST_MAX) {
      throw badRequest(`More than ${GUARDED_LIST_MAX} attachments match; narrow refKeyList, refCategoryList or q`)
    }
    const readable: AttachmentRecord[] = []
    for (const r of all.rows) {
      const category = domain.categories.get(r.refCategory)!
      if (!category.secureAccess || (await checkAccess(ctx, access, category, describeRecord(r)))) readable.push(r)
    }
    result = pageInMemory(readable, request, ATTACHMENT_LIST.maxPerPage!)
  }
  // Each record's index within its reference category, from the full ordered lists of the page's references.
  const pageKeys = [...new Set(result.rows.map((r) => r.refKey))]
  const index = new Map<number, number>()
  if (pageKeys.length) {
    const all = await ctx.repo.listByReferences(refDomain, pageKeys, refCategories)
    const pos = new Map<string, number>()
    for (const r of all) {
      const k = `${r.refKey}\u0000${r.refCategory}`
      const i = pos.get(k) ?? 0
      pos.set(k, i + 1)
      index.set(r.id, i)
    }
  }
  const made = await madeVariants(ctx, result.rows)
  const previews = await previewStates(ctx, result.rows)
  return {
    ...result,
    rows: result.rows.map((r) =>
      view(
        ctx,
        r,
        index.get(r.id) ?? 0,
        domain.categories.get(r.refCategory)?.secureAccess !== undefined,
        namedOf(ctx, r, made),
        previews.get(r.id),
      ),
    ),
  }
}

/** The real address of the `index`-th (in `sort` order) attachment of a reference category. */
export async function directUrl(
  ctx: ServiceContext,
  input: Required<ReferenceInput> & { index: number },
  access: AccessContext,
): Promise<string> {
  const { refCategory, index } = input
  const category = ctx.registry.category(input.refDomain, refCategory)
  const list = await ctx.repo.listByReference(input.refDomain, checkRefKey(input.refKey), refCategory)
  const r = list[index]
  if (!r) throw notFound(`No attachment at index ${index} of ${input.refDomain}/${String(input.refKey)}/${refCategory}`)
  const byId = `${ctx.config.assetsPrefix}/attach/view/${r.id}`
  if (category.secureAccess) {
    // A guarded file's real address is the guarded route, signed for a caller who may read it.
    if (!(await checkAccess(ctx, access, category, describeRecord(r)))) throw forbidden()
    return ctx.signer ? `${byId}?${ctx.signer.query(r.id)}` : byId
  }
  const cdn = publicBase(ctx, r.store, false, r.fileType)
  return cdn ? cdn + storeKey(r.savedDir, r.savedName) : byId
}

/** `{cdnUrl, domains: {<domain>: {store, categories}}}`. */
export function describe(ctx: ServiceContext): { cdnUrl: string | null; domains: Record<string, { store: string; categories: string[] }> } {
  const domains: Record<string, { store: string; categories: string[] }> = {}
  for (const d of ctx.registry.domains()) domains[d.name] = { store: d.store, categories: [...d.categories.keys()] }
  return { cdnUrl: ctx.config.cdnUrl ?? null, domains }
}

/**
 * PUT `/attach/`: updates `displayName`, `ext`, `fmetaValue`, `sort` and `focus` of the listed records,
 * all or nothing, only when the caller may change every one of them. Other fields are never written; ids
 * of no live record are passed over. A focus (not `null`) on a record that is not an image answers 400;
 * a changed focus deletes the record's stored cover crops (made again around the new one on next view).
 */
export async function update(ctx: ServiceContext, items: MetadataUpdate[], access: AccessContext): Promise<number> {
  const records = await ownedRecords(
    ctx,
    items.map((x) => x.id),
    access,
  )
  const known = new Set(records.map((r) => r.id))
  for (const r of records) {
    if (!isResizable(r.fileType) && !/^image\/hei[cf]$/.test(r.fileType) && items.some((x) => x.id === r.id && x.focus)) {
      throw badRequest(`focus: attachment ${r.id} is not an image (${r.fileType})`)
    }
  }
  const changed = await ctx.repo.updateMetadata(items.filter((x) => known.has(x.id)))
  // Cover crops made for a focus a record no longer has are never served again: their files go.
  const moved = records.filter((r) => items.some((x) => x.id === r.id && x.focus !== undefined && !sameFocus(x.focus, r.focus)))
  for (const r of moved) await dropCoverCrops(ctx, r)
  return changed
}

const sameFocus = (a: AttachmentRecord['focus'], b: AttachmentRecord['focus']): boolean =>
  (a ?? null) === (b ?? null) || (!!a && !!b && a.x === b.x && a.y === b.y)

/** Deletes a record's stored cover crops (`{w}x{h}c...` under `_v/{id}/`); the other sizes stay. */
async function dropCoverCrops(ctx: ServiceContext, r: AttachmentRecord): Promise<void> {
  try {
    const store = ctx.store(r.store)
    const prefix = variantPrefix(storeKey(r.savedDir, ''), r.id)
    await ctx.resizer.settledUnder(store.name, prefix)
    for await (const e of store.list(prefix)) if (/^\d+x\d+c/.test(e.key.slice(prefix.length))) await store.delete(e.key)
    ctx.resizer.forget(store.name, prefix)
  } catch (err) {
    ctx.logger.warn(`attach-storage: deleting the cover crops of attachment ${r.id} failed`, err)
  }
}

/** POST `/attach`: permanently deletes the listed records (and files no other record uses). */
export async function remove(ctx: ServiceContext, ids: number[], access: AccessContext): Promise<number> {
  const records = await ownedRecords(ctx, ids, access)
  return deleteRecords(
    ctx,
    records.map((r) => r.id),
  )
}

/** Deletes records; a physical file goes with its last record. Returns how many records went. */
export async function deleteRecords(ctx: ServiceContext, ids: number[]): Promise<number> {
  if (!ids.length) return 0
  const { deleted, orphanBlobs } = await ctx.repo.markDeleted(ids)
  await Promise.all([...orphanBlobs.map((b) => dropBlob(ctx, b)), ...deleted.map((r) => dropVariants(ctx, r))])
  if (deleted.length) ctx.events.emit('deleted', { records: deleted })
  return deleted.length
}

/** Deletes every resize variant of a record (they live beside the original, under `_v/{id}/`). */
export async function dropVariants(ctx: ServiceContext, r: AttachmentRecord): Promise<void> {
  try {
    const store = ctx.store(r.store)
    const prefix = variantPrefix(storeKey(r.savedDir, ''), r.id)
    // A variant answered already and still being written lands first, then goes with the others.
    await ctx.resizer.settledUnder(store.name, prefix)
    ctx.resizer.forget(store.name, prefix)
    for await (const e of store.list(prefix)) await store.delete(e.key)
  } catch (err) {
    ctx.logger.warn(`attach-storage: deleting the variants of attachment ${r.id} failed`, err)
  }
}
