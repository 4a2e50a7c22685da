/** Who may read and change what: the secure-access function, the change rule, the entity hook and signed view URLs. */
import { badRequest, forbidden } from '../errors.js'
import type { AttachmentRecord } from '../model.js'
import type { RegisteredCategory, RegisteredDomain } from '../registry/registry.js'
import type { ServiceContext } from './context.js'
import type { AuthUser, FileDescription } from './types.js'

export const sameUser = (a: unknown, b: unknown) => a !== null && a !== undefined && b !== null && b !== undefined && String(a) === String(b)

/** The file description of a saved record, as the secure-access function sees it. */
export function describeRecord(r: AttachmentRecord): FileDescription {
  return {
    id: r.id,
    refDomain: r.refDomain,
    refKey: r.refKey,
    refCategory: r.refCategory,
    savedName: r.savedName,
    savedDir: r.savedDir,
    displayName: r.displayName,
    fileType: r.fileType,
    fileSize: r.fileSize,
    ext: r.ext,
    createdBy: r.createdBy,
    createdDt: r.createdDt,
  }
}

/** The spec's synthetic description of a temporary or direct file: only refDomain, refCategory, savedName. */
export function syntheticDescription(refDomain: string, refCategory: string, savedName: string): FileDescription {
  return {
    id: null,
    refDomain,
    refKey: null,
    refCategory,
    savedName,
    savedDir: null,
    displayName: null,
    fileType: null,
    fileSize: null,
    ext: null,
    createdBy: null,
    createdDt: null,
  }
}

/** The domain's `mayChange` hook (none: any caller); a throw counts as a refusal. */
export async function mayChangeEntity(ctx: ServiceContext, domain: RegisteredDomain, refKey: string, user: AuthUser | null, request: Request | null): Promise<boolean> {
  if (!domain.mayChange) return true
  try {
    return (await domain.mayChange(user, refKey, request)) === true
  } catch (err) {
    ctx.logger.warn(`attach-storage: mayChange of domain "${domain.name}" threw; refused`, err)
    return false
  }
}

/** True when the request carries a valid signature for a guarded record (signed view URLs). */
export function signedFor(ctx: ServiceContext, request: Request | null, id: number, category: RegisteredCategory): boolean {
  if (!request || !ctx.signer || !category.secureAccess) return false
  const q = request.url.indexOf('?')
  return q >= 0 && ctx.signer.verify(id, new URLSearchParams(request.url.slice(q + 1)))
}


/** Runs a category's secure-access function; a throw counts as a refusal. No function allows. */
export async function checkAccess(ctx: ServiceContext, request: Request | null, category: RegisteredCategory, file: FileDescription): Promise<boolean> {
  if (!category.secureAccess) return true
  if (!request) return false
  try {
    return (await category.secureAccess(request, file)) === true
  } catch (err) {
    ctx.logger.warn(`attach-storage: secure-access function of "${file.refDomain}.${file.refCategory}" threw; refused`, err)
    return false
  }
}

export async function mayRead(ctx: ServiceContext, request: Request | null, r: AttachmentRecord, user: AuthUser | null): Promise<boolean> {
  const category = ctx.registry.domain(r.refDomain).categories.get(r.refCategory)
  if (!category) return false
  if (category.secureAccess) return checkAccess(ctx, request, category, describeRecord(r))
  return user !== null || request !== null
}

/**
 * The one rule for changing a record, on every path (PUT, POST delete, a confirmed save's `_deleted`
 * and re-sort entries): the category's secure-access function when it has one, else its creator.
 */
export async function mayChange(ctx: ServiceContext, request: Request | null, r: AttachmentRecord, user: AuthUser | null): Promise<boolean> {
  const category = ctx.registry.domain(r.refDomain).categories.get(r.refCategory)
  if (category?.secureAccess) return checkAccess(ctx, request, category, describeRecord(r))
  return user !== null && sameUser(r.createdBy, user.id)
}

export async function ownedRecords(ctx: ServiceContext, request: Request | null, items: unknown, user: AuthUser | null): Promise<AttachmentRecord[]> {
  if (!Array.isArray(items)) throw badRequest('The body must be an array of attachment records')
  const ids = items.map((x, i) => {
    const id = x && typeof x === 'object' ? Number((x as { id?: unknown }).id) : NaN
    if (!Number.isSafeInteger(id) || id <= 0) throw badRequest(`item ${i}: id must be a positive integer`)
    return id
  })
  const records = await ctx.repo.findByIds([...new Set(ids)])
  for (const r of records) {
    if (!(await mayChange(ctx, request, r, user))) {
      throw forbidden(`You may not change attachment ${r.id}`)
    }
  }
  return records
}
