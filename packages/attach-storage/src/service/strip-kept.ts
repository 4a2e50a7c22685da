/** Stripping a received image's metadata in the temporary area, before it is kept (media/strip.ts). */
import { Readable } from 'node:stream'
import { limitFamily } from '../media/limits.js'
import { JpegStripper, planStrip, reorient, STRIPPABLE_TYPES, StripError, type StreamStrip, stripStream } from '../media/strip.js'
import type { RegisteredCategory } from '../registry/registry.js'
import type { ServiceContext } from './context.js'
import { ingest } from './ingest.js'
import { tmpKey } from './temporary.js'
import type { ReceivedFile } from './types.js'

/** Re-encodes of oriented pictures at once, per `resize.concurrency` (the others wait their turn). */
const reencodes = limitFamily()

/** What stripping on receipt did to a received file (see {@link stripOnReceipt}). */
const onReceipt = new WeakMap<ReceivedFile, StreamStrip>()

/**
 * True when files sent to `refDomain`/`refCategory` (the request's fields, as sent) have their metadata
 * stripped, so a JPEG can be stripped as it is received; false for an unknown domain or category.
 */
export function stripsOnReceipt(ctx: ServiceContext, refDomain: string | undefined, refCategory: string | undefined): boolean {
  if (!refDomain) return false
  try {
    return ctx.registry.category(refDomain, refCategory || 'default').stripMetadata !== false
  } catch {
    return false
  }
}

/**
 * A received stream with a JPEG's EXIF, XMP, IPTC and comments removed as it flows ({@link JpegStripper}),
 * so the file is written and hashed once; `mark` hands what was done to {@link stripReceived}. The
 * source's errors and busboy's `limit` reach the returned stream.
 */
export function stripOnReceipt(source: Readable): { stream: JpegStripper; mark(file: ReceivedFile): void } {
  const stripper = new JpegStripper()
  source.on('error', (err) => stripper.destroy(err))
  source.on('limit', () => stripper.emit('limit'))
  source.pipe(stripper)
  return { stream: stripper, mark: (file) => onReceipt.set(file, stripper.result) }
}

/**
 * Removes EXIF, XMP and IPTC from a received JPEG, PNG or WebP (its category's `stripMetadata`, on by
 * default) and turns its pixels upright when its EXIF orientation asks for it. A JPEG stripped as it was
 * received ({@link stripOnReceipt}) needs nothing more unless it must be turned. A file with nothing to
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
  // Stripped as it was received (only for a category that strips: the route asks the same registry).
  const early = onReceipt.get(f)
  onReceipt.delete(f)
  if (early?.outcome === 'corrupt') {
    return { code: 'corrupt', message: `${f.displayName}: its metadata could not be removed (${early.error?.message})` }
  }
  if (early?.outcome === 'stripped' && type === 'image/jpeg') return undefined
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
        : await reencodes.of(ctx.config.resize.concurrency)(async () =>
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
