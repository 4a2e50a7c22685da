/** The in-process queue of named-variant jobs: order, concurrency, the bound, no duplicates, retries. */
import { describe, expect, it } from 'vitest'
import { MemoryVariantQueue, type VariantJob } from './variant-queue.js'

const job = (fileId: number, name = 'thumb'): VariantJob => ({ fileId, name })

function queue(work: (j: VariantJob) => Promise<void>, options: Partial<ConstructorParameters<typeof MemoryVariantQueue>[1]> = {}) {
  const dropped: VariantJob[] = []
  const failed: VariantJob[] = []
  const q = new MemoryVariantQueue(work, {
    concurrency: 2,
    maxQueued: 100,
    retryLimit: 2,
    retryDelayMs: 5,
    onDrop: (j) => dropped.push(j),
    onFail: (j) => failed.push(j),
    ...options,
  })
  return { q, dropped, failed }
}

describe('MemoryVariantQueue', () => {
  it('runs jobs first in first out, never more than `concurrency` at once', async () => {
    let running = 0
    let most = 0
    const done: number[] = []
    const { q } = queue(async (j) => {
      running++
      most = Math.max(most, running)
      await new Promise((r) => setTimeout(r, 5))
      done.push(j.fileId)
      running--
    })
    await q.enqueue([1, 2, 3, 4, 5, 6].map((n) => job(n)))
    await q.idle()
    expect(most).toBe(2)
    expect(done.slice().sort()).toEqual([1, 2, 3, 4, 5, 6])
    expect(done.indexOf(1)).toBeLessThan(done.indexOf(5))
  })

  it('queues a record and name once while it waits or runs, and drops what is past maxQueued', async () => {
    const seen: string[] = []
    const { q, dropped } = queue(
      async (j) => {
        seen.push(`${j.fileId}:${j.name}`)
        await new Promise((r) => setTimeout(r, 5))
      },
      { concurrency: 1, maxQueued: 3 },
    )
    await q.enqueue([job(1), job(1), job(1, 'wide'), job(2), job(3), job(4), job(5)])
    // Three were taken (1:thumb, 1:wide, 2), the first of them runs; 3, 4 and 5 were past the bound.
    expect(q.waiting()).toBe(2)
    await q.idle()
    expect(seen).toEqual(['1:thumb', '1:wide', '2:thumb'])
    expect(dropped.map((j) => j.fileId)).toEqual([3, 4, 5])
    // Once ended, the same job can be queued again.
    await q.enqueue([job(1)])
    await q.idle()
    expect(seen).toHaveLength(4)
  })

  it('tries a failed job again up to retryLimit, then reports it failed', async () => {
    const attempts = new Map<number, number>()
    const { q, failed } = queue(async (j) => {
      const n = (attempts.get(j.fileId) ?? 0) + 1
      attempts.set(j.fileId, n)
      if (j.fileId === 1 && n < 3) throw new Error('store down')
      if (j.fileId === 2) throw new Error('never')
    })
    await q.enqueue([job(1), job(2)])
    await q.idle()
    expect(attempts.get(1)).toBe(3)
    expect(attempts.get(2)).toBe(3)
    expect(failed.map((j) => j.fileId)).toEqual([2])
  })

  it('takes nothing more once stopped', async () => {
    const seen: number[] = []
    const { q } = queue(async (j) => {
      seen.push(j.fileId)
    })
    await q.stop()
    await q.enqueue([job(1)])
    await q.idle()
    expect(seen).toEqual([])
  })
})
