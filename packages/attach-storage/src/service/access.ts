/** Who may read and change what: the secure-access function, the change rule, the entity hook and signed view URLs. */
import { forbidden } from '../errors.js'
import type { AttachmentRecord } from '../model.js'
import type { RegisteredCategory, RegisteredDomain } from '../registry/registry.js'
import type { ServiceContext } from './context.js'
import { bearerToken } from './auth.js'
import type { AccessContext, Authenticate, AuthUser, FileDescription } from './types.js'

/** True when two user ids name the same user (compared as text; null and undefined name nobody). */
export const sameUser = (a: unknown, b: unknown) =>
  a !== null && a !== undefined && b !== null && b !== undefined && String(a) === String(b)

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
export async function mayChangeEntity(
  ctx: ServiceContext,
  domain: RegisteredDomain,
  refKey: string,
  access: AccessContext,
): Promise<boolean> {
  if (!domain.mayChange) return true
  try {
    return (await domain.mayChange(access.user, refKey, access.request, { trx: ctx.hostTransaction })) === true
  } catch (err) {
    ctx.logger.warn(`attach-storage: mayChange of domain "${domain.name}" threw; refused`, err)
    return false
  }
}

/** True when the caller carries a valid signature for a guarded record (signed view URLs). */
export function signedFor(ctx: ServiceContext, access: AccessContext, id: number, category: RegisteredCategory): boolean {
  if (!access.signature || !ctx.signer || !category.secureAccess) return false
  return ctx.signer.verify(id, access.signature)
}

/** Runs a category's secure-access function; a throw counts as a refusal. No function allows. */
export async function checkAccess(
  ctx: ServiceContext,
  access: AccessContext,
  category: RegisteredCategory,
  file: FileDescription,
): Promise<boolean> {
  if (!category.secureAccess) return true
  if (!access.request) return false
  try {
    return (await category.secureAccess(access.request, file)) === true
  } catch (err) {
    ctx.logger.warn(`attach-storage: secure-access function of "${file.refDomain}.${file.refCategory}" threw; refused`, err)
    return false
  }
}

/**
 * The read rule of a temporary file: its category's secure-access function (shown the spec's synthetic
 * description); in a guarded category only its uploader, the caller's user (`access.user`, which the
 * binary group's temporary view takes from the request's Bearer token) being the one who uploaded it.
 * An upload without a user is readable in a guarded category by no one.
 */
export async function mayReadTemporary(
  ctx: ServiceContext,
  access: AccessContext,
  category: RegisteredCategory,
  file: { refDomain: string; refCategory: string; name: string; createdBy: string | number | null },
): Promise<boolean> {
  if (category.secureAccess && !(access.user !== null && sameUser(file.createdBy, access.user.id))) return false
  return checkAccess(ctx, access, category, syntheticDescription(file.refDomain, file.refCategory, file.name))
}

/** What a header value may hold (Fetch: bytes, none of them NUL, CR or LF). */
const HEADER_VALUE = /^[^\0\r\n\u0100-\uffff]*$/

/**
 * Who sends a request of the binary group, for the checks that need a user there (a guarded temporary
 * file): the host's authenticator shown the request's Bearer token, or its `access_token` query
 * parameter (an `<img src>` carries no header). Null when there is neither, when the parameter is no
 * header value, or when the authenticator refuses.
 */
export async function callerOf(authenticate: Authenticate | undefined, request: Request): Promise<AuthUser | null> {
  if (!authenticate) return null
  let shown = request
  if (bearerToken(request) === undefined) {
    const t = new URL(request.url).searchParams.get('access_token')
    // A token no header can carry (a character above U+00FF, a line break, a NUL) is no one's.
    if (!t || !HEADER_VALUE.test(t)) return null
    shown = new Request(request.url, { method: 'GET', headers: { authorization: `Bearer ${t}` } })
  }
  try {
    return (await authenticate(shown)) ?? null
  } catch {
    return null
  }
}

/** The read rule: the category's secure-access function when it has one, else any caller. */
export async function mayRead(ctx: ServiceContext, access: AccessContext, r: AttachmentRecord): Promise<boolean> {
  const category = ctx.registry.domain(r.refDomain).categories.get(r.refCategory)
  if (!category) return false
  if (category.secureAccess) return checkAccess(ctx, access, category, describeRecord(r))
  return access.user !== null || access.request !== null
}

/**
 * The one rule for changing a record, on every path (PUT, POST delete, a confirmed save's `_deleted`
 * and re-sort entries, `commitAttachContainer()`): its creator. In a guarded category reading is not
 * changing: the caller must be allowed to read the record (the secure-access function) and be its
 * creator or be granted the change by the domain's `mayChange` hook for the record's `refKey`; the
 * secure-access function alone never grants a change.
 */
export async function mayChange(ctx: ServiceContext, access: AccessContext, r: AttachmentRecord): Promise<boolean> {
  const domain = ctx.registry.domain(r.refDomain)
  const category = domain.categories.get(r.refCategory)
  const creator = access.user !== null && sameUser(r.createdBy, access.user.id)
  if (!category?.secureAccess) return creator
  if (!(await checkAccess(ctx, access, category, describeRecord(r)))) return false
  return creator || (domain.mayChange !== undefined && (await mayChangeEntity(ctx, domain, r.refKey, access)))
}

/** The live records of `ids`, each of which the caller may change (else 403 `forbidden`, nothing read further). */
export async function ownedRecords(ctx: ServiceContext, ids: number[], access: AccessContext): Promise<AttachmentRecord[]> {
  const records = await ctx.repo.findByIds([...new Set(ids)])
  for (const r of records) {
    if (!(await mayChange(ctx, access, r))) {
      throw forbidden(`You may not change attachment ${r.id}`)
    }
  }
  return records
}
