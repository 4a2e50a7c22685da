/** The ZIP download of several attachments, streamed, bounded per process. */
import type { Readable } from 'node:stream'
import { AttachStorageError, badRequest, notFound, tooLarge } from '../errors.js'
import { createZipStream, isCompressed, uniqueNames, type ZipSource } from '../media/zip.js'
import type { AttachmentRecord } from '../model.js'
import { checkAccess, describeRecord } from './access.js'
import type { ServiceContext } from './context.js'
import type { AccessContext } from './types.js'
import { storeKey } from './layout.js'
import { cleanDisplayName } from './names.js'

/** What a ZIP download names: positive attachment ids (at most `zip.max-files`) and an optional title. */
export interface ZipInput {
  /** The archive's name (`.zip` appended); default `{domain}_{category}_{yyyyMMddHHmmss}.zip`. */
  title?: string | null
  /** Attachment ids; one named twice is one entry. */
  ids: number[]
}

/** Seconds a client is asked to wait when every ZIP slot is taken. */
const ZIP_RETRY_AFTER = 5

/**
 * A ZIP of several attachments, streamed: `{title?, ids}`. Files missing or refused by their category's
 * secure-access function are skipped; when every one fails the answer is 404. Names follow the spec:
 * `.zip` appended to `title`, else `{domain}_{category}_{yyyyMMddHHmmss}.zip` of the first file;
 * duplicate names become `name_1.ext`, `name_2.ext`, ...
 *
 * Bounds: ids are de-duplicated; at most `zip.concurrency` archives stream at once in this process (the
 * slot is taken before the first await, so requests that arrive together cannot all pass; one more
 * answers 503 `busy` with `Retry-After`) and a slot is free again as soon as the stream closes (sent,
 * failed, or destroyed because its client went away); the files' sizes add up to at most `zip.max-bytes`
 * (413 `too-large` before anything streams); the writer deflates only as far ahead of what its reader
 * takes as {@link createZipStream} allows.
 */
export async function zip(ctx: ServiceContext, input: ZipInput, access: AccessContext): Promise<{ fileName: string; stream: Readable }> {
  const { title } = input
  if (input.ids.length === 0) throw badRequest('ids must be a non-empty array of attachment ids')
  if (input.ids.length > ctx.config.zip.maxFiles) throw badRequest(`A ZIP may name at most ${ctx.config.zip.maxFiles} ids`)
  const ids = [...new Set(input.ids)]
  // Taken here, before any await: the slot is this request's until its stream closes or it fails.
  if (ctx.zipSlots.running >= ctx.config.zip.concurrency) {
    throw new AttachStorageError('busy', 'Too many ZIP downloads are running; try again shortly', {
      status: 503,
      headers: { 'retry-after': String(ZIP_RETRY_AFTER) },
    })
  }
  ctx.zipSlots.running++
  let held = false
  try {
    const { fileName, sources } = await archiveOf(ctx, ids, title, access)
    const stream = createZipStream(sources, {
      onSkip: (src, err) => ctx.logger.warn(`attach-storage: ${src.name} left out of a ZIP`, err),
    })
    stream.once('close', () => ctx.zipSlots.running--)
    held = true
    return { fileName, stream }
  } finally {
    if (!held) ctx.zipSlots.running--
  }
}

/** The archive's name and its entries: the records the caller may read whose files are there. */
async function archiveOf(
  ctx: ServiceContext,
  ids: number[],
  title: string | null | undefined,
  access: AccessContext,
): Promise<{ fileName: string; sources: ZipSource[] }> {
  const found = new Map((await ctx.repo.findByIds(ids)).map((r) => [r.id, r]))
  const allowed: AttachmentRecord[] = []
  let bytes = 0
  for (const id of ids) {
    const r = found.get(id)
    if (!r) continue
    const category = ctx.registry.domain(r.refDomain).categories.get(r.refCategory)
    if (category && (await checkAccess(ctx, access, category, describeRecord(r)))) {
      allowed.push(r)
      bytes += r.fileSize
    }
  }
  // Only files the caller may read count, so the answer says nothing of the others.
  if (bytes > ctx.config.zip.maxBytes) {
    throw tooLarge(`The files add up to ${bytes} bytes; a ZIP may hold at most ${ctx.config.zip.maxBytes} (zip.max-bytes)`)
  }
  // Only files that are really there count: a record whose file is gone is skipped too.
  const present: AttachmentRecord[] = []
  for (const r of allowed) {
    if (
      await ctx
        .store(r.store)
        .exists(storeKey(r.savedDir, r.savedName))
        .catch(() => false)
    )
      present.push(r)
  }
  if (present.length === 0) throw notFound('None of the requested attachments could be found or may be downloaded')
  const first = present[0]!
  const stamp = ctx.now().toISOString().replace(/\D/g, '').slice(0, 14)
  let fileName =
    typeof title === 'string' && title.trim() ? cleanDisplayName(title.trim()) : `${first.refDomain}_${first.refCategory}_${stamp}.zip`
  if (!fileName.toLowerCase().endsWith('.zip')) fileName += '.zip'
  const unique = uniqueNames()
  const sources: ZipSource[] = present.map((r) => ({
    name: unique(r.displayName),
    size: r.fileSize,
    mtime: new Date(r.createdDt),
    compress: !isCompressed(r.fileType),
    open: () => ctx.store(r.store).get(storeKey(r.savedDir, r.savedName)),
  }))
  return { fileName, sources }
}
