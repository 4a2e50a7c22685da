/** Stripping a received image's metadata in the temporary area, before it is kept (media/strip.ts). */
import { Readable } from 'node:stream'
import pLimit, { type LimitFunction } from 'p-limit'
import { planStrip, reorient, STRIPPABLE_TYPES, StripError, stripStream } from '../media/strip.js'
import type { RegisteredCategory } from '../registry/registry.js'
import type { ServiceContext } from './context.js'
import { ingest } from './ingest.js'
import { tmpKey } from './temporary.js'
import type { ReceivedFile } from './types.js'

/** Re-encodes of oriented pictures at once, per `resize.concurrency` (the others wait their turn). */
const limiters = new Map<number, LimitFunction>()
const limiterOf = (concurrency: number): LimitFunction => {
  let limit = limiters.get(concurrency)
  if (!limit) {
    limit = pLimit(concurrency)
    limiters.set(concurrency, limit)
  }
  return limit
}

/**
 * Removes EXIF, XMP and IPTC from a received JPEG, PNG or WebP (its category's `stripMetadata`, on by
 * default) and turns its pixels upright when its EXIF orientation asks for it. A file with nothing to
 * remove is left as it is (not rewritten); otherwise it is rewritten through one streamed pass, and
 * `f`'s size, sha256 and head become those of the stored bytes. Answers the item's error (code
 * `corrupt`) for a file whose blocks cannot be walked after metadata was found in it (one whose walk
 * breaks before any metadata, which the sniffer took for an image, is kept as it is, as before);
 * never throws for bad bytes.
 */
export async function stripReceived(
  ctx: ServiceContext,
  f: ReceivedFile,
  category: RegisteredCategory,
  type: string,
): Promise<{ code: string; message: string } | undefined> {
  if (category.stripMetadata === false || !STRIPPABLE_TYPES.has(type)) return undefined
  const tmp = ctx.stores.tmpStore
  const key = tmpKey(f.name)
  try {
    const plan = await planStrip((await tmp.get(key)) as AsyncIterable<Buffer>, type)
    if (plan.removed === 0 && plan.orientation === 1) return undefined
    const staging = `${key}.strip`
    // A re-encode holds a decoded picture: at most resize.concurrency of them run at once.
    const r =
      plan.orientation === 1
        ? await ingest(
            tmp,
            staging,
            Readable.from(stripStream((await tmp.get(key)) as AsyncIterable<Buffer>, type, plan), { objectMode: false }),
            {
              contentType: type,
            },
          )
        : await limiterOf(ctx.config.resize.concurrency)(async () =>
            ingest(tmp, staging, reorient(await tmp.get(key), type, ctx.config.resize.maxInputPixels), { contentType: type }),
          )
    await tmp.move(staging, key)
    f.size = r.size
    f.sha256 = r.sha256
    f.head = r.head
    return undefined
  } catch (err) {
    if (err instanceof StripError && !err.metadataSeen) return undefined
    if (err instanceof StripError)
      return { code: 'corrupt', message: `${f.displayName}: its metadata could not be removed (${err.message})` }
    if (err instanceof Error && /^(Input|Vips)|pixel limit|unsupported image format|corrupt|premature end/i.test(err.message)) {
      return { code: 'corrupt', message: `${f.displayName}: the picture could not be turned upright (${err.message})` }
    }
    throw err
  }
}
