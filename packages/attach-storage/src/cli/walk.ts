/** Walks over the repository and the stores without holding them: pages of rows, keys in batches. */
import type { BlobRecord } from '../model.js'
import type { AttachRepository } from '../repository/attach-repository.js'
import { TMP_PREFIX } from '../service/temporary.js'
import type { Store, StoreListEntry } from '../stores/store.js'

/** Rows read per query. */
export const PAGE = 500

/** Every live blob (of a domain, or of a store), page by page in id order. */
export async function* liveBlobs(repo: AttachRepository, where: { refDomain?: string; store?: string } = {}): AsyncGenerator<BlobRecord> {
  let after = 0
  for (;;) {
    const page = await repo.operations.pageLiveBlobs(after, PAGE, where)
    yield* page
    if (page.length < PAGE) return
    after = page[page.length - 1]!.id
  }
}

/** A store key as the place a blob row names (`/dir/`, `name`); undefined for keys at the root. */
export function placeOf(key: string): { savedDir: string; savedName: string } | undefined {
  const slash = key.lastIndexOf('/')
  if (slash <= 0) return undefined
  return { savedDir: `/${key.slice(0, slash + 1)}`, savedName: key.slice(slash + 1) }
}

/** The record id of a resize variant's key (`{dir}_v/{id}/{w}x{h}`), else undefined. */
export function variantOwner(key: string): number | undefined {
  const m = /(?:^|\/)_v\/(\d+)\//.exec(key)
  return m ? Number(m[1]) : undefined
}

/**
 * Keys of a store that can be attachment files: not the temporary area, not variants, not at the
 * root (the SQLite file may sit there), no dot-segment (the default temporary folder `.attach-tmp`).
 */
export function isFileKey(key: string): boolean {
  return !key.startsWith(TMP_PREFIX) && variantOwner(key) === undefined && key.includes('/') && !/(^|\/)\./.test(key)
}

/** A store's entries in batches of `size`. */
export async function* batches(store: Store, prefix: string, size = PAGE): AsyncGenerator<StoreListEntry[]> {
  let batch: StoreListEntry[] = []
  for await (const e of store.list(prefix)) {
    batch.push(e)
    if (batch.length >= size) {
      yield batch
      batch = []
    }
  }
  if (batch.length) yield batch
}
