/** forEachConcurrent: the bounded walk under verify, copy-store and variants make. */
import { setTimeout as sleep } from 'node:timers/promises'
import { describe, expect, it } from 'vitest'
import { forEachConcurrent } from './runtime.js'

async function* numbers(n: number, closed?: { value: boolean }): AsyncGenerator<number> {
  try {
    for (let i = 0; i < n; i++) yield i
  } finally {
    if (closed) closed.value = true
  }
}

describe('forEachConcurrent', () => {
  it('takes items in order, runs at most `concurrency` at once, each on a worker no other item holds then', async () => {
    const started: number[] = []
    const busy = new Set<number>()
    let running = 0
    let most = 0
    await forEachConcurrent(numbers(40), 3, new AbortController().signal, async (i, worker) => {
      started.push(i)
      expect(busy.has(worker)).toBe(false)
      expect(worker).toBeGreaterThanOrEqual(0)
      expect(worker).toBeLessThan(3)
      busy.add(worker)
      running++
      most = Math.max(most, running)
      await sleep(i % 5)
      running--
      busy.delete(worker)
    })
    expect(started).toEqual([...Array(40).keys()])
    expect(most).toBe(3)
  })

  it('stops taking items after a failure, lets those in flight finish, closes the source and throws the first failure', async () => {
    const closed = { value: false }
    const taken: number[] = []
    const done: number[] = []
    const run = forEachConcurrent(numbers(100, closed), 4, new AbortController().signal, async (i) => {
      taken.push(i)
      if (i === 4) {
        await sleep(5)
        throw new Error('four, later')
      }
      if (i === 5) throw new Error('five')
      await sleep(10)
      done.push(i)
    })
    await expect(run).rejects.toThrow('five')
    expect(closed.value).toBe(true)
    // 5 failed as it was taken, with 4 in flight: 4 fails after it, and nothing after 5 is taken.
    expect(taken).toEqual([0, 1, 2, 3, 4, 5])
    expect(done).toEqual([0, 1, 2, 3])
  })

  it('stops taking items once the signal aborts, and closes the source', async () => {
    const closed = { value: false }
    const abort = new AbortController()
    const taken: number[] = []
    await forEachConcurrent(numbers(1000, closed), 2, abort.signal, async (i) => {
      taken.push(i)
      if (i === 9) abort.abort()
      await sleep(1)
    })
    expect(closed.value).toBe(true)
    expect(taken.length).toBeLessThanOrEqual(11)
    expect(taken.slice(0, 10)).toEqual([...Array(10).keys()])
  })

  it('throws what the source throws, after the items in flight', async () => {
    async function* broken(): AsyncGenerator<number> {
      yield 1
      yield 2
      throw new Error('the listing failed')
    }
    const done: number[] = []
    await expect(
      forEachConcurrent(broken(), 4, new AbortController().signal, async (i) => {
        await sleep(5)
        done.push(i)
      }),
    ).rejects.toThrow('the listing failed')
    expect(done.sort()).toEqual([1, 2])
  })
})
