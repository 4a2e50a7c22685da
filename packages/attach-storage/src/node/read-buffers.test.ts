/** The fast path's kept read buffers: size classes, reuse, and what each class keeps at most. */
import { describe, expect, it } from 'vitest'
import { ReadBufferPool } from './read-buffers.js'

describe('ReadBufferPool', () => {
  it('leaves reads Node pools itself (4 KiB and less) and reads over 256 KiB to new buffers', () => {
    const pool = new ReadBufferPool()
    expect(pool.take(1)).toBeUndefined()
    expect(pool.take(4096)).toBeUndefined()
    expect(pool.take(256 * 1024 + 1)).toBeUndefined()
    expect(pool.made).toBe(0)
  })

  it('answers a buffer of the power-of-two class of the length, from 8 KiB to 256 KiB', () => {
    const pool = new ReadBufferPool()
    const sizes = [4097, 8192, 8193, 50 * 1024, 65536, 65537, 256 * 1024].map((n) => pool.take(n)!.byteLength)
    expect(sizes).toEqual([8192, 8192, 16384, 65536, 65536, 131072, 262144])
  })

  it('hands a given-back buffer out again, to a length of the same class only', () => {
    const pool = new ReadBufferPool()
    const a = pool.take(50 * 1024)!
    pool.give(a)
    expect(pool.take(20 * 1024)).not.toBe(a)
    expect(pool.take(40 * 1024)).toBe(a)
    expect(pool.take(40 * 1024)).not.toBe(a)
    expect(pool.made).toBe(3)
  })

  it('keeps at most 32 buffers per class, or 2 MiB of a small class, and refuses buffers it did not make', () => {
    const pool = new ReadBufferPool()
    const kept = (length: number, count: number) => {
      const taken = Array.from({ length: count }, () => pool.take(length)!)
      for (const b of taken) pool.give(b)
      const again = Array.from({ length: count }, () => pool.take(length)!)
      for (const b of again) pool.give(b)
      return again.filter((b) => taken.includes(b)).length
    }
    // 256 KiB: 32 kept (8 MiB), where 2 MiB would have kept 8; 8 more are new on the next 40.
    expect(kept(200_000, 40)).toBe(32)
    // 64 KiB: 32 are 2 MiB as well. 16 KiB: 128 fit in 2 MiB.
    expect(kept(60_000, 40)).toBe(32)
    expect(kept(10_000, 140)).toBe(128)
    expect(pool.made).toBe(40 + 8 + 40 + 8 + 140 + 12)
    const odd = Buffer.alloc(50_000)
    pool.give(odd)
    pool.give(Buffer.alloc(1024))
    pool.give(Buffer.alloc(1024 * 1024))
    expect(pool.take(50_000)).not.toBe(odd)
  })
})
