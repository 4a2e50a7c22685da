/**
 * What a view leaves to the garbage collector. Under load, the objects of a view answered first must die
 * young: if a view's objects outlive young-generation collections (scavenges), each scavenge copies
 * them and then moves them to the old generation, where they pile up until a full collection. That made
 * the p99 tail of the views: an access context written as an object literal with a getter gave every
 * request a hidden class of its own in the old generation, which held the request's objects through
 * each scavenge (1 MB promoted per scavenge, 3 KB per view, pauses of 5-13 ms instead of 1-2).
 *
 * The old generation also grows between collections, by what V8 allocates there directly: the new
 * table of a long-lived `Map` it rebuilds, such as a cache whose hit deletes and re-inserts its entry.
 *
 * A server process answers views of a 50 KB file with `serveViewsFirst` on the embedded defaults
 * (SQLite, local disk), with Node's `v8.GCProfiler` around 4,000 views from 16 connections. From each
 * collection's heap statistics: the bytes the scavenges moved to the old generation (after minus
 * before), and those allocated there between two scavenges (one's before minus the previous one's after).
 */
import { spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { Agent, request } from 'node:http'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { seedDataDir } from '../testing/cli-kit.js'

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..', '..')
const VIEWS = 4000
const CONNECTIONS = 16

/** The server: the service on `dataDir`, views answered first, and `/gc/start`, `/gc/stop` around the profiler. */
const serverScript = (dataDir: string) => `
  import { createServer } from 'node:http'
  import { GCProfiler } from 'node:v8'
  import { createAttachStorage } from 'attach-storage'
  import { serveViewsFirst } from 'attach-storage/node'
  const storage = await createAttachStorage({
    config: {
      directory: { baseDir: ${JSON.stringify(join(dataDir, 'files'))} },
      db: { file: ${JSON.stringify(join(dataDir, 'attach.db'))} },
      domains: { demo: { categories: { default: {} } } },
    },
  })
  let profiler
  // Every space but the young generation's (where a scavenge moves what survived it twice) and those of
  // compiled code: the compiler installs a function's optimised code there once, whenever its thread gets
  // a core (143 KB inside the measured views once on Node 20, 36 bytes a view, on a machine busy with
  // other tests; on Node 24 the code spaces and V8's trusted space take 130-140 KB in every run).
  const counted = (name) => !/^(new_|code_|trusted_)/.test(name)
  const old = (gc) => gc.heapSpaceStatistics.filter((s) => counted(s.spaceName)).reduce((a, s) => a + s.spaceUsedSize, 0)
  const server = createServer((req, res) => {
    if (req.url === '/gc/start') {
      profiler = new GCProfiler()
      profiler.start()
      return res.end('{}')
    }
    if (req.url === '/gc/stop') {
      const all = profiler.stop().statistics
      const scavenges = all.filter((s) => s.gcType === 'Scavenge')
      // The median scavenge's, times their count: one scavenge that promotes much (the server starved by
      // a busy machine: 3.5 KB per view once in CI) does not move it; a view whose objects outlive
      // scavenges moves it at every one.
      const median = (xs) => (xs.length ? [...xs].sort((a, b) => a - b)[xs.length >> 1] : 0)
      const promoted = median(scavenges.map((s) => Math.max(0, old(s.afterGC) - old(s.beforeGC)))) * scavenges.length
      // What the views themselves allocated in the old generation between two scavenges (no full
      // collection between them): V8 puts there the new table of a long-lived Map it rebuilds. Summed:
      // a Map's table is rebuilt every few hundred views, not in every interval.
      let direct = 0
      // Each space's share, for the message of a failing bound.
      const spaces = {}
      for (let i = 1; i < all.length; i++) {
        if (all[i].gcType !== 'Scavenge' || all[i - 1].gcType !== 'Scavenge') continue
        direct += Math.max(0, old(all[i].beforeGC) - old(all[i - 1].afterGC))
        all[i].beforeGC.heapSpaceStatistics.forEach((s, j) => {
          if (counted(s.spaceName)) spaces[s.spaceName] = (spaces[s.spaceName] ?? 0) + s.spaceUsedSize - all[i - 1].afterGC.heapSpaceStatistics[j].spaceUsedSize
        })
      }
      return res.end(JSON.stringify({ scavenges: scavenges.length, promoted, direct, spaces }))
    }
    res.statusCode = 404
    res.end()
  })
  serveViewsFirst(server, storage)
  server.listen(0, '127.0.0.1', () => console.log('listening on ' + server.address().port))
`

/** A GET on the server's keep-alive agent: status and body length. */
function get(agent: Agent, port: number, path: string): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    request({ host: '127.0.0.1', port, path, agent }, (res) => {
      const chunks: Buffer[] = []
      res.on('data', (c: Buffer) => chunks.push(c))
      res.on('end', () => resolve({ status: res.statusCode!, body: Buffer.concat(chunks) }))
      res.on('error', reject)
    })
      .on('error', reject)
      .end()
  })
}

describe('views answered first, under load', () => {
  let dataDir: string
  let id: number
  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), 'attach-views-gc-'))
    id = (await seedDataDir(dataDir, { count: 1, size: 50 * 1024 }))[0]!.id
  })
  afterAll(async () => {
    await rm(dataDir, { recursive: true, force: true })
  })

  type Window = { scavenges: number; promoted: number; direct: number; spaces: Record<string, number> }

  /** A server process of its own: warmed with 3,000 views, then 4,000 views measured. */
  async function measureInProcess(): Promise<Window> {
    const child = spawn(
      process.execPath,
      ['--conditions=@attach-storage/source', '--import', 'tsx', '--input-type=module', '-e', serverScript(dataDir)],
      {
        cwd: root,
        stdio: ['ignore', 'pipe', 'pipe'],
      },
    )
    const agent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS })
    try {
      const port = await new Promise<number>((resolve, reject) => {
        let out = ''
        const read = (d: Buffer) => {
          out += d
          const m = /listening on (\d+)/.exec(out)
          if (m) resolve(Number(m[1]))
        }
        child.stdout.on('data', read)
        child.stderr.on('data', read)
        child.once('exit', (code) => reject(new Error(`the server exited with ${code}: ${out}`)))
      })
      const views = async (count: number) => {
        let left = count
        await Promise.all(
          Array.from({ length: CONNECTIONS }, async () => {
            while (left-- > 0) {
              const r = await get(agent, port, `/assets/storage/attach/view/${id}`)
              if (r.status !== 200 || r.body.length !== 50 * 1024) throw new Error(`a view answered ${r.status}, ${r.body.length} bytes`)
            }
          }),
        )
      }
      // Warm: the code is compiled (bytecode and feedback live in the old generation) and the young
      // generation has grown before the profile starts.
      await views(3000)
      await get(agent, port, '/gc/start')
      await views(VIEWS)
      return JSON.parse((await get(agent, port, '/gc/stop')).body.toString()) as Window
    } finally {
      agent.destroy()
      child.kill()
    }
  }

  it('leave almost nothing to the old generation: their objects die in the young one', async () => {
    // What a view's code leaves is the same in every process: about 6 bytes a view promoted and 11 to
    // 15 allocated in the old generation, in each of 8 runs here. Once in CI (Node 20) one process
    // promoted 3.2 KB a view in two windows in a row, running at full speed, and was not seen again in
    // 14 runs, alone or beside other tests. A process past a bound is followed by a fresh one, and that
    // one is held to the bounds: a regression of the code shows in both.
    const over = (w: Window) => w.promoted / VIEWS >= 300 || w.direct / VIEWS >= 40
    const first = await measureInProcess()
    const { scavenges, promoted, direct, spaces } = over(first) ? await measureInProcess() : first
    // 4,000 views allocate about 100 MB: young-generation collections did run.
    expect(scavenges).toBeGreaterThanOrEqual(3)
    // Before: about 3,000 bytes per view. Now tens: what was in flight at a scavenge.
    expect(promoted / VIEWS).toBeLessThan(300)
    // Before: about 200 bytes per view, the tables of the two caches re-inserting their entry on every
    // view (the SQLite statements: 60-75 alone; the local store's descriptors). Now 0-13 on Node 20 and
    // under 1 on Node 24 (node:sqlite, V8 13), where the record read as a row object cost about 70 bytes
    // a view (node:sqlite made the rows in the old generation); it is read as an array of values now.
    expect(direct / VIEWS, `bytes by space between scavenges: ${JSON.stringify(spaces)}`).toBeLessThan(40)
  }, 90_000)
})
