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

  it('keeps at most 2 MiB per class, and refuses buffers it did not make', () => {
    const pool = new ReadBufferPool()
    const taken = Array.from({ length: 40 }, () => pool.take(60_000)!)
    for (const b of taken) pool.give(b)
    const again = new Set(Array.from({ length: 40 }, () => pool.take(60_000)!))
    // 32 of 64 KiB were kept; 8 more are new.
    expect([...again].filter((b) => taken.includes(b))).toHaveLength(32)
    expect(pool.made).toBe(48)
    const odd = Buffer.alloc(50_000)
    pool.give(odd)
    pool.give(Buffer.alloc(1024))
    pool.give(Buffer.alloc(1024 * 1024))
    expect(pool.take(50_000)).not.toBe(odd)
  })
})
