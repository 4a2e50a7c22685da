/**
 * Named variants: the boxes a category names (`variants: {thumb: {w: 200, h: 200}}`), queued after each
 * save of an image into it, made in the background, listed by the lookup and served with `?variant=`.
 */
import { badRequest } from '../errors.js'
import { isResizable, type ResizeRequest, type Variant, variantKey, withFocus } from '../media/resize.js'
import type { AttachmentRecord, MediaInfo } from '../model.js'
import type { NamedVariant, RegisteredCategory } from '../registry/registry.js'
import { variantSpec } from '../repository/variant-rows.js'
import type { ServiceContext } from './context.js'
import { storeKey } from './layout.js'
import type { VariantJob } from './variant-queue.js'
import { isPreviewed, makePreview, PREVIEW_JOB, previewJobsOf, previewKey, previewRowOf, previewStateOf } from './previews.js'

/** What became of one job. */
export type VariantJobOutcome = 'made' | 'exists' | 'original' | 'gone'

/** The resize request of a category's named variant; 400 `unknown-variant` when the category has none of that name. */
export function namedResize(category: RegisteredCategory, name: string): ResizeRequest {
  const spec = category.variants.get(name)
  if (!spec) {
    const names = [...category.variants.keys()]
    throw badRequest(
      names.length ? `This category's variants are: ${names.join(', ')}` : 'This category has no named variants',
      'unknown-variant',
    )
  }
  return resizeOfNamed(name, spec)
}

/** The resize request that makes a named variant. */
function resizeOfNamed(name: string, spec: NamedVariant): ResizeRequest {
  return { w: spec.w, h: spec.h, format: spec.format, negotiated: false, variant: name, ...(spec.fit === 'cover' ? { fit: 'cover' } : {}) }
}

/**
 * The named variants a record has: its category's, when it is an image, or a PDF or a video with
 * previews on (made from its preview image); undefined otherwise.
 */
export function namedVariantsOf(ctx: ServiceContext, r: AttachmentRecord): ReadonlyMap<string, NamedVariant> | undefined {
  const category = ctx.registry.domain(r.refDomain).categories.get(r.refCategory)
  return category?.variants.size && (isResizable(r.fileType) || isPreviewed(ctx, r.fileType)) ? category.variants : undefined
}

/**
 * The jobs a save of these records calls for: one per named variant of each image's category, and one
 * preview job per PDF, video or audio file (whose named variants are queued once its preview is made).
 */
export function variantJobsOf(ctx: ServiceContext, records: readonly AttachmentRecord[]): VariantJob[] {
  const jobs: VariantJob[] = previewJobsOf(ctx, records)
  for (const r of records) {
    if (isPreviewed(ctx, r.fileType)) continue
    for (const name of namedVariantsOf(ctx, r)?.keys() ?? []) jobs.push({ fileId: r.id, name })
  }
  return jobs
}

/**
 * Queues the named variants and previews of saved records. A failure to queue is logged, not thrown: the
 * save stands, and the variant is made on its first view (or by `attach-storage variants make`).
 */
export async function queueNamedVariants(ctx: ServiceContext, records: readonly AttachmentRecord[]): Promise<void> {
  await queueJobs(ctx, variantJobsOf(ctx, records))
}

/** Queues these jobs; a failure to queue is logged, not thrown. */
export async function queueJobs(ctx: ServiceContext, jobs: VariantJob[]): Promise<void> {
  if (!jobs.length || !ctx.variantJobs) return
  try {
    await ctx.variantJobs.enqueue(jobs)
  } catch (err) {
    ctx.logger.warn(`attach-storage: ${jobs.length} named variant job(s) could not be queued; they are made on first view`, err)
  }
}

/**
 * Makes one named variant of a record (the job's work): nothing when the record or the name is gone or
 * the variant is made for the current spec already. Throws when the store or the decoder fails, so that
 * the queue tries again.
 */
export async function makeNamedVariant(ctx: ServiceContext, job: VariantJob): Promise<VariantJobOutcome> {
  const r = await ctx.repo.findById(job.fileId)
  if (!r) return 'gone'
  const spec = namedVariantsOf(ctx, r)?.get(job.name)
  if (!spec) return 'gone'
  const made = await ctx.repo.variants.ofRecords([r.id])
  if (made.some((row) => row.name === job.name && row.spec === variantSpec(spec))) return 'exists'
  const store = ctx.store(r.store)
  const resize = withFocus(resizeOfNamed(job.name, spec), r.focus)
  const key = variantKey(storeKey(r.savedDir, ''), r.id, resize)
  // A PDF's or a video's variants are made from its preview image, made first when it is not yet.
  const original = storeKey(r.savedDir, r.savedName)
  let source = { key: original, type: r.fileType }
  if (isPreviewed(ctx, r.fileType)) {
    let preview = previewStateOf(made.find((row) => row.name === PREVIEW_JOB)?.spec)
    if (preview === 'pending') {
      // Made here (or by its own job meanwhile): what it became is read back, not taken from this call.
      await makePreview(ctx, { fileId: r.id, name: PREVIEW_JOB })
      preview = previewStateOf((await previewRowOf(ctx, r.id))?.spec)
    }
    if (preview !== 'made') return 'gone'
    source = { key: previewKey(r), type: 'image/jpeg' }
  }
  // The record's analysed size spares reading the original's header (a preview has a size of its own).
  const size = source.key === original ? shownSizeOf(r.media) : undefined
  const make = () => ctx.resizer.variant(store, source.key, key, source.type, resize, () => {}, { background: true, size })
  let variant = await make()
  // A view of the same box without the name, made together with this job, may not have been stored.
  if (variant?.transient) variant = await make()
  await recordNamedVariant(ctx, r, job.name, spec, variant)
  return variant ? 'made' : 'original'
}

/**
 * Remembers that a record's named variant is made (`variant` undefined: the original serves as it,
 * being within the box already or not decodable).
 */
export async function recordNamedVariant(
  ctx: ServiceContext,
  r: AttachmentRecord,
  name: string,
  spec: NamedVariant,
  variant: Variant | undefined,
): Promise<void> {
  await ctx.repo.variants.record({
    fileId: r.id,
    name,
    spec: variantSpec(spec),
    fileSize: variant?.size ?? r.fileSize,
    fileType: variant?.type ?? r.fileType,
    createdDt: ctx.now().toISOString(),
  })
}

/**
 * The named variants made for each of these records, for the current spec of their category: record id
 * to names. One query for all of them; nothing when no category of theirs names a variant.
 */
export async function madeVariants(ctx: ServiceContext, records: readonly AttachmentRecord[]): Promise<Map<number, string[]>> {
  const out = new Map<number, string[]>()
  const specs = new Map<number, ReadonlyMap<string, NamedVariant>>()
  for (const r of records) {
    const named = namedVariantsOf(ctx, r)
    if (named) specs.set(r.id, named)
  }
  if (!specs.size) return out
  for (const row of await ctx.repo.variants.ofRecords([...specs.keys()])) {
    const spec = specs.get(row.fileId)?.get(row.name)
    if (!spec || variantSpec(spec) !== row.spec) continue
    const names = out.get(row.fileId) ?? []
    names.push(row.name)
    out.set(row.fileId, names)
  }
  return out
}

/** An image record's size as shown (its analysed media), which spares the resizer a header read. */
export function shownSizeOf(media: MediaInfo | null | undefined): { width: number; height: number } | undefined {
  if (!media || !('placeholder' in media) || !(media.width > 0) || !(media.height > 0)) return undefined
  return { width: media.width, height: media.height }
}
