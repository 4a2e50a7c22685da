/**
 * Previews and media of PDFs, videos and audio (docs/previews.md): after a save, one background job per
 * record on the named-variant queue learns what the file is (`media`: pages, or length and frame size)
 * and makes its preview image (a PDF's first page, a video's frame at 10 % of its length, at most 5 s
 * in), kept beside the record's variants. Views with a box (`?w=`, `?variant=`) and `?preview=1` of such a
 * record answer images made from it. The tools (poppler's pdftoppm and pdfinfo, ffmpeg and ffprobe) run
 * as bounded child processes (media/preview-tools.ts); a missing tool turns its kind off.
 */
import { AttachStorageError } from '../errors.js'
import { probePdf, renderPdfFirstPage } from '../media/pdf-preview.js'
import { toolFile, toolInput } from '../media/preview-source.js'
import { findPreviewTools, type PreviewBounds, PreviewError, type PreviewTools } from '../media/preview-tools.js'
import { variantPrefix } from '../media/resize.js'
import { probeAv, videoFrame } from '../media/video-preview.js'
import type { AttachmentRecord, MediaInfo, PreviewState } from '../model.js'
import type { AttachConfigParsed } from '../config/schema.js'
import type { ServiceContext } from './context.js'
import { storeKey } from './layout.js'
import type { Logger } from './types.js'
import type { VariantRow } from '../repository/variant-rows.js'
import type { VariantJob } from './variant-queue.js'
import { namedVariantsOf, queueJobs } from './variants.js'

/** The job (and `attach_variant` row) name of a record's preview and media: never a variant name (no `:` in those). */
export const PREVIEW_JOB = ':preview'

/** The kinds of file analysed (and, but for audio, previewed) in the background. */
export type PreviewKind = 'pdf' | 'video' | 'audio'

/** What became of one preview job. */
export type PreviewOutcome = 'made' | 'analysed' | 'exists' | 'failed' | 'gone'

/** The previews this process makes: its tools, which kinds are on, and the bounds of each tool run. */
export interface PreviewSetup {
  readonly tools: PreviewTools
  readonly bounds: PreviewBounds
  /** Largest PDF copied to a temporary file from a store without local files. */
  readonly maxPdfBytes: number
  /** True when files of this kind are analysed (and previewed) here. */
  on(kind: PreviewKind): boolean
  /** Each kind and whether it is on, or why not: what `/readyz` details. */
  readonly status: Readonly<Record<PreviewKind, string>>
}

/** The kind of a file of this (sniffed) type, or undefined when it gets no preview nor media from here. */
export function previewKindOf(type: string): PreviewKind | undefined {
  if (type === 'application/pdf') return 'pdf'
  if (type.startsWith('video/')) return 'video'
  if (type.startsWith('audio/')) return 'audio'
  return undefined
}

/**
 * The previews of a service: the tools found (the configured paths, else on PATH) and the kinds they
 * allow. A missing tool turns its kind off with one warning, never a failed start or upload.
 */
export function previewSetup(config: AttachConfigParsed['previews'], maxInputPixels: number, logger: Logger): PreviewSetup {
  const tools: PreviewTools = config.enabled
    ? findPreviewTools({
        ...(config.pdftoppm ? { pdftoppm: config.pdftoppm } : {}),
        ...(config.pdfinfo ? { pdfinfo: config.pdfinfo } : {}),
        ...(config.ffmpeg ? { ffmpeg: config.ffmpeg } : {}),
        ...(config.ffprobe ? { ffprobe: config.ffprobe } : {}),
      })
    : {}
  const need: Record<PreviewKind, Array<keyof PreviewTools>> = {
    pdf: ['pdfinfo', 'pdftoppm'],
    video: ['ffprobe', 'ffmpeg'],
    audio: ['ffprobe'],
  }
  const status = {} as Record<PreviewKind, string>
  const missing: string[] = []
  for (const kind of Object.keys(need) as PreviewKind[]) {
    const lacking = need[kind].filter((t) => !tools[t])
    status[kind] = !config.enabled ? 'off (previews.enabled is false)' : lacking.length ? `off: ${lacking.join(' and ')} not found` : 'on'
    for (const t of lacking) if (!missing.includes(t)) missing.push(t)
  }
  if (config.enabled && missing.length) {
    const kinds = (Object.keys(status) as PreviewKind[]).filter((k) => status[k] !== 'on')
    logger.warn(
      `attach-storage: ${missing.join(', ')} not found: previews and media of ${kinds.join(', ')} files are off (install ffmpeg and poppler-utils, or set previews.<tool> paths)`,
    )
  }
  const bounds: PreviewBounds = {
    maxInputPixels,
    maxPages: config.maxPages,
    maxDurationSeconds: config.maxDuration / 1000,
    timeoutSeconds: config.timeout / 1000,
    maxSide: config.maxSide,
    memoryBytes: config.memory,
  }
  return { tools, bounds, maxPdfBytes: config.maxPdfBytes, status, on: (kind) => status[kind] === 'on' }
}

/** True when this record's file gets a preview image here (a PDF or a video, its tools present). */
export function isPreviewed(ctx: ServiceContext, type: string): boolean {
  const kind = previewKindOf(type)
  return (kind === 'pdf' || kind === 'video') && ctx.previews.on(kind)
}

/** The jobs a save of these records calls for: one per PDF, video or audio file whose kind is on. */
export function previewJobsOf(ctx: ServiceContext, records: readonly AttachmentRecord[]): VariantJob[] {
  const jobs: VariantJob[] = []
  for (const r of records) {
    const kind = previewKindOf(r.fileType)
    if (kind && ctx.previews.on(kind)) jobs.push({ fileId: r.id, name: PREVIEW_JOB })
  }
  return jobs
}

/** Where a record's preview image is kept: beside its variants, so it goes with them. */
export function previewKey(r: Pick<AttachmentRecord, 'savedDir' | 'id'>): string {
  return `${variantPrefix(storeKey(r.savedDir, ''), r.id)}preview.jpg`
}

/** `spec` of the preview row: `made`, `analysed` (audio: media only), `failed:{code}`, `retry:{n}` (a try failed). */
const MADE = 'made'
const ANALYSED = 'analysed'

/** True when a preview row's spec says its job has run to its end (made, analysed or failed): not tried again. */
export function previewDone(spec: string | undefined): boolean {
  return spec === MADE || spec === ANALYSED || (spec?.startsWith('failed:') ?? false)
}

/** The preview row of one record, if its job has written one. */
export async function previewRowOf(ctx: ServiceContext, id: number): Promise<VariantRow | undefined> {
  return (await ctx.repo.variants.ofRecords([id])).find((x) => x.name === PREVIEW_JOB)
}

/** A preview row's spec as the state a record answers. */
export function previewStateOf(spec: string | undefined): PreviewState {
  if (spec === MADE) return 'made'
  if (spec?.startsWith('failed:')) return 'failed'
  return 'pending'
}

/** The preview state of each of these records that is a PDF or a video (one query); others are absent. */
export async function previewStates(ctx: ServiceContext, records: readonly AttachmentRecord[]): Promise<Map<number, PreviewState>> {
  const out = new Map<number, PreviewState>()
  const ids: number[] = []
  for (const r of records) {
    const kind = previewKindOf(r.fileType)
    if (kind !== 'pdf' && kind !== 'video') continue
    if (ctx.previews.on(kind)) ids.push(r.id)
    else out.set(r.id, 'off')
  }
  if (!ids.length) return out
  const specs = new Map<number, string>()
  for (const row of await ctx.repo.variants.ofRecords(ids)) if (row.name === PREVIEW_JOB) specs.set(row.fileId, row.spec)
  for (const id of ids) out.set(id, previewStateOf(specs.get(id)))
  return out
}

/**
 * The made preview image of a record asked for with a box or `?preview=1`: its key and size. 503
 * `preview-pending` (with `Retry-After`) while its job has not made it; 404 `preview-failed` when the file
 * could not be previewed; 404 `previews-off` when this server lacks the tool.
 */
export async function madePreview(ctx: ServiceContext, r: AttachmentRecord): Promise<{ key: string; size: number }> {
  const kind = previewKindOf(r.fileType)
  if ((kind !== 'pdf' && kind !== 'video') || !ctx.previews.on(kind)) {
    if (kind === 'pdf' || kind === 'video') {
      throw missing('previews-off', `Previews of ${kind === 'pdf' ? 'PDF' : 'video'} files are off on this server`)
    }
    throw missing('no-preview', `Attachment ${r.id} has no preview (only PDFs and videos have one)`)
  }
  const row = await previewRowOf(ctx, r.id)
  const state = previewStateOf(row?.spec)
  if (state === 'failed') {
    throw missing('preview-failed', `Attachment ${r.id} could not be previewed (${row!.spec.slice('failed:'.length)})`)
  }
  if (state !== 'made') {
    throw new AttachStorageError('preview-pending', `The preview of attachment ${r.id} is being made; ask again shortly`, {
      status: 503,
      headers: { 'retry-after': '2' },
    })
  }
  return { key: previewKey(r), size: row!.fileSize }
}

const missing = (code: 'previews-off' | 'no-preview' | 'preview-failed', message: string) =>
  new AttachStorageError(code, message, { status: 404 })

/**
 * Runs one preview job: learns the file's media and records it, makes its preview image (PDF, video),
 * then queues the record's named variants (made from the preview). A file the tools refuse for good
 * (corrupt, encrypted, beyond a bound) is recorded as failed at once; a passing failure (a timeout, a
 * tool that died, a store that did not answer) is thrown for the queue to try again, and recorded as
 * failed once `variant-jobs.retry-limit` tries have failed, so no job loops.
 */
export async function makePreview(ctx: ServiceContext, job: VariantJob): Promise<PreviewOutcome> {
  const r = await ctx.repo.findById(job.fileId)
  const kind = r ? previewKindOf(r.fileType) : undefined
  if (!r || !kind || !ctx.previews.on(kind)) return 'gone'
  const row = await previewRowOf(ctx, r.id)
  if (previewDone(row?.spec)) return 'exists'
  const tries = row?.spec.startsWith('retry:') ? Number(row.spec.slice('retry:'.length)) || 0 : 0
  try {
    const image = await analyseAndRender(ctx, r, kind)
    if (!image) {
      await recordRow(ctx, r, ANALYSED, 0)
      return 'analysed'
    }
    await ctx.store(r.store).put(previewKey(r), image, { contentType: 'image/jpeg' })
    await recordRow(ctx, r, MADE, image.length)
    // The named variants of a previewed record are made from its preview, so they are queued once it is.
    await queueJobs(
      ctx,
      [...(namedVariantsOf(ctx, r)?.keys() ?? [])].map((name) => ({ fileId: r.id, name })),
    )
    return 'made'
  } catch (err) {
    const code = err instanceof PreviewError ? err.code : 'tool-failed'
    if ((err instanceof PreviewError && err.permanent) || tries >= ctx.config.variantJobs.retryLimit) {
      ctx.logger.warn(`attach-storage: attachment ${r.id} (${r.fileType}) could not be previewed: ${code}`, err)
      await recordRow(ctx, r, `failed:${code}`, 0)
      return 'failed'
    }
    await recordRow(ctx, r, `retry:${tries + 1}`, 0)
    throw err
  }
}

/** The file's media, recorded as soon as it is known; then its preview image (undefined for audio). */
async function analyseAndRender(ctx: ServiceContext, r: AttachmentRecord, kind: PreviewKind): Promise<Buffer | undefined> {
  const { tools, bounds } = ctx.previews
  const store = ctx.store(r.store)
  const key = storeKey(r.savedDir, r.savedName)
  if (kind === 'pdf') {
    const file = await toolFile(store, key, r.fileSize, { maxBytes: ctx.previews.maxPdfBytes })
    try {
      // pdfinfo counts the pages (and refuses a file beyond a bound) while pdftoppm renders page 1 alone.
      const [probe, render] = await Promise.allSettled([probePdf(file.path, tools, bounds), renderPdfFirstPage(file.path, tools, bounds)])
      if (probe.status === 'rejected') throw probe.reason
      await setMedia(ctx, r, { pages: probe.value.pages })
      if (render.status === 'rejected') throw render.reason
      return render.value.jpeg
    } finally {
      await file.close()
    }
  }
  // Read in place: a local path, a short-lived presigned address, or a loopback range server.
  const source = await toolInput(store, key, r.fileSize, { ttlSeconds: Math.ceil(bounds.timeoutSeconds) * 2 + 60 })
  try {
    const probe = await probeAv(source.input, tools, bounds)
    const media: MediaInfo =
      probe.kind === 'video' && probe.width && probe.height
        ? { width: probe.width, height: probe.height, durationMs: probe.durationMs }
        : { durationMs: probe.durationMs }
    await setMedia(ctx, r, media)
    if (kind === 'audio') return undefined
    return (await videoFrame(source.input, probe, tools, bounds)).jpeg
  } finally {
    await source.close()
  }
}

async function setMedia(ctx: ServiceContext, r: AttachmentRecord, media: MediaInfo): Promise<void> {
  await ctx.repo.setMedia(r.blobId, media)
}

async function recordRow(ctx: ServiceContext, r: AttachmentRecord, spec: string, size: number): Promise<void> {
  await ctx.repo.variants.record({
    fileId: r.id,
    name: PREVIEW_JOB,
    spec,
    fileSize: size,
    fileType: 'image/jpeg',
    createdDt: ctx.now().toISOString(),
  })
}
