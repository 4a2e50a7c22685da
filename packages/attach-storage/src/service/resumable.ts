/**
 * Resumable uploads (tus 1.0): an upload's state lives in the temporary store under `_tus/{name}/`, its
 * bytes arrive chunk by chunk, and the complete file goes through its category's filters into the
 * temporary area as `_tmp/{name}` with its sidecar, exactly like a multipart temporary upload.
 *
 * The `Store` interface has no append, so on any store each PATCH's bytes are kept as part objects of at
 * most `resumable.partSize` (`_tus/{name}/{offset}.part`), concatenated by streaming at completion. A
 * local temporary store appends to one file (`_tus/{name}/data`) instead and renames it into place.
 * Every step leaves a state from which the client's retry (HEAD, then PATCH) completes the upload.
 * How the bytes are kept is service/resumable-bytes.ts; a PATCH holds the upload's lease (service/quota.ts).
 */
import { open, stat } from 'node:fs/promises'
import { dirname } from 'node:path'
import { Readable, Writable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import { AttachStorageError, badRequest, forbidden, notFound, tooLarge } from '../errors.js'
import { extensionOf } from '../media/sniff.js'
import { mkdirDurable } from '../stores/local-store.js'
import { readSmallObject } from '../stores/read-all.js'
import type { Store } from '../stores/store.js'
import { sameUser } from './access.js'
import type { ServiceContext } from './context.js'
import { ProbeStream, ingest } from './ingest.js'
import { generateSavedName } from './layout.js'
import { cleanDisplayName } from './names.js'
import { admitUpload, releaseUploads, reserveUpload, withUploadLease } from './quota.js'
import { type Checksum, dataKey, folder, hashes, infoKey, localFile, partsOf, TUS_PREFIX, write } from './resumable-bytes.js'
import { readHead, readTmpMeta, type TmpMeta, tmpKey } from './temporary.js'
import type { AccessContext, ReceivedFile, TemporaryItem } from './types.js'
import { discardReceived, keepTemporary, uploadTarget } from './uploads.js'

export { type Checksum, TUS_PREFIX } from './resumable-bytes.js'

/** What is kept of an unfinished upload (`_tus/{name}/info.json`). */
export interface ResumableInfo {
  name: string
  displayName: string
  refDomain: string
  refCategory: string
  /** The declared length; null while deferred (`Upload-Defer-Length`). */
  length: number | null
  createdBy: string | number | null
  createdDt: string
}

/** Where an upload stands, as HEAD answers it. */
export interface ResumableStatus {
  name: string
  offset: number
  length: number | null
  /** When an unfinished upload expires (`tmp-ttl` after its creation); the temporary file's own when complete. */
  expires: Date
  /** The temporary file once the upload is complete. */
  done?: TmpMeta
}

/** What a PATCH (or a creation with bytes) answers. */
export interface AppendResult extends ResumableStatus {
  /** The temporary file, when this request completed the upload. */
  item?: TemporaryItem
}

/** The creation's input: the parsed `Upload-Metadata` and `Upload-Length`. */
export interface CreateInput {
  /** `Upload-Length`; undefined for `Upload-Defer-Length: 1`. */
  length: number | undefined
  filename: string
  refDomain: string
  refCategory: string
}

/**
 * One running request per upload in this service: a HEAD after a dropped PATCH sees its last byte.
 * Across instances (or services) the upload's lease decides ({@link withUploadLease}).
 */
const lockTables = new WeakMap<ServiceContext, Map<string, Promise<unknown>>>()
async function withLock<T>(ctx: ServiceContext, name: string, fn: () => Promise<T>): Promise<T> {
  let locks = lockTables.get(ctx)
  if (!locks) {
    locks = new Map()
    lockTables.set(ctx, locks)
  }
  const before = locks.get(name) ?? Promise.resolve()
  const run = before.then(fn, fn)
  const tail = run.catch(() => undefined)
  locks.set(name, tail)
  try {
    return await run
  } finally {
    if (locks.get(name) === tail) locks.delete(name)
  }
}

/**
 * Runs `fn` holding the upload's lease, across every instance on the database (409 while another
 * request holds it, or undefined with `orSkip`). An upload begun before the lease table existed gets its
 * row from its info, once `find` has shown it exists and is the caller's.
 */
function leased<T>(
  ctx: ServiceContext,
  name: string,
  access: AccessContext,
  fn: (lost: AbortSignal) => Promise<T>,
  options: { orSkip?: boolean } = {},
): Promise<T | undefined> {
  const missing = async () => {
    const { info, status } = await find(ctx, name, access)
    const bytes = info ? (info.length ?? 0) : status.offset
    return { user: access.user, bytes, kind: info ? ('tus' as const) : ('tmp' as const), begun: info?.createdDt ?? status.done?.createdDt }
  }
  return withUploadLease(ctx, name, missing, fn, options)
}

async function readInfo(tmp: Store, name: string): Promise<ResumableInfo | undefined> {
  try {
    return JSON.parse((await readSmallObject(tmp, infoKey(name))).toString('utf8')) as ResumableInfo
  } catch (err) {
    if (err instanceof AttachStorageError && err.code === 'not-found') return undefined
    throw err
  }
}

const expiresOf = (ctx: ServiceContext, createdDt: string) => new Date(Date.parse(createdDt) + ctx.config.tmpTtl)

async function offsetOf(ctx: ServiceContext, name: string): Promise<number> {
  const tmp = ctx.stores.tmpStore
  const file = localFile(ctx, dataKey(name))
  if (!file) return (await partsOf(tmp, name)).offset
  const size = await stat(file).then(
    (s) => s.size,
    () => undefined,
  )
  if (size !== undefined) return size
  // Renamed into the temporary area by a completion that a crash interrupted.
  return (await tmp.exists(tmpKey(name))) ? (await tmp.stat(tmpKey(name))).size : 0
}

/** Removes an upload's folder: its info first (what is left without it is only swept), then its bytes. */
async function dropFolder(ctx: ServiceContext, name: string): Promise<void> {
  const tmp = ctx.stores.tmpStore
  hashes.delete(name)
  await tmp.delete(infoKey(name))
  for await (const e of tmp.list(folder(name))) await tmp.delete(e.key)
}

/** Creates an upload: checks its target and size, keeps its info. Resolves with its name (the tus id). */
export async function createResumable(ctx: ServiceContext, input: CreateInput, access: AccessContext): Promise<ResumableStatus> {
  const max = ctx.config.upload.maxFileSize
  if (input.length !== undefined && input.length > max) throw tooLarge(`Upload-Length is larger than the limit of ${max} bytes`)
  uploadTarget(ctx, { refDomain: input.refDomain, refCategory: input.refCategory })
  const displayName = cleanDisplayName(input.filename)
  const name = generateSavedName(extensionOf(displayName))
  const info: ResumableInfo = {
    name,
    displayName,
    refDomain: input.refDomain,
    refCategory: input.refCategory,
    length: input.length ?? null,
    createdBy: access.user?.id ?? null,
    createdDt: ctx.now().toISOString(),
  }
  // The user's quota: the declared length is reserved now (a deferred one when it is declared).
  if (input.length === undefined) await admitUpload(ctx, access.user, 'tus')
  await reserveUpload(ctx, { name, user: access.user, bytes: input.length ?? 0, kind: 'tus', begun: info.createdDt })
  try {
    const file = localFile(ctx, dataKey(name))
    if (file) {
      await mkdirDurable(dirname(file))
      await (await open(file, 'a')).close()
    }
    await ctx.stores.tmpStore.put(infoKey(name), Buffer.from(JSON.stringify(info)), { contentType: 'application/json' })
  } catch (err) {
    await releaseUploads(ctx, [name])
    throw err
  }
  return { name, offset: 0, length: info.length, expires: expiresOf(ctx, info.createdDt) }
}

/** The caller's upload and where it stands: 404 unknown or expired, 403 another user's. */
async function find(ctx: ServiceContext, name: string, access: AccessContext): Promise<{ info?: ResumableInfo; status: ResumableStatus }> {
  const mine = (createdBy: unknown) => ((createdBy ?? null) === null ? access.user === null : sameUser(createdBy, access.user?.id))
  /** The upload's expiry, once it is the caller's and not expired. */
  const checked = (info: ResumableInfo) => {
    if (!mine(info.createdBy)) throw forbidden('This upload belongs to another user')
    const expires = expiresOf(ctx, info.createdDt)
    if (expires.getTime() <= ctx.now().getTime()) throw notFound('This upload has expired')
    return expires
  }
  // On the local store, an upload whose data file is still there is not completed: the completion
  // renames that file away before anything marks the upload done. Its info and the file's size are
  // read at once, and the completed upload's record is not looked for (one read fewer a PATCH).
  const file = localFile(ctx, dataKey(name))
  /** The info as read beside the data file's size, when it was (so it is not read twice). */
  let read: { info: ResumableInfo | undefined } | undefined
  if (file) {
    const [size, info] = await Promise.all([
      stat(file).then(
        (s) => s.size,
        () => undefined,
      ),
      readInfo(ctx.stores.tmpStore, name),
    ])
    if (size !== undefined && info) return { info, status: { name, offset: size, length: info.length, expires: checked(info) } }
    read = { info }
  }
  const done = await readTmpMeta(ctx, name)
  if (done) {
    if (!mine(done.createdBy)) throw forbidden('This upload belongs to another user')
    // Completed, but a crash kept its folder: it goes now.
    if (await ctx.stores.tmpStore.exists(infoKey(name))) await dropFolder(ctx, name)
    return { status: { name, offset: done.size, length: done.size, expires: expiresOf(ctx, done.createdDt), done } }
  }
  const info = read ? read.info : await readInfo(ctx.stores.tmpStore, name)
  if (!info) throw notFound('No such upload (unknown, expired or refused)')
  const expires = checked(info)
  return { info, status: { name, offset: await offsetOf(ctx, name), length: info.length, expires } }
}

/**
 * Where an upload stands (HEAD). An upload whose bytes are all in but whose completion was interrupted
 * (a crash) is completed now; a refusal by the filters then leaves nothing and answers 404.
 */
export function resumableStatus(ctx: ServiceContext, name: string, access: AccessContext): Promise<ResumableStatus> {
  return withLock(ctx, name, async () => {
    const first = await find(ctx, name, access)
    if (!first.info || first.info.length === null || first.status.offset !== first.info.length) return first.status
    // Completed under the lease; while another request holds it, that request completes the upload.
    const completed = await leased(
      ctx,
      name,
      access,
      async () => {
        const { info, status } = await find(ctx, name, access)
        if (!info || info.length === null || status.offset !== info.length) return status
        try {
          return await complete(ctx, info, access)
        } catch (err) {
          if (err instanceof AttachStorageError && err.status === 400) throw notFound(`The upload was refused: ${err.message}`)
          throw err
        }
      },
      { orSkip: true },
    )
    return completed ?? first.status
  })
}

/** Removes an upload, finished or not (DELETE, the termination extension). */
export function terminateResumable(ctx: ServiceContext, name: string, access: AccessContext): Promise<void> {
  return withLock(ctx, name, async () => {
    await leased(ctx, name, access, async () => {
      const { status } = await find(ctx, name, access)
      if (status.done) await discardReceived(ctx, [{ name } as ReceivedFile])
      await dropFolder(ctx, name)
    })
    await releaseUploads(ctx, [name])
  })
}

/**
 * Appends a PATCH's bytes at `offset` (409 when it is not the upload's offset). Bytes past the declared
 * length, or past `upload.max-file-size` while the length is deferred, answer 413 and remove the upload.
 * The last byte completes it: the file is checked by its category's filters (a refusal answers 400 with
 * the filter's code and leaves nothing).
 */
export function appendResumable(
  ctx: ServiceContext,
  name: string,
  input: {
    offset: number
    /** The request's bytes: a Node stream, or any async iterable of chunks (nothing buffered ahead). */
    body: AsyncIterable<Uint8Array> | null
    contentLength?: number
    length?: number
    checksum?: Checksum
    signal?: AbortSignal
  },
  access: AccessContext,
): Promise<AppendResult> {
  return withLock(ctx, name, async () => {
    // The lease first: of two instances sent a PATCH of this upload at once, one writes, the other answers 409.
    const result = await leased(ctx, name, access, (lost) => appendLeased(ctx, name, input, access, lost))
    return result!
  })
}

async function appendLeased(
  ctx: ServiceContext,
  name: string,
  input: Parameters<typeof appendResumable>[2],
  access: AccessContext,
  lost: AbortSignal,
): Promise<AppendResult> {
  let { info, status } = await find(ctx, name, access)
  if (status.done || !info) {
    if (input.offset === status.offset && !input.contentLength) return status
    throw conflict(status.offset)
  }
  if (input.offset !== status.offset) throw conflict(status.offset)
  const max = ctx.config.upload.maxFileSize
  if (input.length !== undefined) {
    if (info.length !== null && info.length !== input.length) throw badRequest('Upload-Length cannot change')
    if (input.length > max) {
      await drop(ctx, name)
      throw tooLarge(`Upload-Length is larger than the limit of ${max} bytes`)
    }
    if (input.length < status.offset) throw badRequest('Upload-Length is smaller than the bytes received')
    if (info.length === null) {
      try {
        await reserveUpload(ctx, { name, user: access.user, bytes: input.length, kind: 'tus', begun: info.createdDt })
      } catch (err) {
        await drop(ctx, name)
        throw err
      }
      info = { ...info, length: input.length }
      await ctx.stores.tmpStore.put(infoKey(name), Buffer.from(JSON.stringify(info)), { contentType: 'application/json' })
    }
  }
  const limit = info.length ?? max
  const over = () =>
    tooLarge(
      info.length === null
        ? `The upload is larger than the limit of ${max} bytes`
        : `The upload is longer than its Upload-Length of ${limit} bytes`,
    )
  if (input.contentLength !== undefined && status.offset + input.contentLength > limit) {
    await drop(ctx, name)
    throw over()
  }
  let offset = status.offset
  if (input.body) {
    const signal = input.signal ? AbortSignal.any([input.signal, lost]) : lost
    try {
      const before = offset
      offset = await write(ctx, name, offset, input.body, limit - offset, over, input.checksum, signal)
      ctx.observe.bytes('in', offset - before)
    } catch (err) {
      if (err instanceof AttachStorageError && err.code === 'too-large') await drop(ctx, name)
      throw err
    }
  }
  if (lost.aborted) throw lost.reason
  if (info.length !== null && offset === info.length) {
    return { ...(await complete(ctx, info, access)), offset }
  }
  return { ...status, offset, length: info.length }
}

/** Removes an unfinished upload that can go no further (too large, past the quota) and its reservation. */
async function drop(ctx: ServiceContext, name: string): Promise<void> {
  await dropFolder(ctx, name)
  await releaseUploads(ctx, [name])
}

const conflict = (offset: number) =>
  new AttachStorageError('conflict', `Upload-Offset does not match the upload's offset ${offset}`, { status: 409 })

/**
 * Completes an upload whose bytes are all in: assembles `_tmp/{name}` (a rename on the local path, a
 * streamed concatenation of the parts otherwise; skipped when a crash left it assembled), runs the
 * filters, writes the sidecar, then removes the folder. Idempotent step by step.
 */
async function complete(ctx: ServiceContext, info: ResumableInfo, access: AccessContext): Promise<ResumableStatus> {
  const tmp = ctx.stores.tmpStore
  const { name } = info
  const length = info.length!
  let probe: { size: number; sha256: string; head: Uint8Array }
  const file = localFile(ctx, dataKey(name))
  if (
    file &&
    (await stat(file).then(
      () => true,
      () => false,
    ))
  )
    await tmp.move(dataKey(name), tmpKey(name))
  const known = hashes.get(name)
  hashes.delete(name)
  if (known && known.offset === length && (await tmp.exists(tmpKey(name))) && (await tmp.stat(tmpKey(name))).size === length) {
    probe = { size: length, sha256: known.hash.digest('hex'), head: await readHead(tmp, tmpKey(name)) }
  } else if (await tmp.exists(tmpKey(name))) {
    const p = new ProbeStream(length)
    await pipeline(await tmp.get(tmpKey(name)), p, new Writable({ write: (_chunk, _enc, cb) => cb() }))
    probe = p.result()
  } else {
    const { parts, offset } = await partsOf(tmp, name)
    if (offset !== length) throw notFound('The upload is incomplete')
    async function* concat(): AsyncGenerator<Buffer> {
      for (const part of parts) yield* (await tmp.get(part.key)) as AsyncIterable<Buffer>
    }
    probe = await ingest(tmp, tmpKey(name), Readable.from(concat(), { objectMode: false }), { maxSize: length })
  }
  if (probe.size !== length) {
    await discardReceived(ctx, [{ name } as ReceivedFile])
    throw notFound('The upload is incomplete')
  }
  const received: ReceivedFile = { name, displayName: info.displayName, extension: extensionOf(info.displayName), ...probe }
  const target = uploadTarget(ctx, { refDomain: info.refDomain, refCategory: info.refCategory })
  await ctx.testPause?.('tus-assembled', access.request)
  const item = await keepTemporary(ctx, received, target, access)
  await ctx.testPause?.('tus-kept', access.request)
  await dropFolder(ctx, name)
  if ('error' in item) throw badRequest(item.error.message, item.error.code)
  const done = await readTmpMeta(ctx, name)
  return { name, offset: length, length, expires: expiresOf(ctx, done?.createdDt ?? ctx.now().toISOString()), done, item } as AppendResult
}

/**
 * The sweep's part: removes unfinished uploads created before `cutoff` (and folders a crash left
 * without their info). Answers how many went.
 */
export async function sweepResumable(ctx: ServiceContext, cutoff: Date): Promise<number> {
  const tmp = ctx.stores.tmpStore
  const byName = new Map<string, { info?: Date; newest: Date }>()
  for await (const e of tmp.list(TUS_PREFIX)) {
    const name = e.key.slice(TUS_PREFIX.length).split('/')[0]!
    const g = byName.get(name) ?? { newest: new Date(0) }
    if (e.key === infoKey(name)) g.info = e.lastModified
    if (e.lastModified > g.newest) g.newest = e.lastModified
    byName.set(name, g)
  }
  let n = 0
  for (const [name, g] of byName) {
    if ((g.info ?? g.newest) >= cutoff) continue
    const info = g.info ? await readInfo(tmp, name) : undefined
    if (info && Date.parse(info.createdDt) >= cutoff.getTime()) continue
    await dropFolder(ctx, name)
    n++
  }
  return n
}
