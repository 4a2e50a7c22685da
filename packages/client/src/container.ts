import type { AttachBagEntry, AttachmentView } from 'attach-storage'
import type { TemporaryFile } from './client.js'

/**
 * The `attachContainer` a confirmed save (`client.save()`) and a host's `commitAttachContainer()`
 * take: `{refDomain, <category>: entries[], _deleted?: [{id}]}`, as {@link AttachContainerBuilder} makes
 * it. An AttachBag a lookup answered is one too (its records are kept, in their order).
 */
export interface AttachContainer {
  refDomain?: string
  /** Saved attachments to delete for good. */
  _deleted?: Array<{ id: number }>
  [category: string]: ReadonlyArray<AttachBagEntry | AttachmentView> | string | undefined
}

/** One file of a field's current list: a saved attachment kept (`id`), or a new temporary file. */
export type ListedFile = { id: number; displayName?: string; ext?: string | null } | { temporary: TemporaryFile; ext?: string | null }

/**
 * Builds the `attachContainer` ({@link AttachContainer}) that a confirmed save or a host's entity save commits, from
 * what the user sees: the files of each category in their current order, and the saved ones removed.
 * Kept files become `{id}` entries (only their order is applied), new ones `{savedName, displayName,
 * fileSize, fileType}`, removed ones `_deleted`. The array index of each entry is its `sort`.
 *
 * @example
 * const bag = new AttachContainerBuilder('board')
 *   .category('default', [{ id: 12 }, { temporary: uploaded }])
 *   .remove(11)
 *   .build()
 */
export class AttachContainerBuilder {
  readonly #domain: string
  readonly #categories = new Map<string, ListedFile[]>()
  readonly #removed = new Set<number>()

  constructor(refDomain: string) {
    this.#domain = refDomain
  }

  /** Sets a category's files, in display order (replacing what was set for it before). */
  category(refCategory: string, files: ListedFile[]): this {
    if (refCategory === 'refDomain' || refCategory === '_deleted') throw new Error(`"${refCategory}" is not a category name`)
    this.#categories.set(refCategory, [...files])
    return this
  }

  /** Marks saved attachments as removed (`_deleted`). */
  remove(...ids: number[]): this {
    for (const id of ids) this.#removed.add(id)
    return this
  }

  build(): AttachContainer & { refDomain: string } {
    const bag: AttachContainer & { refDomain: string } = { refDomain: this.#domain }
    for (const [category, files] of this.#categories) {
      bag[category] = files
        .filter((f) => !('id' in f) || !this.#removed.has(f.id))
        .map((f): AttachBagEntry => {
          const ext = f.ext === undefined ? {} : { ext: f.ext }
          if ('id' in f) return { id: f.id, ...ext }
          const t = f.temporary
          return { savedName: t.name, displayName: t.displayName, fileSize: t.size, fileType: t.type, ...ext }
        })
    }
    if (this.#removed.size) bag._deleted = [...this.#removed].map((id) => ({ id }))
    return bag
  }
}

/** Merges several containers of one domain (one per field, say) into one. */
export function mergeContainers(bags: AttachContainer[]): AttachContainer | null {
  if (!bags.length) return null
  const out: AttachContainer = { refDomain: bags[0]!.refDomain }
  const deleted: Array<{ id: number }> = []
  for (const bag of bags) {
    if (bag.refDomain !== out.refDomain) throw new Error('The containers name different domains')
    for (const [k, v] of Object.entries(bag)) {
      if (k === 'refDomain') continue
      if (k === '_deleted') deleted.push(...(v as Array<{ id: number }>))
      else out[k] = [...((out[k] as AttachBagEntry[] | undefined) ?? []), ...(v as AttachBagEntry[])]
    }
  }
  if (deleted.length) out._deleted = deleted
  return out
}

/**
 * Runs at most `n` tasks at once, the rest in order as earlier ones finish. A task whose `signal` aborts
 * while it waits leaves the queue at once and rejects with the signal's reason.
 */
export function limiter(n: number): <T>(task: () => Promise<T>, signal?: AbortSignal) => Promise<T> {
  let running = 0
  const waiting: Array<() => void> = []
  return async (task, signal) => {
    signal?.throwIfAborted()
    if (running >= n) {
      await new Promise<void>((resolve, reject) => {
        const go = () => {
          signal?.removeEventListener('abort', stop)
          resolve()
        }
        const stop = () => {
          waiting.splice(waiting.indexOf(go), 1)
          reject(signal?.reason)
        }
        waiting.push(go)
        signal?.addEventListener('abort', stop, { once: true })
      })
    }
    running++
    try {
      return await task()
    } finally {
      running--
      waiting.shift()?.()
    }
  }
}
