/** Pools of work bounded per concurrency setting (p-limit), one family per kind of work. */
import pLimit, { type LimitFunction } from 'p-limit'

/**
 * A family of pools: `of(n)` is the one pool of `n` slots of this family, made on first use, so every
 * caller with the same setting shares its slots (and another family never takes them).
 */
export function limitFamily(): { of(concurrency: number): LimitFunction } {
  const pools = new Map<number, LimitFunction>()
  return {
    of(concurrency) {
      let limit = pools.get(concurrency)
      if (!limit) {
        limit = pLimit(concurrency)
        pools.set(concurrency, limit)
      }
      return limit
    },
  }
}
