/** The addresses a record or a direct file is answered with (CDN, guarded route, signed URL). */
import { isActiveContent } from '../media/sniff.js'
import type { AttachmentRecord, AttachmentView, PreviewState } from '../model.js'
import { previewStates } from './previews.js'
import { checkAccess, describeRecord } from './access.js'
import type { ServiceContext } from './context.js'
import type { AccessContext } from './types.js'
import { storeKey } from './layout.js'
import { madeVariants, namedVariantsOf } from './variants.js'
import { EDITOR_DOMAIN } from './uploads.js'

/** The CDN address of a store's files (the store's `cdn-url`, else the global one), or undefined. */
export function cdnBase(ctx: ServiceContext, storeName: string): string | undefined {
  const s = ctx.stores.settings.get(storeName)?.cdnUrl
  return typeof s === 'string' && s ? (s.endsWith('/') ? s : `${s}/`) : ctx.config.cdnUrl
}

/**
 * The CDN address base for a file of `type` in a store, or undefined when the file must go through the
 * binary routes: a guarded category's files (a CDN cannot ask the secure-access function), and active
 * content, what the binary routes serve as a download only (HTML, SVG, XML, JavaScript, ...: `isActiveContent`,
 * the rule `http/serve.ts` applies): on the bucket's or CDN's origin such a page would run as that origin.
 */
export function publicBase(ctx: ServiceContext, storeName: string, guarded: boolean, type: string): string | undefined {
  return guarded || isActiveContent(type) ? undefined : cdnBase(ctx, storeName)
}

/**
 * The address of a directly uploaded file of `type`: its CDN address, else the `attach-direct` view route
 * (always for a guarded category and for active content).
 */
export function directFileUrl(
  ctx: ServiceContext,
  storeName: string,
  refDomain: string,
  refCategory: string,
  savedDir: string,
  name: string,
  type: string,
): string {
  const guarded = ctx.registry.domain(refDomain).categories.get(refCategory)?.secureAccess !== undefined
  const cdn = publicBase(ctx, storeName, guarded, type)
  if (cdn) return cdn + storeKey(savedDir, name)
  const path = encodeURIComponent(savedDir + name)
  return `${ctx.config.assetsPrefix}/attach-direct/view/${refDomain}/${refCategory}?path=${path}`
}

/**
 * The records the request may read, answered with `url` (and `cdnUrl`); `index` is each record's
 * position within its reference category among all its records (the slot a by-reference view names).
 * Records of a guarded category are left out unless its secure-access function allows the request.
 * `records` must be in reference, category and `sort` order.
 */
export async function readableViews(ctx: ServiceContext, records: AttachmentRecord[], access: AccessContext): Promise<AttachmentView[]> {
  const pos = new Map<string, number>()
  const out: AttachmentView[] = []
  const made = await madeVariants(ctx, records)
  const previews = await previewStates(ctx, records)
  for (const r of records) {
    const k = `${r.refKey}\u0000${r.refCategory}`
    const index = pos.get(k) ?? 0
    pos.set(k, index + 1)
    const category = ctx.registry.domain(r.refDomain).categories.get(r.refCategory)
    if (!category) continue // a category no longer registered serves nothing, so it lists nothing
    if (category.secureAccess && !(await checkAccess(ctx, access, category, describeRecord(r)))) continue
    out.push(view(ctx, r, index, category.secureAccess !== undefined, namedOf(ctx, r, made), previews.get(r.id)))
  }
  return out
}

/**
 * The named variants made for a record, as {@link view} takes them: undefined when its category names
 * none (or it is no image), else the names made so far (from {@link madeVariants}).
 */
export function namedOf(ctx: ServiceContext, r: AttachmentRecord, made: Map<number, string[]>): string[] | undefined {
  return namedVariantsOf(ctx, r) ? (made.get(r.id) ?? []) : undefined
}

/** The boxes of a record's named variants `named`, as its category declares them. */
function boxesOf(ctx: ServiceContext, r: AttachmentRecord, named: string[]): NonNullable<AttachmentView['variantBoxes']> {
  const declared = ctx.registry.domain(r.refDomain).categories.get(r.refCategory)?.variants
  const out: NonNullable<AttachmentView['variantBoxes']> = {}
  for (const n of named) {
    const box = declared?.get(n)
    if (box) out[n] = { ...box }
  }
  return out
}

/** The view route by id with `query`, signed for a guarded category. */
function viewByIdUrl(ctx: ServiceContext, id: number, query: string, guarded: boolean): string {
  const url = `${ctx.config.assetsPrefix}/attach/view/${id}?${query}`
  return guarded && ctx.signer ? `${url}&${ctx.signer.query(id)}` : url
}

/** The address of a record's named variant: the view route by id, signed for a guarded category. */
export function variantUrl(ctx: ServiceContext, id: number, name: string, guarded: boolean): string {
  return viewByIdUrl(ctx, id, `variant=${encodeURIComponent(name)}`, guarded)
}

/** The address of a PDF's or a video's preview image: the view route by id, signed for a guarded category. */
export function thumbnailUrl(ctx: ServiceContext, id: number, guarded: boolean): string {
  return viewByIdUrl(ctx, id, 'preview=1', guarded)
}

/**
 * A record as answered. A guarded record never carries a CDN or direct address: its `url` is the
 * guarded binary route, signed when signing is configured (the caller was allowed to read it). Nor does
 * active content (HTML, SVG, XML, JavaScript, ...): its `url` is the binary route, which serves it as a
 * download with a sandboxing Content-Security-Policy.
 */
export function view(
  ctx: ServiceContext,
  r: AttachmentRecord,
  index: number,
  guarded: boolean,
  named?: string[],
  preview?: PreviewState,
): AttachmentView {
  const { sha256: _s, store, blobId: _b, ...rest } = r
  // The named variants made so far, name to address, when the category names any; a PDF's or a video's
  // preview state, and its address once made.
  const variants = {
    ...(named
      ? {
          variants: Object.fromEntries(named.map((n) => [n, variantUrl(ctx, r.id, n, guarded)])),
          variantBoxes: boxesOf(ctx, r, named),
        }
      : {}),
    ...(preview ? { preview } : {}),
    ...(preview === 'made' ? { thumbnailUrl: thumbnailUrl(ctx, r.id, guarded) } : {}),
  }
  const cdn = publicBase(ctx, store, guarded, r.fileType)
  if (cdn) {
    const cdnUrl = cdn + storeKey(r.savedDir, r.savedName)
    return { ...rest, url: cdnUrl, cdnUrl, ...variants }
  }
  let url = `${ctx.config.assetsPrefix}/attach/view/${encodeURIComponent(r.refDomain)}/${encodeURIComponent(r.refKey)}/${encodeURIComponent(r.refCategory)}/${index}`
  if (guarded && ctx.signer) url += `?${ctx.signer.query(r.id)}`
  return { ...rest, url, ...variants }
}

/** The address of an editor image of `type`: its CDN address, else the editor image route (guarded, or an SVG). */
export function editorUrl(
  ctx: ServiceContext,
  storeName: string,
  refCategory: string,
  savedDir: string,
  name: string,
  type: string,
): string {
  const guarded = ctx.registry.domain(EDITOR_DOMAIN).categories.get(refCategory)?.secureAccess !== undefined
  const cdn = publicBase(ctx, storeName, guarded, type)
  if (cdn) return cdn + storeKey(savedDir, name)
  const [, , yyyy, MM] = savedDir.split('/')
  return `${ctx.config.assetsPrefix}/editor/image/${refCategory}/${yyyy}/${MM}/${name}`
}
