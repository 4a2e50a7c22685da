import type { Kysely, Selectable, Transaction } from 'kysely'
import { badRequest } from '../errors.js'
import type { ListProvider, ListRequest } from '../list/list-query.js'
import type { AttachmentRecord, BlobRecord, MediaInfo, UserId } from '../model.js'
import { type AttachBlobTable, type AttachDatabase, type AttachFileTable, BLOB_TABLE, type DbInteger } from './database.js'

/*
 * The shapes the repository takes and answers, and the small pure helpers its queries share: a row to a
 * record, a record to a row, the checks of ids, sorts and sizes.
 */

export type Db = Kysely<AttachDatabase>
export type Trx = Transaction<AttachDatabase>
export type FileRow = Selectable<AttachFileTable>
export type BlobRow = Selectable<AttachBlobTable>

/** A physical file about to be written (see {@link AttachRepository.reserveBlob}). */
export interface NewBlob {
  store: string
  savedDir: string
  savedName: string
  fileSize: number
  fileType: string
  sha256: string
  createdDt: string
  /**
   * The name of the temporary file being moved here (a confirmed save), remembered so that a retry after
   * a crash finds this blob; omitted for other blobs.
   */
  tmpName?: string | null
  /** The file's media (an image's size and placeholder); null or omitted when none or not known. */
  media?: MediaInfo | null
}

/** The record-specific part of a new attachment record; the file part is copied from its blob. */
export interface NewRecord {
  refDomain: string
  refKey: string
  refCategory: string
  displayName: string
  ext: string | null
  fmetaValue: string | null
  sort: number
  createdBy: UserId | null
  createdDt: string
}

/** The reference a record is bound to. */
export interface RecordReference {
  refDomain: string
  refKey: string
  refCategory: string
}

/** The only columns {@link AttachRepository.updateMetadata} can write. */
export interface MetadataUpdate {
  id: number
  displayName?: string
  ext?: string | null
  fmetaValue?: string | null
  sort?: number
  /** The focal point, 0..1 from the top left; `null` clears it. */
  focus?: { x: number; y: number } | null
}

/** The search whitelist and order of the conditional attachment list (the list convention over `attach_file`). */
export const ATTACHMENT_LIST: ListProvider = {
  fields: {
    displayName: { type: 'string', ops: ['eq', 'like'], column: 'display_name' },
    ext: { type: 'string', ops: ['eq', 'ne', 'in'], column: 'ext' },
    fmetaValue: { type: 'string', ops: ['eq', 'in'], column: 'fmeta_value' },
    fileType: { type: 'string', ops: ['eq', 'like'], column: 'file_type' },
    createdDt: { type: 'datetime', ops: ['gt', 'ge', 'lt', 'le'], column: 'created_dt' },
  },
  sortable: {},
  primaryKey: 'id',
  defaultOrder: [
    { column: 'ref_key', direction: 'asc' },
    { column: 'ref_category', direction: 'asc' },
    { column: 'sort', direction: 'asc' },
  ],
  maxPerPage: 1000,
}

/** What {@link AttachRepository.listConditional} lists. */
export interface ConditionalListInput {
  refDomain: string
  refKeys: string[]
  /** The categories listed; none lists nothing. */
  refCategories: string[]
  list: ListRequest
  /** Read at most `cap + 1` rows (so the caller sees that there were more). */
  cap?: number
}

/** Records marked deleted, and the blobs nobody references any more (their files are to be deleted). */
export interface MarkDeletedResult {
  deleted: AttachmentRecord[]
  orphanBlobs: BlobRecord[]
}

/** Largest number of bound values put in one `IN (...)` list. */
export const IN_CHUNK = 500
export const INT32_MAX = 2_147_483_647

/** The row of a new record bound to `blob`: the file part is the blob's. */
export function recordRow(rec: NewRecord, blob: BlobRow) {
  return {
    ref_domain: rec.refDomain,
    ref_key: rec.refKey,
    ref_category: rec.refCategory,
    display_name: rec.displayName,
    saved_name: blob.saved_name,
    saved_dir: blob.saved_dir,
    file_type: blob.file_type,
    file_size: toNumber(blob.file_size),
    ext: rec.ext ?? null,
    fmeta_value: rec.fmetaValue ?? null,
    sort: rec.sort,
    created_by: rec.createdBy === null || rec.createdBy === undefined ? null : String(rec.createdBy),
    created_dt: rec.createdDt,
    deleted: 0,
    deleted_dt: null,
    sha256: blob.sha256,
    store: blob.store,
    blob_id: toNumber(blob.id),
    media: blob.media ?? null,
  }
}

export async function selectBlob(trx: Trx, id: number): Promise<BlobRow> {
  return trx.selectFrom(BLOB_TABLE).selectAll().where('id', '=', id).executeTakeFirstOrThrow()
}

/** A deadlock error of MySQL (`ER_LOCK_DEADLOCK`, 1213) or PostgreSQL (`40P01`). */
export function isDeadlock(err: unknown): boolean {
  const e = err as { errno?: unknown; code?: unknown } | null
  return typeof e === 'object' && e !== null && (e.errno === 1213 || e.code === 'ER_LOCK_DEADLOCK' || e.code === '40P01')
}

export function toNumber(value: DbInteger): number {
  return typeof value === 'number' ? value : Number(value)
}

/** `createdBy` is stored as text; a canonical decimal integer (what `String(n)` gives) comes back as a number. */
export function mapCreatedBy(value: string | null): UserId | null {
  if (value === null || value === undefined) return null
  if (/^-?(0|[1-9]\d*)$/.test(value)) {
    const n = Number(value)
    if (Number.isSafeInteger(n)) return n
  }
  return value
}

/**
 * The columns of `attach_file` a record is made of, in the order {@link recordOfValues} takes them: a
 * view's record read (SQLite) answers them as one array of values, not an object keyed by name.
 */
export const RECORD_COLUMNS = [
  'id',
  'ref_domain',
  'ref_key',
  'ref_category',
  'display_name',
  'saved_name',
  'saved_dir',
  'file_type',
  'file_size',
  'ext',
  'fmeta_value',
  'sort',
  'created_by',
  'created_dt',
  'sha256',
  'store',
  'blob_id',
  'focus_x',
  'focus_y',
  'media',
] as const satisfies ReadonlyArray<keyof FileRow>

type ValuesOf<T extends ReadonlyArray<keyof FileRow>> = { -readonly [I in keyof T]: FileRow[T[I] & keyof FileRow] }
/** A row of {@link RECORD_COLUMNS} as the database answers it. */
export type RecordRow = Pick<FileRow, (typeof RECORD_COLUMNS)[number]>
/** The values of {@link RECORD_COLUMNS}, in their order. */
export type RecordValues = ValuesOf<typeof RECORD_COLUMNS>

export function mapRecord(r: RecordRow): AttachmentRecord {
  return recordOfValues(RECORD_COLUMNS.map((c) => r[c]) as RecordValues)
}

/** A record from the values of {@link RECORD_COLUMNS}, by their places in it. */
export function recordOfValues(v: RecordValues): AttachmentRecord {
  const focusX = v[17]
  const focusY = v[18]
  return {
    id: toNumber(v[0]),
    refDomain: v[1],
    refKey: v[2],
    refCategory: v[3],
    displayName: v[4],
    savedName: v[5],
    savedDir: v[6],
    fileType: v[7],
    fileSize: toNumber(v[8]),
    ext: v[9] ?? null,
    fmetaValue: v[10] ?? null,
    sort: toNumber(v[11]),
    createdBy: mapCreatedBy(v[12]),
    createdDt: v[13],
    // char(64) pads on PostgreSQL; a hex digest never ends in a space.
    sha256: v[14].trimEnd(),
    store: v[15],
    blobId: toNumber(v[16]),
    ...(focusX != null && focusY != null ? { focus: { x: Number(focusX), y: Number(focusY) } } : {}),
    media: parseMedia(v[19]),
  }
}

/** The `media` column read back: the stored JSON, or null (none, not known, or not an object). */
export function parseMedia(value: string | null | undefined): MediaInfo | null {
  if (!value) return null
  try {
    const media = JSON.parse(value) as unknown
    return typeof media === 'object' && media !== null ? (media as MediaInfo) : null
  } catch {
    return null
  }
}

export function mapBlob(r: BlobRow): BlobRecord {
  return {
    id: toNumber(r.id),
    store: r.store,
    savedDir: r.saved_dir,
    savedName: r.saved_name,
    fileSize: toNumber(r.file_size),
    fileType: r.file_type,
    sha256: r.sha256.trimEnd(),
    refCount: toNumber(r.ref_count),
    createdDt: r.created_dt,
  }
}

export function isId(id: unknown): id is number {
  return typeof id === 'number' && Number.isSafeInteger(id) && id > 0
}

export function assertId(id: unknown, name: string): asserts id is number {
  if (!isId(id)) throw badRequest(`${name} must be a positive integer`)
}

export function assertSort(sort: unknown): asserts sort is number {
  if (typeof sort !== 'number' || !Number.isSafeInteger(sort) || sort < 0 || sort > INT32_MAX) {
    throw badRequest('sort must be an integer from 0')
  }
}

export function assertSize(size: unknown): asserts size is number {
  if (typeof size !== 'number' || !Number.isSafeInteger(size) || size < 0) {
    throw badRequest('fileSize must be a non-negative integer')
  }
}

export function chunk<T>(items: T[], size: number): T[][] {
  const parts: T[][] = []
  for (let i = 0; i < items.length; i += size) parts.push(items.slice(i, i + size))
  return parts
}
