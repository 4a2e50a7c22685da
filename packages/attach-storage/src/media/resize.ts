import { rm } from 'node:fs/promises'
import pLimit, { type LimitFunction } from 'p-limit'
import sharp, { type Metadata, type Sharp } from 'sharp'
import { AttachStorageError, badRequest } from '../errors.js'
import type { Store } from '../stores/store.js'
import { HeicError, heicImage, isHeic } from './heic.js'
import { KeptSizes } from './kept-sizes.js'
import { readMetadataHead, spoolToFile } from './spool.js'

/** Largest `w` / `h` a client may ask for. */
export const MAX_DIMENSION = 4096

/** Types the resizer reads; anything else is served as it is. */
const RESIZABLE = new Set(['image/jpeg', 'image/png', 'image/webp', 'image/avif', 'image/tiff', 'image/heic', 'image/heif'])

/** Output formats a client may ask for with `format=`. */
const FORMATS = { webp: 'image/webp', avif: 'image/avif', jpeg: 'image/jpeg', png: 'image/png' } as const
type Format = keyof typeof FORMATS

/** A parsed resize request: the bounding box and the output format (undefined: the original's). */
export interface ResizeRequest {
  w: number | undefined
  h: number | undefined
  format: Format | undefined
  /** The format was negotiated on `Accept` (`format=auto`): answers vary by Accept. */
  negotiated: boolean
  /**
   * The category's named variant this box is (`?variant=thumb`); set only once resolved against the
   * category. A named variant is always stored, whatever `maxVariants` says.
   */
  variant?: string
  /**
   * `cover`: the exact `w`×`h` box, cropped (both sides set); undefined: fit inside the box, never
   * upscaled (the original behaviour).
   */
  fit?: 'cover'
  /**
   * The record's focal point (0..1 from the top left) a cover crop keeps inside the box, as central as the
   * picture allows; undefined: sharp's attention strategy picks the busiest region.
   */
  focus?: { x: number; y: number }
}

/** True when the resizer reads this media type. */
export function isResizable(type: string): boolean {
  return RESIZABLE.has(type)
}

/** The media type of a variant of an original of `originalType`. */
export function variantType(originalType: string, r: ResizeRequest): string {
  // A HEIC photo is shown as a JPEG unless another format is asked for: browsers do not show HEIC.
  return r.format ? FORMATS[r.format] : isHeic(originalType) ? 'image/jpeg' : originalType
}

/**
 * What tells one variant of an original from another: `{w}x{h}[.{format}]`, and for a cover crop
 * `{w}x{h}c[@{x},{y}][.{format}]` (the focus in it, so a changed focus makes and serves a new crop).
 */
export function variantSegment(r: ResizeRequest): string {
  const cover = r.fit === 'cover' ? `c${r.focus ? `@${r.focus.x},${r.focus.y}` : ''}` : ''
  return `${r.w ?? 0}x${r.h ?? 0}${cover}${r.format ? `.${r.format}` : ''}`
}

/** The request with a record's focus, when it is a cover crop and the record has one. */
export function withFocus(r: ResizeRequest, focus: { x: number; y: number } | null | undefined): ResizeRequest {
  return r.fit === 'cover' && focus ? { ...r, focus: { x: focus.x, y: focus.y } } : r
}

/** The variant's store key: beside the original, `{savedDir}_v/{id}/{variantSegment}` (see {@link variantSegment}). */
export function variantKey(originalDirKey: string, id: number, r: ResizeRequest): string {
  return `${originalDirKey}_v/${id}/${variantSegment(r)}`
}

/**
 * The crop of a cover box around a focus: the image resized to cover `w`×`h` (`rw`×`rh`), and the box's
 * top left there, the focus as central as the picture allows (clamped to its edges).
 */
export function coverCrop(
  width: number,
  height: number,
  w: number,
  h: number,
  focus: { x: number; y: number },
): { rw: number; rh: number; left: number; top: number } {
  const scale = Math.max(w / width, h / height)
  const rw = Math.max(w, Math.round(width * scale))
  const rh = Math.max(h, Math.round(height * scale))
  const clamp = (n: number, max: number) => Math.min(Math.max(n, 0), max)
  return {
    rw,
    rh,
    left: clamp(Math.round(focus.x * rw - w / 2), rw - w),
    top: clamp(Math.round(focus.y * rh - h / 2), rh - h),
  }
}

/** The folder of every variant of one record. */
export function variantPrefix(originalDirKey: string, id: number): string {
  return `${originalDirKey}_v/${id}/`
}

/** What a made variant is. */
export interface Variant {
  key: string
  size: number
  type: string
  /**
   * The bytes, when this request just made the variant (served without a re-read; the write to its
   * store may still be going on: see {@link Resizer.settled}).
   */
  bytes?: Buffer
  /**
   * Made on the fly and not stored: the attachment has `maxVariants` stored variants already. `key` is
   * where it would have been stored; serve `bytes`.
   */
  transient?: boolean
}

/** Options of the resizer. */
export interface ResizerOptions {
  /** Largest input image in pixels (width × height) the decoder accepts: the guard against image bombs. */
  maxInputPixels: number
  /** Told of each variant made (how long it took) and of the queue whenever it changes. */
  observe?: { resize(seconds: number): void; resizeQueue(running: number, waiting: number): void }
  /**
   * Most stored variants per stored file (every record pointing at it together, see
   * {@link VariantOptions.storedFile}); further sizes are made on the fly and not stored. @default 16
   */
  maxVariants?: number
  /** Most resizes running at once. @default 2 */
  concurrency?: number
  /** Most resizes waiting for a slot; beyond it {@link Resizer.variant} throws `busy` (503). @default 16 */
  queue?: number
  /** Where the original of a remote store is spooled for the decoder. @default os.tmpdir() */
  spoolDir?: string
  /**
   * How long (ms) a size made on the fly and not stored is kept in memory, so that a repeated request
   * does not run the resizer again. @default 600000
   */
  memoryTtl?: number
  /** Most bytes those kept sizes hold in all; the least recently served go first. `0`: none kept. @default 64 MiB */
  memoryBytes?: number
  /** Told when a variant was made and served but its store refused it (it is made again next time). */
  onUnstored?: (key: string, err: unknown) => void
}

/** What one call of {@link Resizer.variant} may do. */
export interface VariantOptions {
  /** Only look for a stored variant; never make one (HEAD). Undefined when none is stored yet. */
  lookOnly?: boolean
  /**
   * A background job asks: it is not refused when the queue is full (the job queue bounds it), and a
   * failure is thrown (the job is tried again) instead of being served as the original.
   */
  background?: boolean
  /**
   * The stored file the original is, when several records may point at it: `maxVariants` counts the
   * stored variants of all of them. `id` names the file in this process; `variantFolders()` answers the
   * variant folders of every record pointing at it (listed once, on first use), or undefined when there
   * are too many to list (then no further size is stored). Without it the count is the record's own
   * folder (the one `key` is in).
   */
  storedFile?: { id: string; variantFolders(): Promise<string[] | undefined> }
  /** Never stored (a temporary file's picture): made, served and kept in memory like a size past `maxVariants`. */
  unstored?: boolean
  /**
   * The original's size as shown (EXIF orientation applied), when known: a record's analysed media.
   * Its header is then not read before the resize (for a remote store, no ranged read). sharp's pixel
   * limit still bounds the decoding whatever it says.
   */
  size?: { width: number; height: number }
}

/** How a shared generation ended, for each caller to take in its own way. */
type Outcome = { ok: true; variant: Variant | undefined; unstored?: unknown } | { ok: false; error: unknown }

/** One generation in progress: `made` once its bytes are (or it failed), `stored` once they are written too. */
interface Flight {
  made: Promise<Outcome>
  stored: Promise<Outcome>
  /** The variant, once made (while it is written). */
  ready?: Variant
}

/** What a generation made: the variant; whether it is to be written, and the stored-variant count reserved for it. */
interface Made {
  variant: Variant & { bytes: Buffer }
  write?: { slots: Slots | undefined }
}

/** How long a variant found in its store is served without looking again (one `stat` per variant per period). */
const KNOWN_FOR_MS = 30_000

/** Seconds a client is told to wait (`Retry-After`) when the resize queue is full. */
export const BUSY_RETRY_AFTER = 2

/** The answer past the resize queue: 503 `busy` with `Retry-After`. */
export const busy = (): AttachStorageError =>
  new AttachStorageError('busy', 'Too many images are being resized right now; try again shortly', {
    status: 503,
    headers: { 'retry-after': String(BUSY_RETRY_AFTER) },
  })

/**
 * Checks a resize request against a category's allowed sizes: 400 `size-not-allowed` when `sizes` is set
 * and no entry has exactly this `w` and `h` (an entry's absent `w` or `h` matches only an absent one).
 */
export function checkAllowedSize(sizes: ReadonlyArray<{ w?: number; h?: number }> | undefined, r: ResizeRequest): void {
  if (!sizes) return
  if (sizes.some((s) => s.w === r.w && s.h === r.h)) return
  const list = sizes.map((s) => [s.w !== undefined && `w=${s.w}`, s.h !== undefined && `h=${s.h}`].filter(Boolean).join('&'))
  throw badRequest(
    list.length ? `This category allows only these sizes: ${list.join(', ')}` : 'This category allows no resized views',
    'size-not-allowed',
  )
}

/** How many variants a stored file has stored (or is storing): counted once from its store, then here. */
interface Slots {
  count: number
  /** Reservations not settled yet: the entry is not evicted while any is. */
  pending: number
}

/** A slot count and the variant folders it was listed from (a record's delete forgets the counts that include its folder). */
interface SlotEntry {
  ready: Promise<Slots | undefined>
  slots?: Slots
  folders: Set<string>
}

/**
 * Makes resized variants through the attachment's own store: read the original, apply EXIF orientation,
 * fit inside the box without distortion and never upscale (or, `fit: 'cover'`, fill the exact box and crop
 * around the focus, or the busiest region without one), write the variant atomically, and only then
 * serve it. Identical requests that arrive together share one generation. Images the decoder refuses
 * (corrupt, truncated, too many pixels) are remembered and served as their original.
 *
 * Bounds: at most `concurrency` generations run at once and `queue` wait (beyond: `busy`, 503); at most
 * `maxVariants` are stored per stored file, whatever number of records point at it (counted per process;
 * a further size is made, served and not stored); such a size is kept in memory for `memoryTtl`, within
 * `memoryBytes` in all, so a repeated request does not run the resizer again; a remote original is
 * spooled to a temporary file, so the decoder never buffers a stream.
 */
export class Resizer {
  readonly #inflight = new Map<string, Flight>()
  /** Variants made and being written to their store now. */
  #storing = 0
  /** Called once nothing is in flight ({@link settled}). */
  readonly #idle: Array<() => void> = []
  /** Keys whose original needs no resize or cannot be decoded: serve the original. */
  readonly #asOriginal = new Map<string, true>()
  /** Variants known to be in their store: a cached view costs no store round trip to find it. */
  readonly #known = new Map<string, Variant & { seenAt: number }>()
  /** Stored variants per stored file (`{store}\0file:{id}`), or per record (`{store}\0{variantPrefix}`). */
  readonly #slots = new Map<string, SlotEntry>()
  /** Sizes made and not stored, by original and size (`{store}\0{originalKey}\0{w}x{h}[.{format}]`), least recently served first. */
  readonly #kept: KeptSizes<Variant & { bytes: Buffer }>
  readonly #options: ResizerOptions
  readonly #maxVariants: number
  readonly #admitted: number
  readonly #limit: LimitFunction
  /** How many variants this process has generated (for tests and benchmarks), stored or not. */
  generated = 0
  /** How many of those were made on the fly and not stored (the attachment had `maxVariants`). */
  transient = 0

  constructor(options: ResizerOptions) {
    this.#options = options
    this.#maxVariants = options.maxVariants ?? 16
    this.#kept = new KeptSizes(options.memoryTtl ?? 600_000, options.memoryBytes ?? 64 * 1024 * 1024)
    const concurrency = options.concurrency ?? 2
    this.#admitted = concurrency + (options.queue ?? 16)
    this.#limit = pLimit(concurrency)
  }

  /** Resizes running now, and waiting for a slot. */
  get load(): { active: number; waiting: number } {
    return { active: this.#limit.activeCount, waiting: this.#limit.pendingCount }
  }

  /**
   * The variant for a request, made on first use; undefined when the original should be served as it is
   * (smaller than the box, not decodable, or `lookOnly` and not stored yet). Throws `busy` (503) when
   * `concurrency` resizes run and `queue` wait already.
   */
  async variant(
    store: Store,
    originalKey: string,
    key: string,
    originalType: string,
    r: ResizeRequest,
    onError: (err: unknown) => void,
    options: VariantOptions = {},
  ): Promise<Variant | undefined> {
    const cacheKey = `${store.name}\u0000${key}`
    if (this.#asOriginal.has(cacheKey)) return undefined
    const known = this.#known.get(cacheKey)
    // Looked at again in its store now and then: another process (`variants purge`) may have removed it.
    if (known && performance.now() - known.seenAt < KNOWN_FOR_MS) return known
    // A size made lately and not stored is served from memory (a named variant is always stored).
    const keptKey = `${store.name}\u0000${originalKey}\u0000${key.slice(key.lastIndexOf('/') + 1)}`
    if (r.variant === undefined && !options.background) {
      const kept = this.#kept.get(keptKey)
      if (kept) return kept
    }
    const type = variantType(originalType, r)
    try {
      const s = await store.stat(key)
      if (s.size > 0) return this.#remember_(cacheKey, { key, size: s.size, type })
    } catch {
      // Not made yet.
    }
    // Made by a request just now and still being written: its headers already (one still being made is
    // not waited for).
    if (options.lookOnly) return this.#inflight.get(cacheKey)?.ready
    let flight = this.#inflight.get(cacheKey)
    if (!flight) {
      // Admission: identical requests share one generation above; a new one needs room in the queue
      // (variants still being written count: their bytes are held until then).
      if (!options.background && this.#limit.activeCount + this.#limit.pendingCount + this.#storing >= this.#admitted) throw busy()
      const observe = this.#options.observe
      const storedFile = options.unstored ? 'unstored' : options.storedFile
      // The slot bounds the decoding and encoding (CPU and memory) only: the write to the store
      // runs after it is given back.
      const made = this.#limit(async () => {
        const started = performance.now()
        observe?.resizeQueue(this.#limit.activeCount, this.#limit.pendingCount)
        try {
          return await this.#make(store, originalKey, key, type, r, storedFile, originalType, options.size)
        } finally {
          observe?.resize((performance.now() - started) / 1000)
          // This one still counts as running until it returns.
          observe?.resizeQueue(Math.max(0, this.#limit.activeCount - 1), this.#limit.pendingCount)
        }
      })
      const stored = made.then(async (m): Promise<Outcome> => {
        if (!m?.write) return { ok: true, variant: m?.variant }
        const { slots } = m.write
        try {
          await store.put(key, m.variant.bytes, { contentType: m.variant.type })
        } catch (error) {
          if (slots) slots.count--
          return { ok: true, variant: m.variant, unstored: error }
        } finally {
          if (slots) slots.pending--
          this.#storing--
        }
        return { ok: true, variant: m.variant }
      })
      const f: Flight = {
        made: made.then(
          (m): Outcome => {
            f.ready = m?.variant
            return { ok: true, variant: m?.variant }
          },
          (error: unknown): Outcome => ({ ok: false, error }),
        ),
        stored: stored
          .then(
            (o): Outcome => {
              const v = o.ok ? o.variant : undefined
              if (o.ok && o.unstored !== undefined) {
                try {
                  this.#options.onUnstored?.(key, o.unstored)
                } catch {
                  // A logger that throws changes nothing here.
                }
              } else if (v && !v.transient) this.#remember_(cacheKey, { key: v.key, size: v.size, type: v.type })
              if (v?.transient && v.bytes) this.#kept.keep(keptKey, v as Variant & { bytes: Buffer })
              return o
            },
            (error: unknown): Outcome => ({ ok: false, error }),
          )
          .finally(() => {
            this.#inflight.delete(cacheKey)
            if (this.#inflight.size === 0) for (const settle of this.#idle.splice(0)) settle()
          }),
      }
      flight = f
      this.#inflight.set(cacheKey, flight)
    }
    // A view is answered from the bytes as soon as they are made; the store write goes on behind it
    // (a variant is a cache: lost, it is made again). A job, and a view that makes a named variant (it
    // is recorded as made), wait for the write.
    const outcome = await (options.background || r.variant !== undefined ? flight.stored : flight.made)
    if (outcome.ok) {
      if (outcome.unstored === undefined) return outcome.variant
      if (options.background) throw outcome.unstored
      // Made and not stored: served from its bytes this once; the next request makes it again.
      return { ...outcome.variant!, transient: true }
    }
    if (options.background) throw outcome.error
    // A HEIC decode that waited or ran too long is worth another try: 503, nothing remembered.
    if (outcome.error instanceof HeicError && (outcome.error.code === 'busy' || outcome.error.code === 'timeout')) throw busy()
    onError(outcome.error)
    this.#remember(cacheKey)
    return undefined
  }

  /** Resolves once no variant is being made or written (for shutdown and tests). */
  settled(): Promise<void> {
    if (this.#inflight.size === 0) return Promise.resolve()
    return new Promise((resolve) => this.#idle.push(resolve))
  }

  /**
   * Resolves once no variant under `prefix` (a record's variant folder) is being made or written: called
   * before the folder's files are deleted, so that none lands after them.
   */
  async settledUnder(storeName: string, prefix: string): Promise<void> {
    const start = `${storeName}\u0000${prefix}`
    await Promise.all([...this.#inflight].filter(([k]) => k.startsWith(start)).map(([, f]) => f.stored))
  }

  /** Variants are deleted only with their record, whose lookup fails first; forgetting is for memory. */
  #remember_(cacheKey: string, v: Variant): Variant {
    if (this.#known.size > 50_000) this.#known.delete(this.#known.keys().next().value!)
    this.#known.set(cacheKey, { ...v, seenAt: performance.now() })
    return v
  }

  /** Forgets what is known of a record's variants (called when it is deleted). */
  forget(storeName: string, prefix: string): void {
    const start = `${storeName}\u0000${prefix}`
    for (const k of this.#known.keys()) if (k.startsWith(start)) this.#known.delete(k)
    for (const k of this.#asOriginal.keys()) if (k.startsWith(start)) this.#asOriginal.delete(k)
    this.#slots.delete(start)
    // A stored file's count that included this folder is listed again on next use.
    for (const [k, e] of this.#slots) if (k.startsWith(`${storeName}\u0000`) && e.folders.has(prefix)) this.#slots.delete(k)
  }

  /** Bytes of the sizes kept in memory now (for tests and metrics). */
  get keptBytes(): number {
    return this.#kept.bytes
  }

  #remember(cacheKey: string): void {
    if (this.#asOriginal.size > 10_000) this.#asOriginal.delete(this.#asOriginal.keys().next().value!)
    this.#asOriginal.set(cacheKey, true)
  }

  /**
   * The stored-variant count of a stored file (of every record pointing at it, with `storedFile`; else of
   * the record whose folder `prefix` is), listed from its store on first use in this process. Undefined
   * when the store cannot list it (the variant is then not stored: the safe side). Too many records to
   * list count as full.
   */
  #slotsOf(store: Store, prefix: string, storedFile?: VariantOptions['storedFile']): Promise<Slots | undefined> {
    const k = storedFile ? `${store.name}\u0000file:${storedFile.id}` : `${store.name}\u0000${prefix}`
    const entry = this.#slots.get(k)
    if (entry) return entry.ready
    if (this.#slots.size >= 10_000) {
      // Forget the oldest attachment that has no reservation in flight; it is listed again on next use.
      for (const [old, e] of this.#slots) {
        if (e.slots && e.slots.pending === 0) {
          this.#slots.delete(old)
          break
        }
      }
    }
    const folders = new Set([prefix])
    const created: SlotEntry = { ready: Promise.resolve(undefined), folders }
    created.ready = (async () => {
      const listed = storedFile ? await storedFile.variantFolders() : [prefix]
      let count = listed ? 0 : Number.POSITIVE_INFINITY
      for (const folder of listed ?? []) {
        folders.add(folder)
        for await (const e of store.list(folder)) if (!e.key.slice(folder.length).includes('/')) count++
      }
      const slots = { count, pending: 0 }
      created.slots = slots
      return slots
    })().catch(() => {
      if (this.#slots.get(k) === created) this.#slots.delete(k)
      return undefined
    })
    this.#slots.set(k, created)
    return created.ready
  }

  async #make(
    store: Store,
    originalKey: string,
    key: string,
    type: string,
    r: ResizeRequest,
    storedFile: VariantOptions['storedFile'] | 'unstored',
    originalType: string,
    size: VariantOptions['size'],
  ): Promise<Made | undefined> {
    // The stored file's stored-variant count is read while the image is decoded (none: never stored).
    const slotsReady =
      storedFile === 'unstored' ? Promise.resolve(undefined) : this.#slotsOf(store, key.slice(0, key.lastIndexOf('/') + 1), storedFile)
    const limits = { limitInputPixels: this.#options.maxInputPixels }
    // A local original is read by path. A remote one is first asked for its head only; when it needs a
    // resize it is spooled to a temporary file: the decoder seeks in a file instead of buffering a stream.
    let path = store.localPath?.(originalKey)
    let spool: string | undefined
    try {
      // The original's size as shown, from its header: a local file's, or a remote original's head
      // (spooled whole first when the header is past the head: a TIFF's directory at the end).
      const shownSize = async (): Promise<{ width?: number; height?: number }> => {
        let meta: Metadata | undefined
        if (path) meta = await sharp(path, { ...limits, failOn: 'none' }).metadata()
        else meta = await readMetadataHead(store, originalKey, this.#options.maxInputPixels).catch(() => undefined)
        if (!path && (!meta?.width || !meta.height)) {
          path = spool = await spoolToFile(await store.get(originalKey), this.#options.spoolDir)
          meta = await sharp(path, { ...limits, failOn: 'none' }).metadata()
        }
        if (!meta) throw new Error('the image has no header')
        const swap = (meta.orientation ?? 1) >= 5
        return swap ? { width: meta.height, height: meta.width } : { width: meta.width, height: meta.height }
      }
      let opened: { pipeline: Sharp; width: number; height: number } | undefined
      if (isHeic(originalType)) {
        // HEIC: decoded in the HEIC worker (upright already); always converted, never served as it is.
        if (!path) path = spool = await spoolToFile(await store.get(originalKey), this.#options.spoolDir)
        const h = await heicImage(path, { maxInputPixels: this.#options.maxInputPixels })
        opened = { pipeline: h.image, width: h.width, height: h.height }
      } else {
        const { width, height } = size ?? (await shownSize())
        if (!width || !height) throw new Error('the image has no dimensions')
        if (width * height > this.#options.maxInputPixels) throw new Error(`the image has more than ${this.#options.maxInputPixels} pixels`)
        // A cover box is exact: only an original of that very size needs nothing done.
        const fits =
          r.fit === 'cover' ? width === r.w && height === r.h : (r.w === undefined || width <= r.w) && (r.h === undefined || height <= r.h)
        if (fits && !r.format) {
          this.#remember(`${store.name}\u0000${key}`)
          return undefined
        }
        if (!path) path = spool = await spoolToFile(await store.get(originalKey), this.#options.spoolDir)
        opened = { pipeline: sharp(path, { ...limits, failOn: 'error', sequentialRead: true }).rotate(), width, height }
      }
      const { pipeline, width, height } = opened
      const cover = r.fit === 'cover' && r.w !== undefined && r.h !== undefined
      if (!cover) pipeline.resize({ width: r.w, height: r.h, fit: 'inside', withoutEnlargement: true })
      else if (!r.focus) pipeline.resize({ width: r.w, height: r.h, fit: 'cover', position: sharp.strategy.attention })
      else {
        const c = coverCrop(width, height, r.w!, r.h!, r.focus)
        pipeline.resize({ width: c.rw, height: c.rh, fit: 'fill' }).extract({ left: c.left, top: c.top, width: r.w!, height: r.h! })
      }
      if (r.format) pipeline.toFormat(r.format, r.format === 'avif' ? { effort: 2 } : {})
      else if (isHeic(originalType)) pipeline.jpeg()
      // A variant is at most 4096×4096: made in memory, written whole (atomically), then served from here.
      const bytes = await pipeline.toBuffer()
      if (bytes.length === 0) throw new Error('the resizer produced no bytes')
      this.generated++
      // Reserve a stored slot: the check and the increment run without an await between them, so
      // concurrent first requests of one process never store more than `maxVariants`.
      // A named variant is always stored: the category's configuration bounds how many there are.
      const slots = await slotsReady
      if (r.variant === undefined && (!slots || slots.count >= this.#maxVariants)) {
        this.transient++
        return { variant: { key, size: bytes.length, type, bytes, transient: true } }
      }
      // Written by the caller once this slot is given back; counted from now, so no other request of
      // this process takes the same slot.
      this.#storing++
      if (slots) {
        slots.count++
        slots.pending++
      }
      return { variant: { key, size: bytes.length, type, bytes }, write: { slots } }
    } finally {
      if (spool) await rm(spool, { force: true }).catch(() => undefined)
    }
  }
}
