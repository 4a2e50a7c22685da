import type { Readable } from 'node:stream'
import type { Store } from './store.js'

/** Reads a (small) stream whole: sidecars, file heads, bodies the caller has bounded already. */
export async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of stream) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}

/** Largest object {@link readSmallObject} reads in one call. */
const ONE_READ = 64 * 1024

/**
 * Reads a small stored object whole (a sidecar, an upload's info): in one `readBytes` call where the
 * store has it (a local store keeps the file open for the next read), else from its stream. A missing
 * object throws the store's `not-found`.
 */
export async function readSmallObject(store: Store, key: string): Promise<Buffer> {
  const head = store.readBytes ? await store.readBytes(key, 0, ONE_READ) : undefined
  if (head && head.length < ONE_READ) return Buffer.from(head.buffer, head.byteOffset, head.length)
  return readAll(await store.get(key))
}
