/**
 * The per-user quota of pending uploads (`upload.userQuota`): the bytes of a user's temporary files not
 * committed yet, unfinished tus uploads (their `Upload-Length`) and presigned uploads not committed yet.
 * Each is a row of `attach_pending` (repository/pending-uploads.ts) written where it begins and
 * forgotten where it ends (commit, termination, refusal, deletion); a row past its expiry (`tmp-ttl`
 * after it began, like the temporary file it stands for) counts no more and the sweep forgets it. The
 * rows live in the database, so the quota holds across instances sharing it, and a reservation is
 * counted and written under the user's lock, so two parallel requests of one user never both pass the
 * last bytes. Uploads without a user (a host's own calls) share the key `''`.
 *
 * The same rows carry the lease of the PATCH writing a tus upload ({@link withUploadLease}).
 */
import { randomUUID } from 'node:crypto'
import { hostname } from 'node:os'
import { AttachStorageError } from '../errors.js'
import type { PendingKind, Reservation } from '../repository/pending-uploads.js'
import type { ServiceContext } from './context.js'
import type { AuthUser } from './types.js'

/** How long a PATCH's lease lasts unless renewed; a crashed holder blocks its upload at most this long. */
export const LEASE_MS = 30_000
/** How often a running PATCH renews its lease. */
const RENEW_MS = LEASE_MS / 3

/** The quota key of an uploader: its id as text, `''` without a user. */
export const userKeyOf = (user: AuthUser | { id: unknown } | null | undefined): string =>
  user === null || user === undefined || user.id === null || user.id === undefined ? '' : String(user.id)

const MIB = 1024 * 1024
const shown = (n: number) => (n >= MIB ? `${(n / MIB).toFixed(1)} MiB` : `${n} bytes`)

function exceeded(ctx: ServiceContext, kind: PendingKind, limit: number, used: number, bytes?: number): AttachStorageError {
  ctx.observe.quotaRefusal(kind)
  const asked = bytes === undefined ? '' : `; this upload needs ${shown(bytes)} more`
  return new AttachStorageError(
    'quota-exceeded',
    `Your uploads not saved yet hold ${shown(used)} of your ${shown(limit)}${asked}: save or delete some first, or wait until they expire`,
    { status: 413 },
  )
}

/** When a reservation made now expires: `tmp-ttl` ahead, as the temporary file it stands for. */
const expiryFrom = (ctx: ServiceContext, begun?: string) =>
  new Date((begun ? Date.parse(begun) : ctx.now().getTime()) + ctx.config.tmpTtl).toISOString()

/**
 * Refuses (413 `quota-exceeded`) an upload of unknown size when its user already holds the quota or
 * more: a multipart temporary upload before its body is read, a tus upload of deferred length.
 */
export async function admitUpload(ctx: ServiceContext, user: AuthUser | null, kind: PendingKind): Promise<void> {
  const limit = ctx.config.upload.userQuota
  if (!limit) return
  const used = await ctx.repo.pending.used(userKeyOf(user), ctx.now().toISOString())
  if (used >= limit) throw exceeded(ctx, kind, limit, used)
}

/**
 * Reserves `bytes` for the pending upload `name` of `user` (or changes its row: a tus upload or a
 * presigned upload becoming a temporary file). Past the quota it throws 413 `quota-exceeded` and writes
 * nothing; a row that does not grow is never refused.
 */
export async function reserveUpload(
  ctx: ServiceContext,
  r: { name: string; user: AuthUser | { id: unknown } | null; bytes: number; kind: PendingKind; begun?: string },
): Promise<void> {
  const limit = ctx.config.upload.userQuota
  const reservation: Reservation = {
    name: r.name,
    userKey: userKeyOf(r.user),
    kind: r.kind,
    bytes: r.bytes,
    expiresDt: expiryFrom(ctx, r.begun),
  }
  const { ok, others } = await ctx.repo.pending.reserve(reservation, limit, ctx.now().toISOString())
  if (!ok) throw exceeded(ctx, r.kind, limit, others, r.bytes)
}

/**
 * Forgets the reservations of these names: committed, terminated, refused or deleted. A failure is
 * logged, never thrown (the row then counts until it expires).
 */
export async function releaseUploads(ctx: ServiceContext, names: readonly string[]): Promise<void> {
  if (!names.length) return
  await ctx.repo.pending
    .release(names)
    .catch((err: unknown) => ctx.logger.warn('attach-storage: could not forget the quota reservations of finished uploads', err))
}

/** The sweep's part: forgets expired reservations; answers how many went. */
export function forgetExpiredUploads(ctx: ServiceContext): Promise<number> {
  return ctx.repo.pending.forgetExpired(ctx.now().toISOString())
}

/** Pending bytes and uploads per user now, most bytes first (`attach-storage stats --quota`). */
export function pendingByUser(ctx: ServiceContext): Promise<Array<{ userKey: string; uploads: number; bytes: number }>> {
  return ctx.repo.pending.byUser(ctx.now().toISOString())
}

/** A lease holder's id: this host and process, then the request's own. */
const HOLDER_PREFIX = `${hostname()}|${process.pid}|`

/**
 * Whether a lease holder was a process of this host that is gone (killed, crashed): its lease is stale
 * at once, so a restarted server resumes its uploads without waiting for the lease to run out. A holder
 * on another host, or a live process, keeps its lease until it ends.
 */
function deadHereHolder(holder: string): boolean {
  const [host, pid] = holder.split('|')
  const n = Number(pid)
  if (host !== hostname() || !Number.isSafeInteger(n) || n <= 0 || n === process.pid) return false
  try {
    process.kill(n, 0)
    return false
  } catch (err) {
    return (err as { code?: string }).code === 'ESRCH'
  }
}

/** 409: another request (on this instance or another) is writing the upload now. */
export const uploadBusy = (name: string) =>
  new AttachStorageError('conflict', `Another request is writing upload ${name} now; ask its offset (HEAD) and resume`, {
    status: 409,
    headers: { 'retry-after': '1' },
  })

/**
 * Runs `fn` holding the lease of upload `name` (its `attach_pending` row), which one request at a time
 * holds across every instance sharing the database: another holder answers 409 ({@link uploadBusy}),
 * or undefined with `orSkip`. The lease lasts {@link LEASE_MS} and is renewed while `fn` runs, so a
 * crashed holder on another host blocks the upload that long at most (one of this host whose process
 * is gone, not at all); a renewal that finds it lost aborts `fn`'s signal. An upload without a row (begun before the table existed) gets one from `missing` first,
 * which also checks that the upload exists and is the caller's.
 */
export async function withUploadLease<T>(
  ctx: ServiceContext,
  name: string,
  missing: () => Promise<Omit<Parameters<typeof reserveUpload>[1], 'name'>>,
  fn: (lost: AbortSignal) => Promise<T>,
  options: { orSkip?: boolean } = {},
): Promise<T | undefined> {
  const pending = ctx.repo.pending
  const holder = HOLDER_PREFIX + randomUUID()
  const until = () => new Date(Date.now() + LEASE_MS).toISOString()
  let got = await pending.takeLease(name, holder, until(), new Date().toISOString())
  if (got === 'held') {
    // Held by a process of this host that is gone (a kill -9, a crash): taken over at once.
    const other = await pending.leaseHolder(name)
    if (other && deadHereHolder(other)) got = await pending.takeLease(name, holder, until(), new Date().toISOString(), other)
  }
  if (got === 'missing') {
    const r = await missing()
    await ctx.repo.pending.reserve(
      { name, userKey: userKeyOf(r.user), kind: r.kind, bytes: r.bytes, expiresDt: expiryFrom(ctx, r.begun) },
      0,
      ctx.now().toISOString(),
    )
    got = await pending.takeLease(name, holder, until(), new Date().toISOString())
  }
  if (got !== 'taken') {
    if (options.orSkip) return undefined
    throw uploadBusy(name)
  }
  const lost = new AbortController()
  const timer = setInterval(() => {
    pending.renewLease(name, holder, until()).then(
      (kept) => {
        if (!kept && !lost.signal.aborted) lost.abort(uploadBusy(name))
      },
      (err: unknown) => ctx.logger.warn(`attach-storage: renewing the lease of upload ${name} failed`, err),
    )
  }, RENEW_MS)
  timer.unref?.()
  try {
    return await fn(lost.signal)
  } finally {
    clearInterval(timer)
    await pending
      .dropLease(name, holder)
      .catch((err: unknown) => ctx.logger.warn(`attach-storage: giving back the lease of upload ${name} failed`, err))
  }
}
