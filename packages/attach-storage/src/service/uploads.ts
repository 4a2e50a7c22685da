/** Receiving files into the temporary area, the filter chain, temporary, direct and editor uploads. */
import type { Readable } from 'node:stream'
import { badRequest } from '../errors.js'
import type { FileProbe, FilterVerdict } from '../filters/filters.js'
import { explainStored, isAnalysed } from '../media/analyse.js'
import { extensionOf, sniffType } from '../media/sniff.js'
import type { MediaInfo } from '../model.js'
import type { RegisteredCategory } from '../registry/registry.js'
import { renameAcross } from '../stores/local-store.js'
import type { Store } from '../stores/store.js'
import type { ServiceContext } from './context.js'
import { ingest } from './ingest.js'
import { analyseKept } from './media-kept.js'
import { directSavedDir, generateSavedName, storeKey } from './layout.js'
import { cleanDisplayName } from './names.js'
import { scanReceived } from './scan-kept.js'
import { admitUpload, releaseUploads, reserveUpload } from './quota.js'
import { stripOnReceipt, stripReceived } from './strip-kept.js'
import { tmpKey, type TmpMeta, tmpMetaKey } from './temporary.js'
import type { AccessContext, DirectItem, ReceivedFile, TemporaryItem } from './types.js'
import { directFileUrl, editorUrl } from './urls.js'

/** The domain of rich-text editor uploads. */
export const EDITOR_DOMAIN = 'editor'

/** Where an upload goes and which request filters it asks for. */
export interface UploadInput {
  refDomain: string
  /** @default 'default' */
  refCategory: string
  /** The request's `filters` object: keys of registered request filters act, others are ignored. */
  filters?: Record<string, unknown>
}

/**
 * Streams one uploaded file into the temporary area. Nothing is checked yet; call
 * {@link completeTemporaryUpload} or {@link completeDirectUpload}, or {@link discardReceived}.
 */
export async function receiveFile(
  ctx: ServiceContext,
  source: Readable,
  fileName: string,
  /** `strip`: a JPEG loses its EXIF, XMP and IPTC as it is received (its category strips them). */
  options: { maxSize?: number; signal?: AbortSignal; strip?: boolean } = {},
): Promise<ReceivedFile> {
  const displayName = cleanDisplayName(fileName)
  const extension = extensionOf(displayName)
  const name = generateSavedName(extension)
  const stripper = options.strip ? stripOnReceipt(source) : undefined
  const r = await ingest(ctx.stores.tmpStore, tmpKey(name), stripper?.stream ?? source, {
    maxSize: options.maxSize ?? ctx.config.upload.maxFileSize,
    signal: options.signal,
  }).catch((err) => {
    if (stripper) source.unpipe(stripper.stream).resume()
    throw err
  })
  ctx.observe.bytes('in', r.size)
  const file = { name, displayName, extension, ...r }
  stripper?.mark(file)
  return file
}

/** Removes received files (after a failed request) and forgets their quota reservations. */
export async function discardReceived(ctx: ServiceContext, files: ReceivedFile[]): Promise<void> {
  await Promise.all(
    files.flatMap((f) => [ctx.stores.tmpStore.delete(tmpKey(f.name)), ctx.stores.tmpStore.delete(tmpMetaKey(f.name))]),
  ).catch((err) => ctx.logger.warn('attach-storage: could not remove temporary files', err))
  await releaseUploads(
    ctx,
    files.map((f) => f.name),
  )
}

/**
 * Before a multipart temporary upload's body is read: 413 `quota-exceeded` when its user already holds
 * `upload.userQuota` in pending uploads (its size is known, and checked, once it is in).
 */
export function admitTemporaryUpload(ctx: ServiceContext, access: AccessContext): Promise<void> {
  return admitUpload(ctx, access.user, 'tmp')
}

/** What a filter is shown of a received file: its names, size, sniffed type, sha256, first bytes, and a way to read it all. */
export function probe(ctx: ServiceContext, file: ReceivedFile, type: string): FileProbe {
  return {
    displayName: file.displayName,
    extension: file.extension,
    size: file.size,
    type,
    sha256: file.sha256,
    head: file.head,
    open: () => ctx.stores.tmpStore.get(tmpKey(file.name)),
  }
}

/**
 * Parses a request's `filters` object: keys of registered request filters act (adding to the
 * category's chain); others are ignored with a warning.
 */
export function parseRequestFilters(
  ctx: ServiceContext,
  obj: Record<string, unknown> | undefined,
): Array<{ name: string; options: Record<string, unknown> }> {
  if (obj === undefined) return []
  const out: Array<{ name: string; options: Record<string, unknown> }> = []
  const ignored: string[] = []
  for (const [name, options] of Object.entries(obj)) {
    if (!ctx.registry.requestFilter(name)) {
      ignored.push(name)
      continue
    }
    if (options === null || typeof options !== 'object' || Array.isArray(options)) {
      throw badRequest(`filters.${name} must be an object of options`)
    }
    out.push({ name, options: options as Record<string, unknown> })
  }
  if (ignored.length) {
    // One line per request, whatever the client sent: names are quoted (JSON escapes control characters
    // and newlines), cut to 64 characters, and at most 10 are named.
    const shown = ignored.slice(0, 10).map((n) => JSON.stringify(n.length > 64 ? `${n.slice(0, 64)}…` : n))
    const more = ignored.length > shown.length ? ` and ${ignored.length - shown.length} more` : ''
    ctx.logger.warn(`attach-storage: request filters not registered, ignored: ${shown.join(', ')}${more}`)
  }
  return out
}

/** Runs a category's filter chain and the request's filters on a file; resolves with the first refusal, else undefined. */
export async function runFilters(
  ctx: ServiceContext,
  category: RegisteredCategory,
  requestFilters: Array<{ name: string; options: Record<string, unknown> }>,
  probe: FileProbe,
): Promise<{ code: string; message: string } | undefined> {
  const chain = [...category.filters, ...requestFilters.map((f) => ({ filter: ctx.registry.requestFilter(f.name)!, options: f.options }))]
  for (const { filter, options } of chain) {
    let verdict: FilterVerdict
    try {
      verdict = await filter.check(probe, options)
    } catch (err) {
      ctx.logger.error(`attach-storage: filter "${filter.name}" failed`, err)
      verdict = { code: filter.name, message: `${probe.displayName} could not be checked` }
    }
    if (verdict) return { code: String(verdict.code), message: String(verdict.message) }
  }
  return undefined
}

/**
 * Sniffs a received file's type and runs the filter chain on it: the type, or the refusal item (the file
 * is then removed).
 */
async function screen(
  ctx: ServiceContext,
  f: ReceivedFile,
  category: RegisteredCategory,
  requestFilters: Array<{ name: string; options: Record<string, unknown> }>,
): Promise<{ type: string } | { displayName: string; size: number; error: { code: string; message: string } }> {
  const type = await sniffType(f.head, f.displayName)
  const error = await runFilters(ctx, category, requestFilters, probe(ctx, f, type))
  if (!error) return { type }
  await discardReceived(ctx, [f])
  return { displayName: f.displayName, size: f.size, error }
}

/**
 * Step 1 of the two-step upload: runs the filter chain on received files and keeps the accepted ones in
 * the temporary area. Rejected files are removed and answered with `error`.
 */
export async function completeTemporaryUpload(
  ctx: ServiceContext,
  files: ReceivedFile[],
  input: UploadInput,
  access: AccessContext,
): Promise<TemporaryItem[]> {
  try {
    const target = uploadTarget(ctx, input)
    const items: TemporaryItem[] = []
    for (const f of files) items.push(await keepTemporary(ctx, f, target, access))
    return items
  } catch (err) {
    await discardReceived(ctx, files)
    throw err
  }
}

/**
 * One received file through its category's filters into the temporary area: its sidecar written and
 * `uploaded` emitted, or, refused, removed and answered with `error`; past the user's quota, removed
 * and thrown (413 `quota-exceeded`). The multipart temporary upload
 * and the completion of a resumable upload both end here.
 */
export async function keepTemporary(
  ctx: ServiceContext,
  f: ReceivedFile,
  target: ReturnType<typeof uploadTarget>,
  access: AccessContext,
): Promise<TemporaryItem> {
  const { category, refDomain, refCategory, requestFilters } = target
  const checked = await screen(ctx, f, category, requestFilters)
  if ('error' in checked) return checked
  const infected = await scanReceived(ctx, f, category)
  if (infected) return infected
  const { type } = checked
  // Stored JPEG, PNG and WebP lose their EXIF, XMP and IPTC; f's size and sha256 become the stored bytes'.
  const stripError = await stripReceived(ctx, f, category, type)
  if (stripError) {
    await discardReceived(ctx, [f])
    return { displayName: f.displayName, size: f.size, error: stripError }
  }
  // The image filter takes only pictures that decode: in such a category an image is analysed now, and one
  // the decoder refuses (truncated, corrupt, over the pixel limit: a HEIC bomb is refused from its header)
  // fails its item naming the problem. Elsewhere the analysis runs in the background (analyseKept).
  let media: MediaInfo | undefined
  if (isAnalysed(type) && category.filters.some((x) => x.filter.name === 'image')) {
    const analysis = await explainStored(ctx.stores.tmpStore, tmpKey(f.name), type, f.size, ctx.config.resize)
    if (analysis.problem !== undefined) {
      await discardReceived(ctx, [f])
      return { displayName: f.displayName, size: f.size, error: { code: 'corrupt', message: `${f.displayName}: ${analysis.problem}` } }
    }
    media = analysis.media ?? undefined
  }
  // Counted against the user's quota until it is committed, deleted or expires (a completed tus upload's
  // reservation becomes this one); past the quota the file goes and the request answers 413.
  try {
    await reserveUpload(ctx, { name: f.name, user: access.user, bytes: f.size, kind: 'tmp' })
  } catch (err) {
    await discardReceived(ctx, [f])
    throw err
  }
  const meta: TmpMeta = {
    name: f.name,
    displayName: f.displayName,
    size: f.size,
    type,
    sha256: f.sha256,
    refDomain,
    refCategory,
    createdBy: access.user?.id ?? null,
    createdDt: ctx.now().toISOString(),
    // An image's media is learnt from the final temporary bytes in the background (the commit waits for
    // it, or analyses the file itself) unless it was learnt above; anything else has none.
    ...(media ? { media } : isAnalysed(type) ? {} : { media: null }),
  }
  await ctx.stores.tmpStore.put(tmpMetaKey(f.name), Buffer.from(JSON.stringify(meta)), { contentType: 'application/json' })
  if (!media) analyseKept(ctx, meta)
  ctx.events.emit('uploaded', {
    kind: 'temporary',
    refDomain,
    refCategory,
    name: f.name,
    savedDir: null,
    displayName: f.displayName,
    size: f.size,
    type,
    sha256: f.sha256,
    user: access.user,
  })
  return {
    name: f.name,
    displayName: f.displayName,
    size: f.size,
    type,
    url: null,
    thumbnailUrl: null,
    deleteUrl: null,
    deleteType: 'DELETE',
  }
}

/** The domain, category and request filters of an upload (400 for an unknown domain or category). */
export function uploadTarget(ctx: ServiceContext, input: UploadInput) {
  const { refDomain, refCategory } = input
  const category = ctx.registry.category(refDomain, refCategory)
  const requestFilters = parseRequestFilters(ctx, input.filters)
  return { domain: ctx.registry.domain(refDomain), category, refDomain, refCategory, requestFilters }
}

/**
 * Direct upload: filters, then the file goes straight to its final place
 * `/{refDomain}/{yyyy}/{MM}/_/{refCategory}/`; no record is made.
 */
export async function completeDirectUpload(
  ctx: ServiceContext,
  files: ReceivedFile[],
  input: UploadInput,
  access: AccessContext,
  kind: 'direct' | 'editor' = 'direct',
): Promise<DirectItem[]> {
  const done: Array<{ store: Store; key: string }> = []
  try {
    const { domain, category, refDomain, refCategory, requestFilters } = uploadTarget(ctx, input)
    const store = ctx.store(domain.store)
    const savedDir = directSavedDir(refDomain, refCategory, ctx.now(), ctx.config.timeZone)
    const items: DirectItem[] = []
    for (const f of files) {
      const checked = await screen(ctx, f, category, requestFilters)
      if ('error' in checked) {
        items.push(checked)
        continue
      }
      const infected = await scanReceived(ctx, f, category)
      if (infected) {
        items.push(infected)
        continue
      }
      const { type } = checked
      const stripError = await stripReceived(ctx, f, category, type)
      if (stripError) {
        items.push({ displayName: f.displayName, size: f.size, error: stripError })
        await discardReceived(ctx, [f])
        continue
      }
      const key = storeKey(savedDir, f.name)
      await transfer(ctx.stores.tmpStore, tmpKey(f.name), store, key, type)
      done.push({ store, key })
      ctx.events.emit('uploaded', {
        kind,
        refDomain,
        refCategory,
        name: f.name,
        savedDir,
        displayName: f.displayName,
        size: f.size,
        type,
        sha256: f.sha256,
        user: access.user,
      })
      items.push({
        name: f.name,
        savedDir,
        url:
          kind === 'editor'
            ? editorUrl(ctx, domain.store, refCategory, savedDir, f.name, type)
            : directFileUrl(ctx, domain.store, refDomain, refCategory, savedDir, f.name, type),
        displayName: f.displayName,
        size: f.size,
        type,
      })
    }
    return items
  } catch (err) {
    await discardReceived(ctx, files)
    await Promise.all(done.map((d) => d.store.delete(d.key).catch(() => undefined)))
    throw err
  }
}

/**
 * Moves a file between stores: a rename on one local file system, else stream copy + delete. Durable
 * once it resolves: a rename is followed by an fsync of both directories (a put fsyncs itself).
 */
export async function transfer(from: Store, fromKey: string, to: Store, toKey: string, contentType?: string): Promise<void> {
  if (from === to) return to.move(fromKey, toKey)
  if (await renameAcross(from, fromKey, to, toKey)) return
  const { size } = await from.stat(fromKey)
  await to.put(toKey, await from.get(fromKey), { contentType, size })
  await from.delete(fromKey)
}

/**
 * Rich-text editor upload: a direct upload into domain `editor` (category `default` unless given),
 * through that category's filters (images only by default). Answers the direct items, whose `url` is
 * the editor image route (or the CDN address).
 */
export function completeEditorUpload(
  ctx: ServiceContext,
  files: ReceivedFile[],
  input: { refCategory?: string },
  access: AccessContext,
): Promise<DirectItem[]> {
  return completeDirectUpload(ctx, files, { refDomain: EDITOR_DOMAIN, refCategory: input.refCategory ?? 'default' }, access, 'editor')
}
