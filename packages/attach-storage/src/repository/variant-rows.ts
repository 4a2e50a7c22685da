/** The rows of `attach_variant`: which named variants are made for which records. */
import type { Kysely, Transaction } from 'kysely'
import { type AttachDatabase, type DbInteger, type DialectName, FILE_TABLE, VARIANT_TABLE } from './database.js'

/** A named variant made for a record. */
export interface VariantRow {
  fileId: number
  name: string
  /** The box and format it was made for (see {@link variantSpec}). */
  spec: string
  fileSize: number
  fileType: string
  createdDt: string
}

/** Largest number of bound values put in one `IN (...)` list. */
const IN_CHUNK = 500

/** A named variant's box and format as one word, `{w}x{h}[.{format}]` (0: no bound): what its row remembers. */
export function variantSpec(v: { w?: number; h?: number; format?: string; fit?: string }): string {
  return `${v.w ?? 0}x${v.h ?? 0}${v.fit === 'cover' ? 'c' : ''}${v.format ? `.${v.format}` : ''}`
}

/** Reads and writes `attach_variant` (SQLite, PostgreSQL, MySQL). */
export class VariantRows {
  readonly #db: Kysely<AttachDatabase>
  readonly #dialect: DialectName

  constructor(db: Kysely<AttachDatabase>, dialect: DialectName) {
    this.#db = db
    this.#dialect = dialect
  }

  /** The named variants made for these records. */
  async ofRecords(fileIds: readonly number[]): Promise<VariantRow[]> {
    const ids = [...new Set(fileIds)]
    const out: VariantRow[] = []
    for (let i = 0; i < ids.length; i += IN_CHUNK) {
      const rows = await this.#db
        .selectFrom(VARIANT_TABLE)
        .selectAll()
        .where('file_id', 'in', ids.slice(i, i + IN_CHUNK))
        .execute()
      for (const r of rows) out.push(mapVariant(r))
    }
    return out
  }

  /** Remembers that a record's named variant is made (or made again, for another spec). */
  async record(row: VariantRow): Promise<void> {
    const values = {
      file_id: row.fileId,
      name: row.name,
      spec: row.spec,
      file_size: row.fileSize,
      file_type: row.fileType,
      created_dt: row.createdDt,
    }
    const changed = { spec: row.spec, file_size: row.fileSize, file_type: row.fileType, created_dt: row.createdDt }
    const insert = this.#db.insertInto(VARIANT_TABLE).values(values)
    await (this.#dialect === 'mysql'
      ? insert.onDuplicateKeyUpdate(changed)
      : insert.onConflict((oc) => oc.columns(['file_id', 'name']).doUpdateSet(changed))
    ).execute()
  }

  /** Forgets the named variants of these records (deleted with them, in the caller's transaction when given). */
  async forget(fileIds: readonly number[], trx?: Transaction<AttachDatabase>): Promise<void> {
    const db = trx ?? this.#db
    for (let i = 0; i < fileIds.length; i += IN_CHUNK) {
      await db
        .deleteFrom(VARIANT_TABLE)
        .where('file_id', 'in', fileIds.slice(i, i + IN_CHUNK))
        .execute()
    }
  }

  /** Forgets every named variant of a domain's records (`variants purge`); answers how many rows went. */
  async forgetDomain(refDomain: string): Promise<number> {
    const result = await this.#db
      .deleteFrom(VARIANT_TABLE)
      .where('file_id', 'in', (eb) => eb.selectFrom(FILE_TABLE).select('id').where('ref_domain', '=', refDomain))
      .executeTakeFirst()
    return Number(result.numDeletedRows)
  }

  /**
   * Forgets rows whose record is deleted or gone: a job that ended after its record was deleted leaves
   * one. Answers how many went.
   */
  async forgetOrphans(): Promise<number> {
    const result = await this.#db
      .deleteFrom(VARIANT_TABLE)
      .where('file_id', 'not in', (eb) => eb.selectFrom(FILE_TABLE).select('id').where('deleted', '=', 0))
      .executeTakeFirst()
    return Number(result.numDeletedRows)
  }

  /** Named variants made, by name (for `stats`). */
  async countByName(): Promise<Array<{ name: string; count: number }>> {
    const rows = await this.#db
      .selectFrom(VARIANT_TABLE)
      .select((eb) => ['name', eb.fn.countAll<DbInteger>().as('n')])
      .groupBy('name')
      .orderBy('name')
      .execute()
    return rows.map((r) => ({ name: r.name, count: Number(r.n) }))
  }
}

function mapVariant(r: {
  file_id: DbInteger
  name: string
  spec: string
  file_size: DbInteger
  file_type: string
  created_dt: string
}): VariantRow {
  return {
    fileId: Number(r.file_id),
    name: r.name,
    spec: r.spec,
    fileSize: Number(r.file_size),
    fileType: r.file_type,
    createdDt: r.created_dt,
  }
}
