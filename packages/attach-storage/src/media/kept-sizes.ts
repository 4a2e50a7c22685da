/**
 * Sizes made and not stored (past `resize.max-variants`, or a temporary file's picture), kept in memory
 * for `ttl` ms within `maxBytes` in all, so that a repeated request does not run the resizer again.
 * Least recently served first out.
 */
export class KeptSizes<V extends { bytes: Buffer }> {
  readonly #kept = new Map<string, { variant: V; expires: number }>()
  #bytes = 0

  constructor(
    private readonly ttl: number,
    private readonly maxBytes: number,
  ) {}

  /** Bytes kept now. */
  get bytes(): number {
    return this.#bytes
  }

  /** The size kept under `key`; undefined when none, or expired (then dropped). */
  get(key: string): V | undefined {
    const kept = this.#kept.get(key)
    if (!kept) return undefined
    this.#kept.delete(key)
    if (kept.expires <= performance.now()) {
      this.#bytes -= kept.variant.bytes.length
      return undefined
    }
    // Served now: the most recent again.
    this.#kept.set(key, kept)
    return kept.variant
  }

  /** Keeps `made` under `key`, evicting the least recently served (and the expired) until it fits. */
  keep(key: string, made: V): void {
    const size = made.bytes.length
    if (this.ttl <= 0 || size > this.maxBytes) return
    const now = performance.now()
    const old = this.#kept.get(key)
    if (old) {
      this.#kept.delete(key)
      this.#bytes -= old.variant.bytes.length
    }
    for (const [k, e] of this.#kept) {
      if (this.#bytes + size <= this.maxBytes && e.expires > now) break
      this.#kept.delete(k)
      this.#bytes -= e.variant.bytes.length
    }
    this.#kept.set(key, { variant: made, expires: now + this.ttl })
    this.#bytes += size
  }
}
