/**
 * `upload.userQuota`: one user's pending uploads (temporary files, unfinished tus uploads) stop at the
 * quota with 413 `quota-exceeded`, other users go on; a commit, a termination, a deletion and an expiry
 * free it; two instances on one PostgreSQL database share it, and parallel requests never pass it. The
 * presigned path is tested on s3rver (packages/store-s3/src/tus-instances.test.ts).
 */
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Kysely } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openTestDatabase, type TestDatabase } from '../../../../test/databases.js'
import { runCli } from '../testing/cli-kit.js'
import { openDataDir } from '../testing/cli-seed.js'
import { type Kit, makeKit } from '../testing/handler-kit.js'
import { createPrometheusMetrics } from '../metrics/index.js'
import { openDatabase } from '../repository/database.js'

const API = '/api/storage'
const TUS = `${API}/attach/tus`
const MiB = 1024 * 1024
const b64 = (s: string) => Buffer.from(s).toString('base64')

/** A tus creation of `length` bytes (no bytes sent). */
const create = (kit: Kit, length: number | undefined, user = '7') =>
  kit.call(TUS, {
    method: 'POST',
    user,
    headers: {
      'tus-resumable': '1.0.0',
      ...(length === undefined ? { 'upload-defer-length': '1' } : { 'upload-length': String(length) }),
      'upload-metadata': `filename ${b64('big.bin')},refDomain ${b64('demo')}`,
    },
  })

async function refused(res: Response): Promise<void> {
  expect(res.status).toBe(413)
  const body = await res.json()
  expect(body).toEqual({
    code: 'quota-exceeded',
    message: expect.stringMatching(/of your 1\.0 KiB|of your 1024\.0 MiB|of your 1000 bytes/),
  })
}

for (const dialect of ['sqlite', 'postgres', 'mysql'] as const) {
  describe(`tus creations against the quota (${dialect})`, () => {
    let kit: Kit
    const metrics = createPrometheusMetrics()
    beforeAll(async () => {
      kit = await makeKit(dialect, {
        instrumentation: metrics.instrumentation,
        config: { upload: { maxFileSize: '200MB', userQuota: '1GB' }, resumable: { enabled: true } },
      })
    })
    afterAll(() => kit.cleanup())

    it('answers 201 ten times for 100 MiB, 413 quota-exceeded the 11th; another user still gets 201; termination frees', async () => {
      const made: string[] = []
      for (let i = 0; i < 10; i++) {
        const res = await create(kit, 100 * MiB)
        expect(res.status).toBe(201)
        made.push(res.headers.get('location')!)
      }
      const eleventh = await create(kit, 100 * MiB)
      expect(eleventh.status).toBe(413)
      expect(await eleventh.json()).toEqual({ code: 'quota-exceeded', message: expect.stringContaining('1000.0 MiB of your 1024.0 MiB') })
      expect(eleventh.headers.get('tus-resumable')).toBe('1.0.0')
      // A deferred length is refused only once the user holds the quota: 24 MiB are left.
      expect((await create(kit, 25 * MiB)).status).toBe(413)
      expect((await create(kit, 24 * MiB)).status).toBe(201)
      expect((await create(kit, undefined)).status).toBe(413)
      expect((await create(kit, 100 * MiB, '8')).status).toBe(201)

      const gone = await kit.call(made[0]!, { method: 'DELETE', headers: { 'tus-resumable': '1.0.0' } })
      expect(gone.status).toBe(204)
      expect((await create(kit, 100 * MiB)).status).toBe(201)
      expect((await create(kit, 1)).status).toBe(413)
      expect(await metrics.registry.getSingleMetricAsString('attach_storage_quota_refusals_total')).toContain(
        'attach_storage_quota_refusals_total{kind="tus"} 4',
      )
    })

    it('of 20 creations of 100 MiB at once by one user, exactly as many pass as the quota holds', async () => {
      const answers = await Promise.all(Array.from({ length: 20 }, () => create(kit, 100 * MiB, '50')))
      expect(answers.filter((r) => r.status === 201)).toHaveLength(10)
      expect(answers.filter((r) => r.status === 413)).toHaveLength(10)
      expect(await kit.storage.repository.pending.used('50', new Date().toISOString())).toBe(1000 * MiB)
    })
  })
}

describe('multipart temporary uploads against the quota', () => {
  let kit: Kit
  let clock = Date.parse('2026-03-01T10:00:00Z')
  const refusals: string[] = []
  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      now: () => new Date(clock),
      instrumentation: { quotaRefusal: (kind) => refusals.push(kind) },
      config: { upload: { userQuota: 1000 }, tmpTtl: '1h' },
    })
  })
  afterAll(() => kit.cleanup())

  const upload = (size: number, user = '7') =>
    kit.upload(
      `${API}/attach/tmp`,
      [
        ['refDomain', 'demo'],
        ['file', new Blob([new Uint8Array(size).fill(65)]), 'a.txt'],
      ],
      user,
    )
  const tmpFiles = async () => (await kit.files(kit.tmpDir)).filter((f) => !f.endsWith('.meta.json'))

  it('refuses the file that passes the quota (removing it), then any upload at the quota before its body; a commit and an expiry free it', async () => {
    const first = (await (await upload(600)).json()).files[0]
    expect(first.size).toBe(600)
    await refused(await upload(600))
    expect(await tmpFiles()).toEqual([`_tmp/${first.name}`])
    const second = (await (await upload(400)).json()).files[0]
    // At the quota: refused before anything is read, whatever its size.
    await refused(await upload(1))
    expect((await tmpFiles()).sort()).toEqual([`_tmp/${first.name}`, `_tmp/${second.name}`].sort())
    expect((await upload(900, '8')).status).toBe(200)
    expect(refusals).toEqual(['tmp', 'tmp'])

    // The commit frees the 600 bytes.
    const saved = await kit.call(`${API}/attach/demo/31`, {
      method: 'POST',
      body: JSON.stringify({ default: [{ savedName: first.name, displayName: 'a.txt' }] }),
    })
    expect(saved.status).toBe(200)
    await refused(await upload(601))
    expect((await upload(600)).status).toBe(200)
    await refused(await upload(1))

    // An hour later every reservation has expired: the user uploads again, and the sweep forgets the rows.
    clock += 3600_000 + 1
    expect((await upload(1000)).status).toBe(200)
    const pending = kit.storage.repository.pending
    expect(await pending.find(second.name)).toMatchObject({ kind: 'tmp', bytes: 400 })
    await kit.storage.sweep()
    expect(await pending.find(second.name)).toBeUndefined()
    expect(await pending.used('7', new Date(clock).toISOString())).toBe(1000)
  })

  it('a refused file (its filters) and a deleted temporary file hold nothing', async () => {
    clock += 3600_000 + 1
    const res = await kit.upload(
      `${API}/attach/tmp`,
      [
        ['refDomain', 'demo'],
        ['refCategory', 'image'],
        ['file', new Blob([new Uint8Array(900)]), 'no.png'],
      ],
      '9',
    )
    expect((await res.json()).files[0].error.code).toBe('type')
    expect(await kit.storage.repository.pending.used('9', new Date(clock).toISOString())).toBe(0)
    const item = (await (await upload(900, '9')).json()).files[0]
    await kit.storage.discardReceived([{ name: item.name } as never])
    expect((await upload(900, '9')).status).toBe(200)
  })

  it('stats --quota reports the pending bytes per user', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'attach-quota-cli-'))
    try {
      const { db, repo } = await openDataDir(dataDir)
      const later = new Date(Date.now() + 3600_000).toISOString()
      const now = new Date().toISOString()
      await repo.pending.reserve({ name: 'a.bin', userKey: '7', kind: 'tus', bytes: 3 * MiB, expiresDt: later }, 0, now)
      await repo.pending.reserve({ name: 'b.bin', userKey: '7', kind: 'tmp', bytes: 1000, expiresDt: later }, 0, now)
      await repo.pending.reserve({ name: 'c.bin', userKey: 'eve\u001b[2J', kind: 'presign', bytes: 10, expiresDt: later }, 0, now)
      await repo.pending.reserve({ name: 'd.bin', userKey: '8', kind: 'tmp', bytes: 5000, expiresDt: now }, 0, now)
      await db.destroy()
      const json = await runCli(dataDir, ['stats', '--quota', '--json'])
      expect(json.code).toBe(0)
      expect(json.json()).toEqual({
        quota: 2 * 1024 * MiB,
        users: [
          { userKey: '7', uploads: 2, bytes: 3 * MiB + 1000 },
          { userKey: 'eve\u001b[2J', uploads: 1, bytes: 10 },
        ],
      })
      const text = await runCli(dataDir, ['stats', '--quota'])
      expect(text.stdout).toContain(`7\t2\t${3 * MiB + 1000} (`)
      expect(text.stdout).not.toContain('\u001b')
    } finally {
      await rm(dataDir, { recursive: true, force: true })
    }
  })
})

describe('two instances on one PostgreSQL database, parallel creations of one user', () => {
  let shared: TestDatabase
  let secondPool: Kysely<any>
  let a: Kit
  let b: Kit
  beforeAll(async () => {
    shared = await openTestDatabase('postgres')
    const config = { upload: { maxFileSize: '200MB', userQuota: '1GB' }, resumable: { enabled: true } }
    a = await makeKit('sqlite', { db: shared.db, config })
    // The second instance opens its own pool on the same database.
    secondPool = await openDatabase({ type: 'postgres', url: shared.location })
    b = await makeKit('sqlite', { db: secondPool, config })
  })
  afterAll(async () => {
    await a?.cleanup()
    await b?.cleanup()
    await secondPool?.destroy()
    await shared?.cleanup()
  })

  it('of 30 creations of 100 MiB at once, half on each instance, exactly 10 answer 201 and the rest 413', async () => {
    const answers = await Promise.all(Array.from({ length: 30 }, (_, i) => create(i % 2 ? a : b, 100 * MiB, '42')))
    const statuses = answers.map((r) => r.status)
    expect(statuses.filter((s) => s === 201)).toHaveLength(10)
    expect(statuses.filter((s) => s === 413)).toHaveLength(20)
    const used = await a.storage.repository.pending.used('42', new Date().toISOString())
    expect(used).toBe(1000 * MiB)
    // And the other instance sees the same quota.
    expect((await create(b, 100 * MiB, '42')).status).toBe(413)
    expect((await create(a, 100 * MiB, '43')).status).toBe(201)
  })
})
