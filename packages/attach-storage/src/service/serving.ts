/** What the binary group serves: records by id or reference (with resized variants), temporary, direct and editor files. */
import { forbidden, notFound } from '../errors.js'
import {
  checkAllowedSize,
  isResizable,
  type ResizeRequest,
  type VariantOptions,
  variantKey,
  variantPrefix,
  variantSegment,
  variantType,
  withFocus,
} from '../media/resize.js'
import { isHeic } from '../media/heic.js'
import { sniffType } from '../media/sniff.js'
import type { AttachmentRecord } from '../model.js'
import { checkAccess, describeRecord, mayReadTemporary, signedFor, syntheticDescription } from './access.js'
import type { ServiceContext } from './context.js'
import { checkRefKey, parseDirectPath, SAVED_NAME, storeKey } from './layout.js'
import { applyFilters } from './records.js'
import { namedResize, recordNamedVariant, shownSizeOf } from './variants.js'
import { madePreview, previewKindOf } from './previews.js'
import { readHead, readTmpMeta, tmpKey } from './temporary.js'
import type { RegisteredCategory } from '../registry/registry.js'
import type { Store } from '../stores/store.js'
import type { AccessContext, Delivery, LookupFilters, ServeTarget } from './types.js'
import { EDITOR_DOMAIN } from './uploads.js'

/** How a saved file is to be served: resized or not, and whether only its headers are wanted (HEAD). */
export interface ServeOptions {
  resize?: ResizeRequest
  /**
   * A view's conversion of a picture browsers cannot show (HEIC), used when `resize` is not set: a view
   * of such a record answers a JPEG (or this format), a download the original bytes.
   */
  shown?: ResizeRequest
  /**
   * `?preview=1`: a PDF's or a video's preview image itself (`thumbnailUrl`); 404 `no-preview` for other
   * files. Not with `resize`.
   */
  preview?: boolean
  /** HEAD: a missing variant is not made (the stored variant's headers, else the original's). */
  lookOnly?: boolean
  /**
   * The request's conditional headers, asked of a file before it is read or made: true when the client
   * holds it already (the answer is then 304). A resized variant is asked before any resize runs.
   */
  notModified?: (target: Pick<ServeTarget, 'etag' | 'lastModified' | 'cache'>) => boolean
}

/** Most records pointing at one stored file whose variant folders are listed to count its stored variants. */
const MAX_LISTED_RECORDS = 64

/** Resolves a saved attachment by id, checking the category's secure-access function (or a signed URL). */
export async function resolveById(ctx: ServiceContext, input: { id: number } & ServeOptions, access: AccessContext): Promise<ServeTarget> {
  const r = await ctx.repo.findById(input.id)
  if (!r) throw notFound(`No attachment ${input.id}`)
  return serveRecord(ctx, access, r, 'immutable', input)
}

/** Resolves the `idx`-th attachment of a reference (after `ext`/`extAlt`/`fmetaValue`). */
export async function resolveByReference(
  ctx: ServiceContext,
  ref: { refDomain: string; refKey: string; refCategory: string; idx: number; filters?: LookupFilters } & ServeOptions,
  access: AccessContext,
): Promise<ServeTarget> {
  ctx.registry.category(ref.refDomain, ref.refCategory)
  const records = await ctx.repo.listByReference(ref.refDomain, checkRefKey(ref.refKey), ref.refCategory)
  const r = applyFilters(records, ref.filters ?? {})[ref.idx]
  if (!r) throw notFound(`No attachment at index ${ref.idx} of ${ref.refDomain}/${ref.refKey}/${ref.refCategory}`)
  return serveRecord(ctx, access, r, 'revalidate', ref)
}

/** What to serve for a saved record: access checked (or a signed URL), then the original or a resized variant. */
export async function serveRecord(
  ctx: ServiceContext,
  access: AccessContext,
  r: AttachmentRecord,
  cache: ServeTarget['cache'],
  { resize, shown, preview, lookOnly = false, notModified }: ServeOptions,
): Promise<ServeTarget> {
  const category = ctx.registry.domain(r.refDomain).categories.get(r.refCategory)
  if (!category) throw notFound(`No attachment ${r.id}`)
  if (!signedFor(ctx, access, r.id, category) && !(await checkAccess(ctx, access, category, describeRecord(r)))) {
    throw forbidden()
  }
  const store = ctx.store(r.store)
  const key = storeKey(r.savedDir, r.savedName)
  // What a resize is made from: the file, or a PDF's or a video's preview image.
  let source = { key, type: r.fileType }
  // A named variant's box is the category's own; any other box must be one of its `sizes`.
  if (resize?.variant !== undefined) resize = namedResize(category, resize.variant)
  else if (resize) checkAllowedSize(category.sizes, resize)
  else if (shown && isHeic(r.fileType)) resize = shown
  // A cover crop is the record's focus's: a changed focus is a new variant, and a view by id revalidates.
  if (resize?.fit === 'cover') {
    resize = withFocus(resize, r.focus)
    cache = 'revalidate'
  }
  const kind = previewKindOf(r.fileType)
  const previewed = kind === 'pdf' || kind === 'video'
  // The preview image itself, when one is asked for: the answer when no resize is needed.
  let madeImage: ServeTarget | undefined
  if (preview || (resize && previewed)) {
    // A PDF's or a video's image: its preview (made in the background), or a resize of it.
    const made = await madePreview(ctx, r)
    madeImage = {
      store,
      key: made.key,
      displayName: r.displayName.replace(/(\.[^.]*)?$/, '.jpg'),
      fileType: 'image/jpeg',
      fileSize: made.size,
      etag: `${r.sha256}-preview`,
      lastModified: new Date(r.createdDt),
      cache,
      private: category.secureAccess !== undefined,
      delivery: deliveryOf(ctx, store, made.key, category),
    }
    if (!resize) return madeImage
    source = { key: made.key, type: 'image/jpeg' }
  }
  if (resize && isResizable(source.type)) {
    const vkey = variantKey(storeKey(r.savedDir, ''), r.id, resize)
    // A variant's ETag is the original's hash and the box: a client that holds it gets its 304 before
    // anything is resized (or even looked for).
    const etag = resize.fit
      ? `${r.sha256}-${variantSegment(resize)}`
      : `${r.sha256}-${resize.w ?? 0}x${resize.h ?? 0}${resize.format ?? ''}`
    const lastModified = new Date(r.createdDt)
    if (notModified?.({ etag, lastModified, cache })) {
      const type = variantType(source.type, resize)
      return {
        store,
        key: vkey,
        displayName: variantName(r.displayName, resize, r.fileType, source.key !== key),
        fileType: type,
        fileSize: 0,
        etag,
        lastModified,
        cache,
        private: category.secureAccess !== undefined,
        vary: resize.negotiated ? 'Accept' : undefined,
      }
    }
    // HEAD makes no variant: a stored one answers its own headers, else the original's (see serveFile).
    const variant = await ctx.resizer.variant(
      store,
      source.key,
      vkey,
      source.type,
      resize,
      (err) => ctx.logger.warn(`attach-storage: attachment ${r.id} could not be resized; serving the original`, err),
      { lookOnly, storedFile: storedFileOf(ctx, r), size: source.key === key ? shownSizeOf(r.media) : undefined },
    )
    const named = resize.variant !== undefined ? category.variants.get(resize.variant) : undefined
    if (named && variant?.bytes && !variant.transient) {
      // Made by this view before its job ran: the lookup lists it from now on (the job finds it made).
      recordNamedVariant(ctx, r, resize.variant!, named, variant).catch((err: unknown) =>
        ctx.logger.warn(`attach-storage: variant "${resize.variant}" of attachment ${r.id} is made but not recorded`, err),
      )
    }
    if (variant) {
      // A variant made by this request (or kept in memory) is answered from its bytes.
      const delivery = variant.bytes ? undefined : deliveryOf(ctx, store, variant.key, category)
      return {
        store,
        key: variant.key,
        displayName: variantName(r.displayName, resize, r.fileType, source.key !== key),
        fileType: variant.type,
        fileSize: variant.size,
        etag,
        lastModified,
        cache,
        private: category.secureAccess !== undefined,
        vary: resize.negotiated ? 'Accept' : undefined,
        bytes: variant.bytes,
        delivery,
      }
    }
  }
  // A box the preview fits in already (or a preview the resizer could not read): the preview itself.
  if (madeImage) return madeImage
  return {
    store,
    key,
    displayName: r.displayName,
    fileType: r.fileType,
    fileSize: r.fileSize,
    etag: r.sha256,
    lastModified: new Date(r.createdDt),
    cache,
    private: category.secureAccess !== undefined,
    vary: resize?.negotiated ? 'Accept' : undefined,
    delivery: deliveryOf(ctx, store, key, category),
  }
}

/**
 * A variant's download name: the original's, with the extension of its `format` when it has one (JPEG
 * for a HEIC photo's, and for one made from a PDF's or a video's preview).
 */
function variantName(displayName: string, resize: ResizeRequest, originalType: string, fromPreview = false): string {
  const format = resize.format ?? (isHeic(originalType) || fromPreview ? 'jpeg' : undefined)
  const ext = format ? `.${format === 'jpeg' ? 'jpg' : format}` : undefined
  return ext ? displayName.replace(/(\.[^.]*)?$/, ext) : displayName
}

/**
 * The stored file a record points at, for the resizer's count of stored variants: the variant folders of
 * every live record on it (several after a reuse by `savedDir`), at most {@link MAX_LISTED_RECORDS}.
 */
function storedFileOf(ctx: ServiceContext, r: AttachmentRecord): VariantOptions['storedFile'] {
  return {
    id: String(r.blobId),
    variantFolders: async () => {
      const ids = await ctx.repo.recordIdsOfBlob(r.blobId, MAX_LISTED_RECORDS + 1)
      if (ids.length > MAX_LISTED_RECORDS) return undefined
      return [...new Set([r.id, ...ids])].map((id) => variantPrefix(storeKey(r.savedDir, ''), id))
    },
  }
}

/**
 * Who sends the bytes of a checked file, by its store's `serve` setting; undefined: this process
 * streams them. A guarded category's files never leave through a presigned address unless the
 * category allows it (`allowRedirect`): such an address is readable by anyone holding it.
 */
export function deliveryOf(ctx: ServiceContext, store: Store, key: string, category: RegisteredCategory): Delivery | undefined {
  const serving = ctx.stores.serving.get(store.name)
  switch (serving?.mode) {
    case 'x-accel-redirect':
      return { mode: 'x-accel-redirect', uri: serving.location + key.split('/').map(encodeURIComponent).join('/') }
    case 'x-sendfile':
      return store.localPath ? { mode: 'x-sendfile', path: store.localPath(key) } : undefined
    case 'redirect':
      return category.secureAccess && !category.allowRedirect ? undefined : { mode: 'redirect', ttlSeconds: serving.ttlSeconds }
    default:
      return undefined
  }
}

/**
 * Resolves a temporary file for preview (synthetic file description; no resizing), but for a HEIC
 * photo's view (`shown`): a JPEG (or the asked format) made on the fly, bounded like every resize, kept
 * in memory for a while and never stored, so a picked iPhone photo shows before it is saved.
 */
export async function resolveTemporary(
  ctx: ServiceContext,
  input: { refDomain: string; refCategory: string; savedName: string; shown?: ResizeRequest },
  access: AccessContext,
): Promise<ServeTarget> {
  const { refDomain, refCategory, savedName } = input
  const category = ctx.registry.category(refDomain, refCategory)
  if (!SAVED_NAME.test(savedName)) throw notFound('No such temporary file')
  const meta = await readTmpMeta(ctx, savedName)
  if (!meta || meta.refDomain !== refDomain || meta.refCategory !== refCategory) throw notFound('No such temporary file')
  if (!(await mayReadTemporary(ctx, access, category, meta))) throw forbidden()
  const stat = await ctx.stores.tmpStore.stat(tmpKey(savedName))
  const shown = input.shown
  if (shown && isHeic(meta.type) && shown.variant === undefined) {
    const key = `${tmpKey(savedName)}_v/${variantSegment(shown)}`
    const onError = (err: unknown) => ctx.logger.warn(`attach-storage: temporary file ${savedName} could not be shown`, err)
    const v = await ctx.resizer.variant(ctx.stores.tmpStore, tmpKey(savedName), key, meta.type, shown, onError, { unstored: true })
    if (v?.bytes) {
      return {
        store: ctx.stores.tmpStore,
        key,
        displayName: variantName(meta.displayName, shown, meta.type),
        fileType: v.type,
        fileSize: v.size,
        etag: `${meta.sha256}-${variantSegment(shown)}`,
        lastModified: stat.lastModified,
        cache: 'immutable',
        private: true,
        vary: shown.negotiated ? 'Accept' : undefined,
        bytes: v.bytes,
      }
    }
  }
  return {
    store: ctx.stores.tmpStore,
    key: tmpKey(savedName),
    displayName: meta.displayName,
    fileType: meta.type,
    fileSize: stat.size,
    etag: meta.sha256,
    lastModified: stat.lastModified,
    cache: 'immutable',
    private: true,
  }
}

/** Resolves a directly uploaded file by its `path` (synthetic file description; no resizing). */
export async function resolveDirect(
  ctx: ServiceContext,
  input: { refDomain: string; refCategory: string; path: string | null },
  access: AccessContext,
): Promise<ServeTarget> {
  const { refDomain, refCategory, path } = input
  const domain = ctx.registry.domain(refDomain)
  const category = ctx.registry.category(refDomain, refCategory)
  const p = parseDirectPath(path, refDomain, refCategory)
  if (!p) throw notFound('No such direct file')
  if (!(await checkAccess(ctx, access, category, syntheticDescription(refDomain, refCategory, p.savedName)))) throw forbidden()
  const store = ctx.store(domain.store)
  const key = storeKey(p.savedDir, p.savedName)
  const stat = await store.stat(key)
  const head = await readHead(store, key)
  return {
    store,
    key,
    displayName: p.savedName,
    fileType: await sniffType(head, p.savedName),
    fileSize: stat.size,
    lastModified: stat.lastModified,
    cache: 'immutable',
    private: category.secureAccess !== undefined,
    delivery: deliveryOf(ctx, store, key, category),
  }
}

/** An editor image's address: `/editor/image/{refCategory}/{yyyy}/{MM}/{savedName}`. */
export interface EditorImageInput {
  refCategory: string
  /** Four digits. */
  yyyy: string
  /** Two digits. */
  MM: string
  savedName: string
}

/** Resolves an editor image (secure-access checked like direct files). */
export async function resolveEditorImage(ctx: ServiceContext, input: EditorImageInput, access: AccessContext): Promise<ServeTarget> {
  const { refCategory, yyyy, MM, savedName } = input
  const path = `/${EDITOR_DOMAIN}/${yyyy}/${MM}/_/${refCategory}/${savedName}`
  return resolveDirect(ctx, { refDomain: EDITOR_DOMAIN, refCategory, path }, access)
}
