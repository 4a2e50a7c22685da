/** The temporary area: its keys and the sidecar that makes a temporary file savable. */
import { AttachStorageError } from '../errors.js'
import { SNIFF_BYTES } from '../media/sniff.js'
import type { MediaInfo } from '../model.js'
import { readAll, readSmallObject } from '../stores/read-all.js'
import type { Store } from '../stores/store.js'
import type { ServiceContext } from './context.js'

/** The temporary area's folder in the temporary store. */
export const TMP_PREFIX = '_tmp/'

/** The store key of a temporary file. */
export const tmpKey = (name: string) => TMP_PREFIX + name

/** The store key of a temporary file's sidecar (domain, category, uploader, sniffed type, sha256). */
export const tmpMetaKey = (name: string) => `${TMP_PREFIX}${name}.meta.json`

/**
 * Where a direct-to-cloud upload's client writes (a presigned address): apart from the temporary file
 * itself, which only the server writes, once it has verified those bytes (service/direct-to-cloud.ts).
 */
export const tmpUploadKey = (name: string) => `${TMP_PREFIX}_up/${name}`

/** Metadata kept beside a temporary file. */
export interface TmpMeta {
  name: string
  displayName: string
  size: number
  type: string
  sha256: string
  refDomain: string
  refCategory: string
  createdBy: string | number | null
  createdDt: string
  /**
   * The file's media: null when none applies. Absent for an image (its media is learnt from the final
   * temporary bytes in the background once it is kept, and its commit takes it: media-kept.ts) and for a
   * direct-to-cloud upload (recorded null).
   */
  media?: MediaInfo | null
  /**
   * A direct-to-cloud upload not verified yet: the client's declared size, when its write address
   * expires, and the store it writes to (`_up/{name}` there). `size` is then the declared size, `type` and `sha256` are empty until the commit verifies
   * the object (and removes this member).
   */
  pending?: { size: number; expiresAt: string; store: string }
}

/** The first bytes of a stored file, enough for content sniffing (empty when it cannot be read). */
export async function readHead(store: Store, key: string): Promise<Uint8Array> {
  const s = await store.get(key, { start: 0, end: SNIFF_BYTES - 1 }).catch(() => undefined)
  return s ? readAll(s) : new Uint8Array()
}

/** The sidecar of a temporary file; undefined when it is missing, or (unless `withFile` is false) the file is. */
export async function readTmpMeta(
  ctx: ServiceContext,
  savedName: string,
  options: { withFile?: boolean } = {},
): Promise<TmpMeta | undefined> {
  const tmp = ctx.stores.tmpStore
  let bytes: Buffer
  try {
    bytes = await readSmallObject(tmp, tmpMetaKey(savedName))
  } catch (err) {
    if (err instanceof AttachStorageError && err.code === 'not-found') return undefined
    throw err
  }
  const meta = JSON.parse(bytes.toString('utf8')) as TmpMeta
  if (options.withFile !== false && !(await tmp.exists(tmpKey(savedName)))) return undefined
  return meta
}

/**
 * The store key of a temporary file's placements: where commits in a host's transaction copied it
 * (service/host-transaction.ts), written before each copy so that the copy of a transaction that rolled
 * back or died is found again (the tidying after the transaction, the retry, the sweep).
 */
export const tmpPlacedKey = (name: string) => `${TMP_PREFIX}${name}${PLACED_SUFFIX}`

/** How the key of a temporary file's placements ends. */
export const PLACED_SUFFIX = '.placed.json'

/** A copy of a temporary file placed by a commit in a host's transaction. */
export interface Placement {
  store: string
  savedDir: string
  savedName: string
}

/** The placements remembered for a temporary file (none when there is no record of any). */
export async function readPlacements(ctx: ServiceContext, savedName: string): Promise<Placement[]> {
  try {
    const bytes = await readSmallObject(ctx.stores.tmpStore, tmpPlacedKey(savedName))
    const list = JSON.parse(bytes.toString('utf8')) as unknown
    return Array.isArray(list) ? (list as Placement[]) : []
  } catch (err) {
    if (err instanceof AttachStorageError && err.code === 'not-found') return []
    throw err
  }
}

/** Remembers a placement of a temporary file (before the copy is made); a known one is not added twice. */
export async function rememberPlacement(ctx: ServiceContext, savedName: string, place: Placement): Promise<void> {
  const list = await readPlacements(ctx, savedName)
  if (list.some((p) => p.store === place.store && p.savedDir === place.savedDir && p.savedName === place.savedName)) return
  list.push(place)
  await ctx.stores.tmpStore.put(tmpPlacedKey(savedName), Buffer.from(JSON.stringify(list)), { contentType: 'application/json' })
}
