/**
 * Test and bench only (not exported): real stored files and their rows, written through a store and the
 * repository (a confirmed save's rows without the HTTP path), fast enough for thousands of files.
 */
import { createHash, randomBytes, randomUUID } from 'node:crypto'
import { mkdirSync } from 'node:fs'
import { mkdir, truncate, writeFile } from 'node:fs/promises'
import { dirname, join } from 'node:path'
import type { Kysely } from 'kysely'
import { AttachRepository } from '../repository/attach-repository.js'
import { openDatabase } from '../repository/database.js'
import { migrateAttachSchema } from '../repository/migrations.js'
import { storeKey } from '../service/layout.js'
import type { Store } from '../stores/store.js'

export interface SeededFile {
  id: number
  blobId: number
  key: string
  sha256: string
  size: number
}

/** Opens (and migrates) the SQLite file of a data directory laid out as the reference server's. */
export async function openDataDir(dataDir: string): Promise<{ db: Kysely<any>; repo: AttachRepository }> {
  mkdirSync(join(dataDir, 'files'), { recursive: true })
  const db = await openDatabase({ type: 'sqlite', file: join(dataDir, 'attach.db') })
  await migrateAttachSchema(db)
  return { db, repo: new AttachRepository(db) }
}

/**
 * `count` unused blob rows of store `store` (files never written), dated in 2000 so that any sweep takes
 * them: what a sweep meets when their files cannot be deleted.
 */
export async function seedDeadBlobs(db: Kysely<any>, store: string, count: number): Promise<void> {
  const repo = new AttachRepository(db)
  for (let i = 0; i < count; i++) {
    await repo.reserveBlob({
      store,
      savedDir: '/demo/2000/01/1/',
      savedName: `dead-${i}.bin`,
      fileSize: 1,
      fileType: 'application/octet-stream',
      sha256: '0'.repeat(64),
      createdDt: '2000-01-01T00:00:00.000Z',
    })
  }
  await db.updateTable('attach_blob').set({ updated_dt: '2000-01-01T00:00:00.000Z' }).execute()
}

/** The sha256 of `size` zero bytes, hashed a MiB at a time. */
function zerosSha256(size: number): string {
  const hash = createHash('sha256')
  const zeros = Buffer.alloc(Math.min(size, 1024 * 1024))
  for (let left = size; left > 0; left -= zeros.length) hash.update(left >= zeros.length ? zeros : zeros.subarray(0, left))
  return hash.digest('hex')
}

/**
 * Writes `count` files of `size` random bytes to `store` (declared as `storeName`), each with its blob and
 * record. With `sparse` (a local store only), each file is `size` zero bytes made by extending an empty
 * file: a big file that takes no room on the disk.
 */
export async function seedFiles(
  repo: AttachRepository,
  store: Store,
  options: { storeName?: string; domain?: string; count: number; size: number; perKey?: number; concurrency?: number; sparse?: boolean },
): Promise<SeededFile[]> {
  const domain = options.domain ?? 'demo'
  const out: SeededFile[] = new Array(options.count)
  const createdDt = new Date().toISOString()
  if (options.sparse && !store.localPath) throw new Error('seedFiles: sparse files need a local store')
  const sparseSha256 = options.sparse ? zerosSha256(options.size) : undefined
  let next = 0
  const worker = async () => {
    for (;;) {
      const i = next++
      if (i >= options.count) return
      const bytes = sparseSha256 ? undefined : randomBytes(options.size)
      const sha256 = sparseSha256 ?? createHash('sha256').update(bytes!).digest('hex')
      const refKey = String(Math.floor(i / (options.perKey ?? 10)) + 1)
      const savedDir = `/${domain}/2026/11/${refKey}/`
      const savedName = `${randomUUID()}.bin`
      const key = storeKey(savedDir, savedName)
      if (!bytes) {
        const path = store.localPath!(key)
        await mkdir(dirname(path), { recursive: true })
        await writeFile(path, '')
        await truncate(path, options.size)
      } else if (store.localPath) {
        // A fixture on the local disk: written plainly (no fsync), so that 100,000 files take seconds.
        const path = store.localPath(key)
        await mkdir(dirname(path), { recursive: true })
        await writeFile(path, bytes)
      } else await store.put(key, bytes, { size: bytes.length })
      const blob = await repo.reserveBlob({
        store: options.storeName ?? store.name,
        savedDir,
        savedName,
        fileSize: options.size,
        fileType: 'application/octet-stream',
        sha256,
        createdDt,
      })
      const rec = await repo.createRecord(
        blob.id,
        {
          refDomain: domain,
          refKey,
          refCategory: 'default',
          displayName: `file-${i}.bin`,
          ext: 'bin',
          fmetaValue: null,
          sort: i % (options.perKey ?? 10),
          createdBy: null,
          createdDt,
        },
        { requireLive: false, requirePending: true },
      )
      out[i] = { id: rec!.id, blobId: blob.id, key, sha256, size: options.size }
    }
  }
  await Promise.all(Array.from({ length: options.concurrency ?? 4 }, worker))
  return out
}
