/** The ZIP download of several attachments, streamed, bounded per process. */
import type { Readable } from 'node:stream'
import { AttachStorageError, badRequest, notFound } from '../errors.js'
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
  ids: number[]
}

/** Seconds a client is asked to wait when every ZIP slot is taken. */
const ZIP_RETRY_AFTER = 5

/**
 * A ZIP of several attachments, streamed: `{title?, ids}`. Files missing or refused by their category's
 * secure-access function are skipped; when every one fails the answer is 404. Names follow the spec:
 * `.zip` appended to `title`, else `{domain}_{category}_{yyyyMMddHHmmss}.zip` of the first file;
 * duplicate names become `name_1.ext`, `name_2.ext`, ...
 */
export async function zip(ctx: ServiceContext, input: ZipInput, access: AccessContext): Promise<{ fileName: string; stream: Readable }> {
  const { title, ids } = input
  if (ids.length === 0) throw badRequest('ids must be a non-empty array of attachment ids')
  if (ids.length > ctx.config.zip.maxFiles) throw badRequest(`A ZIP may name at most ${ctx.config.zip.maxFiles} ids`)
  if (ctx.zipSlots.running >= ctx.config.zip.concurrency) {
    throw new AttachStorageError('busy', 'Too many ZIP downloads are running; try again shortly', {
      status: 503,
      headers: { 'retry-after': String(ZIP_RETRY_AFTER) },
    })
  }
  const found = new Map((await ctx.repo.findByIds([...new Set(ids)])).map((r) => [r.id, r]))
  const allowed: AttachmentRecord[] = []
  for (const id of ids) {
    const r = found.get(id)
    if (!r) continue
    const category = ctx.registry.domain(r.refDomain).categories.get(r.refCategory)
    if (category && (await checkAccess(ctx, access, category, describeRecord(r)))) allowed.push(r)
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
  const stream = createZipStream(sources, {
    onSkip: (src, err) => ctx.logger.warn(`attach-storage: ${src.name} left out of a ZIP`, err),
  })
  // The slot is held until the archive is sent, fails, or its client goes away.
  ctx.zipSlots.running++
  stream.once('close', () => ctx.zipSlots.running--)
  return { fileName, stream }
}
