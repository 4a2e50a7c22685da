/**
 * kill -9 between the host's insert and its commit: a reference server child saves a board post (the
 * post inserted, then its attachments committed in the same transaction) and is killed at the test-only
 * pause point after the first attachment's record was written, before the transaction commits. Then, on
 * the same data directory and database (SQLite, PostgreSQL, MySQL): no post, no record, no blob row; the sweep removes the copy the
 * dead transaction placed and keeps the temporary files; the same request succeeds; nothing is orphaned.
 */
import { type ChildProcessWithoutNullStreams, spawn } from 'node:child_process'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join, relative, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createReferenceApp } from '../src/app.js'
import { openTestDatabase } from '../../../test/databases.js'
import { bundleServer, sign, walk } from './helpers.js'

const here = dirname(fileURLToPath(import.meta.url))
const SECRET = 'board-crash-test-secret-0123456789'
const bundle = join(here, '..', '..', '..', 'node_modules', '.cache', 'attach-crash-test', `board-server-${process.pid}.mjs`)

/** Starts the bundled reference server; resolves with its base URL once it listens, and a wait for a stdout line. */
async function startChild(env: Record<string, string>) {
  const proc: ChildProcessWithoutNullStreams = spawn(process.execPath, [bundle], {
    cwd: join(here, '..'),
    env: { ...process.env, PORT: '0', ATTACH_JWT_SECRET: SECRET, ATTACH_SIGNING_SECRET: SECRET, ATTACH_TEST_PAUSE: '1', ...env },
    stdio: ['pipe', 'pipe', 'pipe'],
  })
  let out = ''
  const exited = new Promise((resolve) => proc.once('exit', resolve))
  const waitFor = (re: RegExp) =>
    new Promise<void>((resolve, reject) => {
      const check = () => {
        if (!re.test(out)) return
        proc.stdout.off('data', check)
        resolve()
      }
      proc.stdout.on('data', (d) => {
        out += d
      })
      proc.stderr.on('data', (d) => {
        out += d
      })
      proc.stdout.on('data', check)
      check()
      void exited.then(() => reject(new Error(`the server exited before ${re}: ${out}`)))
    })
  await waitFor(/listening on http:\/\/127\.0\.0\.1:\d+/)
  const port = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)![1]
  return { proc, base: `http://127.0.0.1:${port}`, waitFor, exited }
}

describe('a board save killed with -9 inside its transaction', () => {
  const dirs: string[] = []
  beforeAll(async () => {
    await bundleServer(bundle)
  })
  afterAll(async () => {
    for (const d of dirs) await rm(d, { recursive: true, force: true })
    await rm(bundle, { force: true })
  })

  /** A fresh PostgreSQL or MySQL database for the servers to open by URL. */
  const serverDatabase = async (dialect: 'postgres' | 'mysql') => {
    const t = await openTestDatabase(dialect)
    await t.db.destroy()
    return { url: t.location, drop: () => t.cleanup() }
  }

  for (const dialect of ['sqlite', 'postgres', 'mysql'] as const) {
    it(`leaves no post, no record and committable temporary files; the retry succeeds, nothing orphaned (${dialect})`, async () => {
      const dataDir = await mkdtemp(join(tmpdir(), 'attach-board-crash-'))
      dirs.push(dataDir)
      const pg = dialect === 'sqlite' ? undefined : await serverDatabase(dialect)
      const env: Record<string, string> = { ATTACH_DATA_DIR: dataDir, ...(pg ? { ATTACH_DATABASE_URL: pg.url } : {}) }
      const auth = { authorization: `Bearer ${await sign('1', SECRET)}` }
      try {
        const child = await startChild(env)
        const names: string[] = []
        try {
          for (const i of [1, 2]) {
            const fd = new FormData()
            fd.set('refDomain', 'board')
            fd.set('file', new Blob([`attachment ${i} of the post`]), `f${i}.txt`)
            const res = await fetch(`${child.base}/api/storage/attach/tmp`, { method: 'POST', body: fd, headers: auth })
            expect(res.status).toBe(200)
            names.push((await res.json()).files[0].name)
          }
          const body = JSON.stringify({
            title: 'killed',
            attachContainer: { refDomain: 'board', default: names.map((savedName) => ({ savedName })) },
          })
          void fetch(`${child.base}/board`, {
            method: 'POST',
            body,
            headers: { ...auth, 'content-type': 'application/json', 'x-attach-test-pause': 'recorded' },
          }).catch(() => undefined)
          // The post is inserted and the first record written, in the transaction: kill -9 now.
          await child.waitFor(/attach-test-paused recorded/)
        } finally {
          child.proc.kill('SIGKILL')
          await child.exited
        }

        const quiet = { info() {}, warn() {}, error() {} }
        const ref = await createReferenceApp({ ...env, ATTACH_JWT_SECRET: SECRET, ATTACH_SIGNING_SECRET: SECRET }, quiet)
        try {
          const count = async (table: string) => (await ref.db.selectFrom(table).select('id').execute()).length
          expect(await count('board')).toBe(0)
          expect(await count('attach_file')).toBe(0)
          expect(await count('attach_blob')).toBe(0)
          const tmpFiles = async () => (await walk(join(dataDir, 'tmp'))).map((f) => relative(join(dataDir, 'tmp'), f).split(sep).join('/'))
          const stored = async () =>
            (await walk(join(dataDir, 'files'))).map((f) => relative(join(dataDir, 'files'), f).split(sep).join('/'))
          for (const n of names) expect(await tmpFiles()).toEqual(expect.arrayContaining([`_tmp/${n}`, `_tmp/${n}.meta.json`]))
          // The dead transaction's copy is there, its place remembered; the sweep removes it and keeps the temporary files.
          expect((await stored()).filter((k) => k.endsWith(names[0]!))).toHaveLength(1)
          await ref.storage.sweep()
          expect(await stored()).toEqual([])
          for (const n of names) expect(await tmpFiles()).toContain(`_tmp/${n}`)

          // The same request, again: the post and both attachments.
          const retry = await ref.app.fetch(
            new Request('http://x/board', {
              method: 'POST',
              body: JSON.stringify({
                title: 'killed',
                attachContainer: { refDomain: 'board', default: names.map((savedName) => ({ savedName })) },
              }),
              headers: { ...auth, 'content-type': 'application/json' },
            }),
          )
          const post = await retry.json()
          expect(retry.status, JSON.stringify(post)).toBe(201)
          expect(post.attachContainer.default.map((r: { savedName: string }) => r.savedName)).toEqual(names)
          await ref.storage.sweep()
          const records = await ref.db.selectFrom('attach_file').select(['saved_dir', 'saved_name']).where('deleted', '=', 0).execute()
          const live = records.map((r) => `${r.saved_dir}${r.saved_name}`.slice(1)).sort()
          expect(await stored()).toEqual(live)
          expect(live).toHaveLength(2)
          expect(await tmpFiles()).toEqual([])
          expect(await ref.db.selectFrom('attach_blob').select('id').where('ref_count', '<=', 0).execute()).toEqual([])
          expect(await count('board')).toBe(1)
        } finally {
          await ref.close()
        }
      } finally {
        await pg?.drop()
      }
    }, 90_000)
  }
})
