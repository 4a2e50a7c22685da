/**
 * A confirmed save (and a host's attachContainer) holds at most `save.max-entries` entries in all; more
 * answers 400 `too-many-entries` before anything is read or changed. A partial failure lists a bounded
 * number of failures. Re-sorts and reuses are written in one transaction, a few statements whatever
 * their number, on every dialect; the event loop stays free while a 1,000-entry save runs.
 */
import { monitorEventLoopDelay } from 'node:perf_hooks'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS } from '../../../../test/databases.js'
import { type Kit, makeKit, token } from '../testing/handler-kit.js'
import { ENTRIES_CEILING } from './bag.js'
import { FAILURES_LISTED } from './commit.js'

const API = '/api/storage'

for (const dialect of DIALECTS) {
  describe(`save bounds (${dialect})`, () => {
    let kit: Kit
    beforeAll(async () => {
      kit = await makeKit(dialect, { config: { save: { maxEntries: 6 } } })
    })
    afterAll(() => kit.cleanup())

    const tmpUpload = async (text: string, name = 'a.txt') => {
      const res = await kit.upload(`${API}/attach/tmp`, [
        ['refDomain', 'demo'],
        ['file', new Blob([text]), name],
      ])
      return (await res.json()).files[0]
    }
    const save = (refKey: string, bag: unknown) => kit.call(`${API}/attach/demo/${refKey}`, { method: 'POST', body: JSON.stringify(bag) })
    const records = async (refKey: string) => (await (await kit.call(`${API}/attach/demo/${refKey}/default`)).json()).default as any[]
    const saveFiles = async (refKey: string, n: number) => {
      const items = []
      for (let i = 0; i < n; i++) items.push(await tmpUpload(`file ${refKey} ${i}`, `f${i}.txt`))
      const res = await save(refKey, { default: items.map((it, i) => ({ savedName: it.name, displayName: `f${i}.txt` })) })
      expect(res.status).toBe(200)
      return (await res.json()).attachList as any[]
    }

    it('more than save.max-entries in all answers 400 too-many-entries, small, and changes nothing', async () => {
      const [a, b, c] = await saveFiles('many-1', 3)
      const fresh = await tmpUpload('new one')
      // 7 entries in all: 2 deletions, 3 re-sorts, 1 new file, 1 reuse.
      const bag = {
        _deleted: [{ id: a.id }, { id: b.id }],
        default: [{ id: c.id }, { id: b.id }, { id: a.id }, { savedName: fresh.name }, { savedDir: c.savedDir, savedName: c.savedName }],
      }
      const res = await save('many-1', bag)
      expect(res.status).toBe(400)
      const text = await res.text()
      expect(text.length).toBeLessThan(300)
      expect(JSON.parse(text)).toEqual({ code: 'too-many-entries', message: expect.stringMatching(/7 entries.*at most 6/) })
      const after = await records('many-1')
      expect(after.map((r) => [r.id, r.sort])).toEqual([
        [a.id, 0],
        [b.id, 1],
        [c.id, 2],
      ])
      expect(await kit.files(kit.tmpDir)).toContain(`_tmp/${fresh.name}`)
      // The same bag less one entry is within the bound.
      const ok = await save('many-1', { ...bag, _deleted: [{ id: a.id }] })
      expect(ok.status).toBe(500) // b is re-sorted and reused; only the deleted a's re-sort fails
      const body = await ok.json()
      expect(body.failures).toEqual([expect.objectContaining({ refCategory: 'default', index: 2, code: 'bad-request' })])
      expect((await records('many-1')).map((r) => [r.id === c.id ? 'c' : r.id === b.id ? 'b' : 'new', r.sort])).toEqual([
        ['c', 0],
        ['b', 1],
        ['new', 3],
        ['new', 4],
      ])
    })

    it('the host commitAttachContainer() holds the same bound, before the entity hook or any read', async () => {
      const entries = Array.from({ length: 7 }, () => 0)
      await expect(
        kit.storage.commitAttachContainer({
          refDomain: 'demo',
          refKey: 'many-2',
          attachContainer: { default: entries } as never,
          user: { id: 7 },
        }),
      ).rejects.toMatchObject({ code: 'too-many-entries', status: 400 })
      // Past the ceiling of any setting, the schema refuses it before reading an entry, with the same code.
      const huge = { default: Array.from({ length: ENTRIES_CEILING + 1 }, () => 0) }
      const res = await save('many-2', huge)
      expect(res.status).toBe(400)
      expect((await res.json()).code).toBe('too-many-entries')
    })

    it('a partial failure lists at most the first failures, with failureCount', async () => {
      const small = await makeKit(dialect, { config: { save: { maxEntries: 1000 } } })
      try {
        const res = await small.call(`${API}/attach/demo/many-3`, {
          method: 'POST',
          body: JSON.stringify({ default: Array.from({ length: 1000 }, (_, i) => ({ id: 0, displayName: `${'x'.repeat(1500)}${i}` })) }),
        })
        expect(res.status).toBe(500)
        const text = await res.text()
        const body = JSON.parse(text)
        expect(body).toMatchObject({ code: 'attach-save-failure', failureCount: 1000 })
        expect(body.failures).toHaveLength(FAILURES_LISTED)
        expect(body.failures[99]).toMatchObject({ index: 99, code: 'bad-request' })
        // Names in failures are cleaned and cut like any display name.
        expect(body.failures[0].displayName.length).toBeLessThanOrEqual(1024)
        expect(text.length).toBeLessThan(150_000)
      } finally {
        await small.cleanup()
      }
    })

    it('re-sorts: one write for all, the last index of an id wins, an id of another reference fails alone', async () => {
      const [a, b, c] = await saveFiles('sort-1', 3)
      const [other] = await saveFiles('sort-2', 1)
      const res = await save('sort-1', { default: [{ id: c.id }, { id: a.id }, { id: other.id }, { id: b.id }, { id: a.id }] })
      expect(res.status).toBe(500)
      const body = await res.json()
      expect(body.failures).toEqual([
        expect.objectContaining({ index: 2, code: 'bad-request', reason: expect.stringMatching(/does not belong/) }),
      ])
      expect((await records('sort-1')).map((r) => [r.id, r.sort])).toEqual([
        [c.id, 0],
        [b.id, 3],
        [a.id, 4],
      ])
      expect((await records('sort-2')).map((r) => [r.id, r.sort])).toEqual([[other.id, 0]])
      // A re-sort naming the right record in the wrong category fails, and changes nothing.
      const wrong = await save('sort-1', { image: [{ id: a.id }] })
      expect(wrong.status).toBe(500)
      expect((await records('sort-1')).find((r) => r.id === a.id).sort).toBe(4)
    })

    it('reuses: one file reused many times is checked once and recorded in one transaction', async () => {
      const [src] = await saveFiles('reuse-1', 1)
      const res = await save('reuse-2', {
        default: Array.from({ length: 6 }, (_, i) => ({ savedDir: src.savedDir, savedName: src.savedName, displayName: `copy ${i}.txt` })),
      })
      expect(res.status).toBe(200)
      const list = (await res.json()).attachList
      expect(list.map((r: any) => [r.displayName, r.sort])).toEqual(Array.from({ length: 6 }, (_, i) => [`copy ${i}.txt`, i]))
      expect(new Set(list.map((r: any) => r.blobId ?? r.savedName)).size).toBe(1)
      const blob = await kit.storage.repository.findBlob('local', src.savedDir, src.savedName)
      expect(blob?.refCount).toBe(7)
      // A deleted source fails every reuse entry of it alone.
      await kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id: src.id }, ...list.map((r: any) => ({ id: r.id }))]) })
      const gone = await save('reuse-3', { default: [{ savedDir: src.savedDir, savedName: src.savedName }] })
      expect(gone.status).toBe(500)
      expect((await gone.json()).failures).toEqual([expect.objectContaining({ index: 0, code: 'not-found' })])
    })
  })
}

describe('a 1,000-entry save leaves the event loop free (SQLite)', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite')
  })
  afterAll(() => kit.cleanup())

  /**
   * While `run` goes: the longest event-loop delay (ms, the best of three runs: the machine may be busy)
   * and how many times a 1 ms timer got its turn (a save that never yields gives it none).
   */
  const loop = async (run: () => Promise<unknown>) => {
    let best = Number.POSITIVE_INFINITY
    let turns = 0
    for (let i = 0; i < 3 && best >= 100; i++) {
      const h = monitorEventLoopDelay({ resolution: 5 })
      h.enable()
      await new Promise((r) => setTimeout(r, 15))
      let ticks = 0
      const timer = setInterval(() => ticks++, 1)
      await run()
      clearInterval(timer)
      await new Promise((r) => setTimeout(r, 15))
      h.disable()
      best = Math.min(best, h.max / 1e6)
      turns = Math.max(turns, ticks)
    }
    return { delay: best, turns }
  }

  it('1,000 re-sorts or malformed entries hold the loop < 100 ms; 1,000 reuses give it turns throughout', async () => {
    const up = await kit.upload(`${API}/attach/tmp`, [
      ['refDomain', 'demo'],
      ['file', new Blob(['hello']), 'a.txt'],
    ])
    const item = (await up.json()).files[0]
    const saved = await kit.call(`${API}/attach/demo/loop-1`, {
      method: 'POST',
      body: JSON.stringify({ default: [{ savedName: item.name }] }),
    })
    const rec = (await saved.json()).attachList[0]
    const auth = `Bearer ${await token('7')}`
    // The handler itself, without the kit's check of every answer against the OpenAPI document (the
    // test's own work, which would count in the delay).
    const post = async (refKey: string, entries: unknown[]) => {
      const res = await kit.handler.fetch(
        new Request(`http://x${API}/attach/demo/${refKey}`, {
          method: 'POST',
          body: JSON.stringify({ default: entries }),
          headers: { authorization: auth, 'content-type': 'application/json' },
        }),
      )
      await res.arrayBuffer()
      return res
    }

    const ids = Array.from({ length: 1000 }, () => ({ id: rec.id }))
    const zeros = Array.from({ length: 1000 }, () => 0)
    const reuses = Array.from({ length: 1000 }, () => ({ savedDir: rec.savedDir, savedName: rec.savedName }))
    let n = 0
    const resorts = await loop(async () => expect((await post('loop-1', ids)).status).toBe(200))
    const malformed = await loop(async () => expect((await post('loop-1', zeros)).status).toBe(500))
    expect(resorts.delay, 're-sorts').toBeLessThan(100)
    expect(malformed.delay, 'malformed entries').toBeLessThan(100)
    // 1,000 new records take some 200 ms of CPU in all (their rows, the answer's 1,000 records), written
    // in chunks of 50 with a turn between, never in one block (which would leave the timer no turn).
    const reused = await loop(async () => expect((await post(`loop-${++n + 1}`, reuses)).status).toBe(200))
    expect(reused.turns, 'timer turns during 1,000 reuses').toBeGreaterThanOrEqual(15)
  })
})
