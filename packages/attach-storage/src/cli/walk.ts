/** Walks over the repository and the stores without holding them: pages of rows, keys in batches. */
import type { BlobRecord } from '../model.js'
import type { AttachRepository } from '../repository/attach-repository.js'
import { TMP_PREFIX } from '../service/temporary.js'
import type { Store } from '../stores/store.js'

/** Rows read per query. */
export const PAGE = 500

/** Every live blob (of a domain, or of a store), page by page in id order. */
export function liveBlobs(repo: AttachRepository, where: { refDomain?: string; store?: string } = {}): AsyncGenerator<BlobRecord> {
  return repo.operations.eachLiveBlob(where, PAGE)
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

/**
 * A store's keys in batches of `size`. A batch holds the keys alone, not the listing's entries: a batch
 * lives while it fills, and V8 would otherwise learn to make every entry in its old generation.
 */
export async function* batches(store: Store, prefix: string, size = PAGE): AsyncGenerator<string[]> {
  let batch: string[] = []
  for await (const e of store.list(prefix)) {
    batch.push(e.key)
    if (batch.length >= size) {
      yield batch
      batch = []
    }
  }
  if (batch.length) yield batch
}
