/**
 * An image's media (media/analyse.ts), learnt in the background once its temporary file is kept, so the
 * temporary upload answers without waiting for the decoding; the commit takes the result (or, in another
 * process, analyses the file itself), so a committed image always has its media.
 */
import { analyseStored, analysisBusy, isAnalysed } from '../media/analyse.js'
import type { MediaInfo } from '../model.js'
import type { ServiceContext } from './context.js'
import { type TmpMeta, tmpKey } from './temporary.js'

/**
 * Analyses of this process, by temporary name: under way, or done and not taken by a commit yet. At most
 * {@link KEPT} are remembered (the oldest go first); a commit that finds none analyses the file itself.
 */
const known = new Map<string, Promise<MediaInfo | null>>()
const KEPT = 4096

/**
 * Starts analysing a kept temporary file (its sidecar written without `media`) in the background; its
 * commit takes the result ({@link mediaOf}). The sidecar is not rewritten: a commit may be removing it.
 * Never throws; bounded like every analysis (with its queue full, none is started: the commit analyses).
 */
export function analyseKept(ctx: ServiceContext, meta: TmpMeta): void {
  // A full queue: the commit analyses the file instead (rather than record null for a busy moment).
  if (!isAnalysed(meta.type) || analysisBusy(ctx.config.resize)) return
  // Started on the next turn of the event loop, once the upload's answer is written: its decoding threads
  // do not compete with the answer.
  const job = new Promise<MediaInfo | null>((resolve) =>
    setImmediate(() => resolve(analyseStored(ctx.stores.tmpStore, tmpKey(meta.name), meta.type, meta.size, ctx.config.resize))),
  )
  known.set(meta.name, job)
  if (known.size > KEPT) known.delete(known.keys().next().value!)
}

/**
 * The media a commit records for a temporary file: the sidecar's when it has one; else this process's
 * analysis of it (awaited when under way); else (kept by another process, or before a restart) the file
 * analysed now. `null` for what is not analysed.
 */
export async function mediaOf(ctx: ServiceContext, meta: TmpMeta): Promise<MediaInfo | null> {
  if (meta.media !== undefined) return meta.media
  if (!isAnalysed(meta.type)) return null
  const job = known.get(meta.name)
  known.delete(meta.name)
  return job ?? analyseStored(ctx.stores.tmpStore, tmpKey(meta.name), meta.type, meta.size, ctx.config.resize)
}

/** Whether this process holds an analysis of this temporary file, under way or done (tests). */
export const analysing = (name: string): boolean => known.has(name)

/** Forgets this process's analysis of a temporary file, as another process would not have it (tests). */
export const forgetAnalysis = (name: string): boolean => known.delete(name)
