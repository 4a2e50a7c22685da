/**
 * Crashes during confirmed saves: a reference server child is killed with SIGKILL in the middle of saves
 * (at each step of a save through the test-only pause point, and at random moments), then restarted on
 * the same data directory. Every acknowledged save must still serve its bytes, the retry of every request
 * must complete (200) without making a second record, and after the sweep no orphan may be left.
 *
 * The server is the Hono reference server (src/server.ts), bundled once with esbuild so that a restart
 * costs a plain `node` start; the next servers are started while the current one works (two ahead: a
 * start takes about 800 ms, four times a trial's own work), and each takes over (on the same data
 * directory) only once the one before it is dead.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { createHash, randomBytes } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, relative, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createReferenceApp } from '../src/app.js'
import { bundleServer, sign, walk } from './helpers.js'

const here = dirname(fileURLToPath(import.meta.url))
const SECRET = 'crash-test-secret-0123456789'
const STEPS = ['reserved', 'moved', 'recorded', 'done'] as const
const TRIALS = 32
/** Servers started ahead of the one serving: a start has the time of this many trials to finish. */
const AHEAD = 2

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')

interface Child {
  proc: ChildProcessWithoutNullStreams
  base: string
  output: () => string
  /** Resolves once stdout holds a line matching `re`. */
  waitFor(re: RegExp): Promise<void>
  exited: Promise<unknown>
}

/** Every server started and not yet dead. */
const running = new Set<ChildProcessWithoutNullStreams>()

/** The reference server bundled (workspace packages inlined from source, other packages left to node_modules). */
const bundle = join(here, '..', '..', '..', 'node_modules', '.cache', 'attach-crash-test', `server-${process.pid}.mjs`)

async function startChild(dataDir: string): Promise<Child> {
  const proc = spawn(process.execPath, [bundle], {
    cwd: join(here, '..'),
    env: {
      ...process.env,
      PORT: '0',
      ATTACH_DATA_DIR: dataDir,
      ATTACH_JWT_SECRET: SECRET,
      ATTACH_SIGNING_SECRET: SECRET,
      ATTACH_TEST_PAUSE: '1',
    },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  running.add(proc)
  proc.once('exit', () => running.delete(proc))
  let out = ''
  const waiters: Array<{ re: RegExp; resolve: () => void }> = []
  proc.stdout.on('data', (d) => {
    out += d
    for (const w of [...waiters]) {
      if (w.re.test(out)) {
        waiters.splice(waiters.indexOf(w), 1)
        w.resolve()
      }
    }
  })
  proc.stderr.on('data', (d) => (out += d))
  const exited = new Promise((resolve) => proc.once('exit', resolve))
  const waitFor = (re: RegExp) =>
    new Promise<void>((resolve, reject) => {
      if (re.test(out)) return resolve()
      waiters.push({ re, resolve })
      void exited.then(() => reject(new Error(`the server exited before ${re}: ${out}`)))
    })
  await waitFor(/listening on http:\/\/127\.0\.0\.1:\d+/)
  const port = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)![1]
  return { proc, base: `http://127.0.0.1:${port}`, output: () => out, waitFor, exited }
}

async function kill(child: Child): Promise<void> {
  child.proc.kill('SIGKILL')
  await child.exited
}

/**
 * The servers on `dataDir`: `first()` starts one alone (it makes the tables); then the servers that take
 * over in turn, started {@link AHEAD} ahead: `next()` answers the oldest started (up or still starting)
 * and starts another (`next(false)`, for the last one needed, starts none); `idle()` resolves once
 * every server started is up, so that no start slows down what is measured or timed next.
 */
function successors(dataDir: string) {
  const launch = () => {
    const c = startChild(dataDir)
    c.catch(() => undefined)
    return c
  }
  const ahead: Promise<Child>[] = []
  return {
    first: launch,
    next(startAnother = true): Promise<Child> {
      while (ahead.length < (startAnother ? AHEAD : 1)) ahead.push(launch())
      return ahead.shift()!
    },
    async idle(): Promise<void> {
      await Promise.all(ahead)
    },
  }
}

describe('confirmed saves survive kill -9', () => {
  const dirs: string[] = []
  beforeAll(async () => {
    await bundleServer(bundle)
  })
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true })
    await rm(bundle, { force: true })
  })

  it(`completes every interrupted save on retry, loses no acknowledged file and leaves no orphan (${TRIALS} kills)`, async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'attach-crash-'))
    dirs.push(dataDir)
    const token = await sign('1', SECRET)
    const auth = { authorization: `Bearer ${token}` }
    /** refKey → the bytes of its `default` entries, in order. */
    const expected = new Map<string, Uint8Array[]>()
    const outcome = { acknowledged: 0, lost: 0, retried: 0, byStep: {} as Record<string, number> }

    const servers = successors(dataDir)
    let stepTurn = 0
    let randomKills = 0
    /** How long an uninterrupted save took last (a random kill falls within about that time). */
    let saveMs = 20
    let child = await servers.first()
    try {
      for (let trial = 0; trial < TRIALS; trial++) {
        // The next server starts (or started) meanwhile; it serves only once this one is dead.
        const successor = servers.next()
        // 1 to 3 files, uploaded to the temporary area.
        const files = Array.from({ length: 1 + (trial % 3) }, () => randomBytes(1024 + Math.floor(Math.random() * 64 * 1024)))
        const entries = []
        for (const [i, bytes] of files.entries()) {
          const fd = new FormData()
          fd.set('refDomain', 'demo')
          fd.set('file', new Blob([new Uint8Array(bytes)]), `f${trial}-${i}.bin`)
          const res = await fetch(`${child.base}/api/storage/attach/tmp`, { method: 'POST', body: fd, headers: auth })
          expect(res.status).toBe(200)
          const item = (await res.json()).files[0]
          entries.push({ savedName: item.name, displayName: `f${trial}-${i}.bin` })
        }
        const refKey = `k${trial}`
        const body = JSON.stringify({ refDomain: 'demo', default: entries })
        const save = (headers: Record<string, string> = {}) =>
          fetch(`${child.base}/api/storage/attach/demo/${refKey}`, {
            method: 'POST',
            body,
            headers: { ...auth, 'content-type': 'application/json', ...headers },
          })

        // Every fourth trial kills at random; the others at a step, in turn.
        const step = trial % 4 === 3 ? undefined : STEPS[stepTurn++ % STEPS.length]!
        const mode = step ?? 'random'
        outcome.byStep[mode] = (outcome.byStep[mode] ?? 0) + 1
        let acknowledged = false
        if (step) {
          const pending = save({ 'x-attach-test-pause': step }).catch(() => undefined)
          await child.waitFor(new RegExp(`attach-test-paused ${step}`))
          await kill(child)
          expect(await pending).toBeUndefined()
        } else {
          // The next servers are up first, so that their starts do not slow this save down.
          await successor
          await servers.idle()
          // Every other random kill has a large upload in flight too, so that it may leave a partial file.
          const withUpload = randomKills++ % 2 === 0
          const big = new FormData()
          big.set('refDomain', 'demo')
          big.set('file', new Blob([new Uint8Array(randomBytes(8 * 1024 * 1024))]), 'big.bin')
          const upload = withUpload
            ? fetch(`${child.base}/api/storage/attach/tmp`, { method: 'POST', body: big, headers: auth }).catch(() => undefined)
            : undefined
          const pending = save()
            .then(async (res) => res.status === 200 && (await res.json()).success === true)
            .catch(() => false)
          await new Promise((r) => setTimeout(r, Math.random() * 2 * saveMs))
          await kill(child)
          acknowledged = await pending
          await upload
        }
        if (acknowledged) outcome.acknowledged++
        expected.set(refKey, files)

        child = await successor
        // The retry before a random kill times a save: no server starts meanwhile, as for that save.
        if ((trial + 1) % 4 === 3) await servers.idle()
        // The client's retry of the same request completes, acknowledged or not, with no second record.
        const started = performance.now()
        const retry = await save()
        const answer = await retry.json()
        saveMs = performance.now() - started
        expect(retry.status, JSON.stringify(answer)).toBe(200)
        expect(answer.attachList.map((r: { displayName: string }) => r.displayName)).toEqual(entries.map((e) => e.displayName))
        outcome.retried++
      }

      // Every save serves its bytes after one more kill.
      const last = servers.next(false)
      await kill(child)
      child = await last
      for (const [refKey, files] of expected) {
        for (const [i, bytes] of files.entries()) {
          const res = await fetch(`${child.base}/assets/storage/attach/view/demo/${refKey}/default/${i}`)
          expect(res.status, `${refKey}[${i}]`).toBe(200)
          const got = new Uint8Array(await res.arrayBuffer())
          if (sha256(got) !== sha256(bytes)) outcome.lost++
          expect(sha256(got), `${refKey}[${i}]`).toBe(sha256(bytes))
        }
      }
    } finally {
      await Promise.all(
        [...running].map(
          (p) =>
            new Promise((r) => {
              p.once('exit', r)
              p.kill('SIGKILL')
            }),
        ),
      )
    }

    // The sweep (tmp-ttl 1s, run once everything is older than that) leaves no orphan.
    const config = join(dataDir, 'sweep.yaml')
    await writeFile(config, 'attach:\n  tmp-ttl: 1s\n')
    const quiet = { info() {}, warn() {}, error() {} }
    const ref = await createReferenceApp(
      { ATTACH_DATA_DIR: dataDir, ATTACH_JWT_SECRET: SECRET, ATTACH_SIGNING_SECRET: SECRET, ATTACH_CONFIG: config },
      quiet,
    )
    try {
      const partialsBefore = (await walk(dataDir)).filter((f) => f.endsWith('.partial')).length
      await new Promise((r) => setTimeout(r, 1100))
      const swept = await ref.storage.sweep()
      const records = await ref.db.selectFrom('attach_file').select(['saved_dir', 'saved_name']).where('deleted', '=', 0).execute()
      const live = new Set(records.map((r) => `${r.saved_dir}${r.saved_name}`.slice(1)))
      const stored = (await walk(join(dataDir, 'files'))).map((f) => relative(join(dataDir, 'files'), f).split(sep).join('/'))
      expect(stored.filter((k) => !live.has(k))).toEqual([])
      expect(stored.length).toBe(live.size)
      expect([...expected.values()].reduce((n, f) => n + f.length, 0)).toBe(live.size)
      expect((await walk(dataDir)).filter((f) => f.endsWith('.partial'))).toEqual([])
      const dead = await ref.db.selectFrom('attach_blob').select('id').where('ref_count', '<=', 0).execute()
      expect(dead).toEqual([])
      console.info(`crash trials: ${JSON.stringify({ ...outcome, partialsBefore, swept })}`)
    } finally {
      await ref.close()
    }
  }, 170_000)

  it('resumable uploads survive kill -9 in the middle of a PATCH and at each step of their completion', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'attach-crash-tus-'))
    dirs.push(dataDir)
    const auth = { authorization: `Bearer ${await sign('1', SECRET)}`, 'tus-resumable': '1.0.0' }
    const octets = { ...auth, 'content-type': 'application/offset+octet-stream' }
    const servers = successors(dataDir)
    let child = await servers.first()
    const seen: Record<string, number[]> = {}
    try {
      const modes = ['mid-patch', 'tus-assembled', 'tus-kept', 'mid-patch', 'tus-assembled', 'tus-kept'] as const
      for (const [trial, mode] of modes.entries()) {
        const successor = servers.next(trial < modes.length - 1)
        const bytes = randomBytes(4 * 1024 * 1024)
        const meta = `filename ${Buffer.from(`t${trial}.bin`).toString('base64')},refDomain ${Buffer.from('demo').toString('base64')}`
        const created = await fetch(`${child.base}/api/storage/attach/tus`, {
          method: 'POST',
          headers: { ...auth, 'upload-length': String(bytes.length), 'upload-metadata': meta },
        })
        expect(created.status).toBe(201)
        const location = created.headers.get('location')!
        if (mode === 'mid-patch') {
          // Half the bytes, then the client stalls: the server is killed while the PATCH is open.
          const body = new ReadableStream<Uint8Array>({
            start(c) {
              c.enqueue(new Uint8Array(bytes.subarray(0, 2 * 1024 * 1024)))
            },
          })
          const pending = fetch(child.base + location, {
            method: 'PATCH',
            headers: { ...octets, 'upload-offset': '0' },
            body,
            duplex: 'half',
          } as RequestInit).catch(() => undefined)
          await new Promise((r) => setTimeout(r, 300))
          await kill(child)
          await pending
        } else {
          const pending = fetch(child.base + location, {
            method: 'PATCH',
            headers: { ...octets, 'upload-offset': '0', 'x-attach-test-pause': mode },
            body: new Uint8Array(bytes),
          }).catch(() => undefined)
          await child.waitFor(new RegExp(`attach-test-paused ${mode}`))
          await kill(child)
          expect(await pending).toBeUndefined()
        }
        child = await successor
        // The client's retry: HEAD, then the rest from the offset the server reports.
        const head = await fetch(child.base + location, { method: 'HEAD', headers: auth })
        expect(head.status).toBe(200)
        const offset = Number(head.headers.get('upload-offset'))
        seen[mode] = [...(seen[mode] ?? []), offset]
        if (offset < bytes.length) {
          const rest = await fetch(child.base + location, {
            method: 'PATCH',
            headers: { ...octets, 'upload-offset': String(offset) },
            body: new Uint8Array(bytes.subarray(offset)),
          })
          expect(rest.status).toBe(204)
        }
        const saved = await fetch(`${child.base}/api/storage/attach/demo/tus${trial}`, {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({ default: [{ savedName: location.split('/').pop() }] }),
        })
        expect(saved.status).toBe(200)
        const view = await fetch(`${child.base}/assets/storage/attach/view/demo/tus${trial}/default/0`)
        expect(sha256(new Uint8Array(await view.arrayBuffer()))).toBe(sha256(bytes))
      }
    } finally {
      await Promise.all(
        [...running].map(
          (p) =>
            new Promise((r) => {
              p.once('exit', r)
              p.kill('SIGKILL')
            }),
        ),
      )
    }
    // Nothing of the uploads is left in the temporary store.
    expect((await walk(join(dataDir, 'tmp'))).filter((f) => !f.endsWith('.partial'))).toEqual([])
    console.info(`resumable crash trials, offsets seen on resume: ${JSON.stringify(seen)}`)
  }, 120_000)
})
