/**
 * Direct-to-cloud uploads: the client writes its file straight into the temporary store through a
 * presigned address, and the confirmed save verifies that object once before it becomes a temporary
 * file like any other (docs/direct-uploads.md).
 */
import { AttachStorageError, badRequest, forbidden, notFound, tooLarge } from '../errors.js'
import { parseSize } from '../config/units.js'
import { extensionOf, sniffType } from '../media/sniff.js'
import type { RegisteredCategory } from '../registry/registry.js'
import type { Store } from '../stores/store.js'
import { checkAccess, syntheticDescription } from './access.js'
import type { ServiceContext } from './context.js'
import { ingest } from './ingest.js'
import { generateSavedName } from './layout.js'
import { cleanDisplayName } from './names.js'
import { releaseUploads, reserveUpload } from './quota.js'
import { scanTemporary } from './scan-kept.js'
import { type TmpMeta, tmpKey, tmpMetaKey, tmpUploadKey } from './temporary.js'
import type { AccessContext, AuthUser } from './types.js'
import { runFilters, uploadTarget } from './uploads.js'

/** How long a presigned write address stays valid, at most (never longer than `tmp-ttl`). */
export const PRESIGN_TTL_SECONDS = 15 * 60

/** The body of `POST attach/presign`. */
export interface PresignInput {
  refDomain: string
  /** @default 'default' */
  refCategory: string
  /** The client's file name: the display name, and the stored name's extension. */
  fileName: string
  /** The exact number of bytes the client will send. */
  size: number
  /** The client's idea of the media type; informative only (the type is sniffed at commit). */
  type?: string
}

/** The answer of `POST attach/presign`: send the bytes to `uploadUrl`, then commit `name` as a `savedName`. */
export interface PresignAnswer {
  name: string
  uploadUrl: string
  method: 'PUT' | 'POST'
  headers: Record<string, string>
  /** When `uploadUrl` stops accepting the bytes (ISO-8601, UTC). */
  expiresAt: string
}

/** The store presigned uploads go to: `presign-store`, else the temporary store. */
export function presignStoreOf(ctx: ServiceContext): Store {
  const name = ctx.config.presignStore
  return name ? ctx.store(name) : ctx.stores.tmpStore
}

/** The largest file a category accepts: the configured `upload.max-file-size`, lowered by its own `size` filters. */
export function sizeLimitOf(ctx: ServiceContext, category: RegisteredCategory): number {
  let limit = ctx.config.upload.maxFileSize
  for (const { filter, options } of category.filters) {
    if (filter.name !== 'size' || options.maxSize === undefined) continue
    const max = parseSize(options.maxSize, 'mb')
    if (max !== undefined) limit = Math.min(limit, max)
  }
  return limit
}

/**
 * Prepares a direct-to-cloud upload: checks the target (domain, category, the category's secure-access
 * function, the size limit: 413 above it), then that the presign store can sign (400
 * `presign-unsupported` otherwise); reserves the declared size in the user's quota (413
 * `quota-exceeded` past it); writes the temporary file's sidecar, marked pending with the
 * declared size, and answers a write address of `_tmp/_up/{name}` in the presign store, valid for at
 * most {@link PRESIGN_TTL_SECONDS} and never beyond `tmp-ttl`.
 */
export async function presignUpload(ctx: ServiceContext, input: PresignInput, access: AccessContext): Promise<PresignAnswer> {
  const tmp = ctx.stores.tmpStore
  const target = presignStoreOf(ctx)
  const { category, refDomain, refCategory } = uploadTarget(ctx, { refDomain: input.refDomain, refCategory: input.refCategory })
  const displayName = cleanDisplayName(input.fileName)
  const name = generateSavedName(extensionOf(displayName))
  if (!(await checkAccess(ctx, access, category, syntheticDescription(refDomain, refCategory, name)))) throw forbidden()
  const limit = sizeLimitOf(ctx, category)
  if (input.size > limit) throw tooLarge(`${displayName} is ${input.size} bytes, larger than the limit of ${limit} bytes`)
  if (!target.presignPut) {
    throw new AttachStorageError(
      'presign-unsupported',
      `The store of direct uploads cannot presign them (type ${target.type}); send the file to attach/tmp instead`,
      { status: 400 },
    )
  }

  const now = ctx.now()
  const expiresIn = Math.max(1, Math.min(PRESIGN_TTL_SECONDS, Math.floor(ctx.config.tmpTtl / 1000)))
  const expiresAt = new Date(now.getTime() + expiresIn * 1000).toISOString()
  const meta: TmpMeta = {
    name,
    displayName,
    size: input.size,
    type: '',
    sha256: '',
    refDomain,
    refCategory,
    createdBy: access.user?.id ?? null,
    createdDt: now.toISOString(),
    pending: { size: input.size, expiresAt, store: target.name },
  }
  // The user's quota holds the declared size until the commit (or the expiry).
  await reserveUpload(ctx, { name, user: access.user, bytes: input.size, kind: 'presign', begun: meta.createdDt })
  try {
    // The sidecar first: an object nobody announced is never committed, only swept.
    await tmp.put(tmpMetaKey(name), Buffer.from(JSON.stringify(meta)), { contentType: 'application/json' })
    const signed = await target.presignPut(tmpUploadKey(name), { expiresIn, contentLength: input.size })
    return { name, uploadUrl: signed.url, method: signed.method, headers: signed.headers, expiresAt }
  } catch (err) {
    await tmp.delete(tmpMetaKey(name)).catch(() => undefined)
    await releaseUploads(ctx, [name])
    throw err
  }
}

/**
 * Verifies the object a client sent for a pending sidecar, once, at commit: it must exist (else 404
 * `not-found`, the sidecar kept for a late upload), be no larger than declared and than the limit (413
 * `too-large`), and pass its category's filters on its sniffed type (400 with the filter's code). The
 * bytes are streamed once from the client's object into the temporary file (counted, hashed, the head
 * kept for sniffing), so what is verified is what gets saved, whatever the still-valid address receives
 * later. A refusal removes the object, the copy and the sidecar. Resolves with the verified sidecar.
 */
export async function verifyDirectUpload(ctx: ServiceContext, meta: TmpMeta, user: AuthUser | null): Promise<TmpMeta> {
  const pending = meta.pending
  if (!pending) return meta
  const tmp = ctx.stores.tmpStore
  const from = ctx.store(pending.store)
  const name = meta.name
  const category = ctx.registry.category(meta.refDomain, meta.refCategory)
  const discard = async () => {
    await Promise.all([from.delete(tmpUploadKey(name)), tmp.delete(tmpKey(name)), tmp.delete(tmpMetaKey(name))]).catch((err) =>
      ctx.logger.warn(`attach-storage: could not remove the refused direct upload ${name}`, err),
    )
    await releaseUploads(ctx, [name])
  }
  const limit = Math.min(pending.size, sizeLimitOf(ctx, category))
  const source = await from.get(tmpUploadKey(name)).catch((err: unknown) => {
    if (err instanceof AttachStorageError && err.code === 'not-found') throw notFound(`Nothing was uploaded for ${name} yet`)
    throw err
  })
  let received: Awaited<ReturnType<typeof ingest>>
  try {
    received = await ingest(tmp, tmpKey(name), source, { maxSize: limit })
  } catch (err) {
    source.destroy()
    if (err instanceof AttachStorageError && err.code === 'too-large') {
      await discard()
      throw tooLarge(`${meta.displayName} is larger than the ${limit} bytes declared or allowed`)
    }
    throw err
  }
  const type = await sniffType(received.head, meta.displayName)
  const error = await runFilters(ctx, category, [], {
    displayName: meta.displayName,
    extension: extensionOf(meta.displayName),
    size: received.size,
    type,
    sha256: received.sha256,
    head: received.head,
    open: () => tmp.get(tmpKey(name)),
  })
  // Scanned (the category's scan) once it passed the filters; a 503 scan-unavailable leaves the upload to retry.
  const refused = error ?? (await scanTemporary(ctx, name, meta.displayName, category))
  if (refused) {
    await discard()
    throw badRequest(`${refused.code}: ${refused.message}`, refused.code)
  }
  const { pending: _, ...rest } = meta
  const verified: TmpMeta = { ...rest, size: received.size, type, sha256: received.sha256 }
  // Now a temporary file of its verified size (never more than declared), until the commit frees it.
  await reserveUpload(ctx, { name, user: { id: meta.createdBy }, bytes: received.size, kind: 'tmp', begun: meta.createdDt })
  await tmp.put(tmpMetaKey(name), Buffer.from(JSON.stringify(verified)), { contentType: 'application/json' })
  // A tombstone, not a deletion: the still-valid address is create-only (S3 If-None-Match, Azure's `c`
  // SAS), so it writes nothing more once the upload is committed; the sweep removes it after tmp-ttl.
  await from.put(tmpUploadKey(name), new Uint8Array(0), { contentType: 'application/octet-stream' }).catch(() => undefined)
  ctx.events.emit('uploaded', {
    kind: 'temporary',
    refDomain: meta.refDomain,
    refCategory: meta.refCategory,
    name,
    savedDir: null,
    displayName: meta.displayName,
    size: received.size,
    type,
    sha256: received.sha256,
    user,
  })
  return verified
}

/**
 * The sweep's part for a `presign-store` apart from the temporary store: its uploads nobody committed,
 * last modified before `cutoff`, go (the temporary store's own `_tmp/` is swept with the rest).
 */
export async function sweepDirectUploads(ctx: ServiceContext, cutoff: Date): Promise<number> {
  const store = presignStoreOf(ctx)
  if (store === ctx.stores.tmpStore) return 0
  let removed = 0
  try {
    for await (const e of store.list(tmpUploadKey(''))) {
      if (e.lastModified >= cutoff) continue
      await store.delete(e.key)
      removed++
    }
  } catch (err) {
    ctx.logger.warn(`attach-storage: removing unclaimed direct uploads of store "${store.name}" failed; the next sweep retries`, err)
  }
  return removed
}
