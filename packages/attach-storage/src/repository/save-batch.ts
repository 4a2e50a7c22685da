import { sql } from 'kysely'
import type { AttachmentRecord } from '../model.js'
import { BLOB_TABLE, type DbInteger, type DialectName, FILE_TABLE } from './database.js'
import { chunk, IN_CHUNK, isId, mapRecord, type NewRecord, recordRow, selectBlob, toNumber, type Trx } from './rows.js'

/**
 * The database work of one confirmed save, inside the transaction `trx` (see
 * `AttachRepository.applySave`): the re-sorts as one `CASE` update per category and 500 ids, the reuses
 * as one claim per blob and their records inserted 50 at a time. `breathe` gives the event loop a turn
 * between chunks.
 */
export async function applySaveIn(
  trx: Trx,
  dialect: DialectName,
  breathe: () => Promise<void>,
  ref: { refDomain: string; refKey: string },
  sorts: Array<{ id: number; refCategory: string; sort: number }>,
  reuses: Array<{ blobId: number; rec: NewRecord }>,
): Promise<{ sorted: boolean[]; created: Array<AttachmentRecord | null> }> {
  const sorted = sorts.map(() => false)
  const byCategory = new Map<string, number[]>()
  sorts.forEach((s, i) => {
    if (!isId(s.id)) return
    const list = byCategory.get(s.refCategory) ?? []
    list.push(i)
    byCategory.set(s.refCategory, list)
  })
  const sortValue = (n: number) => (dialect === 'postgres' ? sql<number>`cast(${n} as integer)` : sql<number>`${n}`)
  for (const [refCategory, indexes] of byCategory) {
    for (const part of chunk(indexes, IN_CHUNK)) {
      const ours = (q: any) =>
        q
          .where(
            'id',
            'in',
            part.map((i) => sorts[i]!.id),
          )
          .where('ref_domain', '=', ref.refDomain)
          .where('ref_key', '=', ref.refKey)
          .where('ref_category', '=', refCategory)
          .where('deleted', '=', 0)
      const found = new Set((await ours(trx.selectFrom(FILE_TABLE).select('id')).execute()).map((r: { id: DbInteger }) => toNumber(r.id)))
      const hits = part.filter((i) => found.has(sorts[i]!.id))
      if (hits.length === 0) continue
      const cases = sql.join(
        hits.map((i) => sql`when ${sorts[i]!.id} then ${sortValue(sorts[i]!.sort)}`),
        sql` `,
      )
      await ours(trx.updateTable(FILE_TABLE).set({ sort: sql<number>`case id ${cases} else sort end` })).execute()
      for (const i of hits) sorted[i] = true
      await breathe()
    }
  }

  const created: Array<AttachmentRecord | null> = reuses.map(() => null)
  const byBlob = new Map<number, number[]>()
  reuses.forEach((r, i) => {
    const list = byBlob.get(r.blobId) ?? []
    list.push(i)
    byBlob.set(r.blobId, list)
  })
  const now = new Date().toISOString()
  for (const [blobId, indexes] of [...byBlob].sort(([a], [b]) => a - b)) {
    // One claim per blob for all its new records; a blob no longer live takes none.
    const claimed = await trx
      .updateTable(BLOB_TABLE)
      .set({ ref_count: sql<number>`ref_count + ${indexes.length}`, updated_dt: now })
      .where('id', '=', blobId)
      .where('ref_count', '>', 0)
      .executeTakeFirst()
    if (Number(claimed.numUpdatedRows) === 0) continue
    const blob = await selectBlob(trx, blobId)
    if (dialect === 'mysql') {
      for (const i of indexes) {
        const result = await trx.insertInto(FILE_TABLE).values(recordRow(reuses[i]!.rec, blob)).executeTakeFirstOrThrow()
        const row = await trx.selectFrom(FILE_TABLE).selectAll().where('id', '=', Number(result.insertId)).executeTakeFirstOrThrow()
        created[i] = mapRecord(row)
      }
      continue
    }
    for (const part of chunk(indexes, 50)) {
      const rows = await trx
        .insertInto(FILE_TABLE)
        .values(part.map((i) => recordRow(reuses[i]!.rec, blob)))
        .returningAll()
        .execute()
      // The ids of one statement's rows follow the order of its values.
      rows.sort((a, b) => toNumber(a.id) - toNumber(b.id))
      part.forEach((i, k) => {
        created[i] = mapRecord(rows[k]!)
      })
      await breathe()
    }
  }
  return { sorted, created }
}
