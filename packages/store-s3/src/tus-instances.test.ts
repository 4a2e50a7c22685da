/**
 * Two instances of the service (each its own PostgreSQL pool, one database) with the temporary area on
 * one s3rver bucket: a tus PATCH of one upload sent to both at the same moment is written by exactly
 * one (204), the other answers 409, and the file holds the winner's bytes; a crashed holder's lease
 * ends by itself. The per-user quota holds across both for presigned uploads, and a commit frees it.
 */
import { spawn } from 'node:child_process'
import { createHmac, randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { hostname, tmpdir } from 'node:os'
import { join } from 'node:path'
import { type AttachHandler, type AttachStorage, createAttachHandler, createAttachStorage, openDatabase } from 'attach-storage'
import type { Kysely } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openTestDatabase, type TestDatabase } from '../../../test/databases.js'
import { S3Store, type S3StoreOptions } from './index.js'
import { startS3rver, type TestS3Server } from './test-server.js'

const SECRET = 'a-test-secret-of-32-characters!!'
const TUS = 'http://x/api/storage/attach/tus'
const MiB = 1024 * 1024
const b64 = (s: string) => Buffer.from(s).toString('base64')

function signJwt(sub: string): string {
  const enc = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  const now = Math.floor(Date.now() / 1000)
  const unsigned = `${enc({ alg: 'HS256', typ: 'JWT' })}.${enc({ sub, iat: now, exp: now + 600 })}`
  return `${unsigned}.${createHmac('sha256', SECRET).update(unsigned).digest('base64url')}`
}

/** The bytes as a stream of 16 KiB chunks, one per macrotask: a client sending at network pace. */
function paced(bytes: Buffer): ReadableStream<Uint8Array> {
  let at = 0
  return new ReadableStream({
    async pull(controller) {
      await new Promise((r) => setImmediate(r))
      if (at >= bytes.length) return controller.close()
      controller.enqueue(new Uint8Array(bytes.subarray(at, at + 16 * 1024)))
      at += 16 * 1024
    },
  })
}

describe('tus across two instances on PostgreSQL, temporary area on s3rver', () => {
  let s3: TestS3Server
  let shared: TestDatabase
  let secondPool: Kysely<any>
  let dir: string
  let inside: S3Store
  const storages: AttachStorage[] = []
  const handlers: AttachHandler[] = []
  const auth = { authorization: `Bearer ${signJwt('7')}` }

  beforeAll(async () => {
    s3 = await startS3rver('attach-tus-instances')
    shared = await openTestDatabase('postgres')
    secondPool = await openDatabase({ type: 'postgres', url: shared.location })
    dir = await mkdtemp(join(tmpdir(), 'attach-tus-instances-'))
    const settings = { ...s3.settings, prefix: 'shared/' }
    inside = new S3Store('inside', settings as unknown as S3StoreOptions)
    for (const [i, db] of [shared.db, secondPool].entries()) {
      const storage = await createAttachStorage({
        config: {
          directory: { baseDir: join(dir, `files-${i}`), tmpDir: join(dir, `tmp-${i}`) },
          stores: { s3: settings },
          defaultStore: 's3',
          tmpStore: 's3',
          resumable: { enabled: true },
          upload: { maxFileSize: 4 * MiB, userQuota: 3 * MiB },
          domains: { demo: { categories: { default: {} } } },
        },
        db,
        jwt: { secret: SECRET },
        logger: { info: () => {}, warn: () => {}, error: () => {} },
      })
      storages.push(storage)
      handlers.push(createAttachHandler(storage))
    }
  })
  afterAll(async () => {
    for (const s of storages) await s.close()
    await inside?.close()
    await secondPool?.destroy()
    await shared?.cleanup()
    await s3?.close()
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  const createUpload = async (length: number): Promise<string> => {
    const res = await handlers[0]!.fetch(
      new Request(TUS, {
        method: 'POST',
        headers: {
          ...auth,
          'tus-resumable': '1.0.0',
          'upload-length': String(length),
          'upload-metadata': `filename ${b64('race.bin')},refDomain ${b64('demo')}`,
        },
      }),
    )
    expect(res.status).toBe(201)
    return res.headers.get('location')!.split('/').pop()!
  }
  const patch = (h: AttachHandler, name: string, bytes: Buffer) =>
    h.fetch(
      new Request(`${TUS}/${name}`, {
        method: 'PATCH',
        headers: {
          ...auth,
          'tus-resumable': '1.0.0',
          'content-type': 'application/offset+octet-stream',
          'upload-offset': '0',
          'content-length': String(bytes.length),
        },
        body: paced(bytes),
        duplex: 'half',
      } as RequestInit),
    )
  const stored = async (name: string) => {
    const chunks: Buffer[] = []
    for await (const c of await inside.get(`_tmp/${name}`)) chunks.push(c as Buffer)
    return Buffer.concat(chunks)
  }

  it('10 rounds of one PATCH to each instance at once: exactly one 204, the other 409, the file holds the winner’s bytes', async () => {
    const L = 256 * 1024
    for (let round = 0; round < 10; round++) {
      const name = await createUpload(L)
      const bodies = [randomBytes(L), randomBytes(L)]
      const answers = await Promise.all(handlers.map((h, i) => patch(h, name, bodies[i]!)))
      const statuses = answers.map((r) => r.status)
      expect(statuses.sort(), `round ${round}`).toEqual([204, 409])
      const loser = answers.find((r) => r.status === 409)!
      expect(await loser.json()).toEqual({ code: 'conflict', message: expect.any(String) })
      const winner = bodies[answers.findIndex((r) => r.status === 204)]!
      expect((await stored(name)).equals(winner), `round ${round}`).toBe(true)
      // Done with it: the termination frees its quota.
      const gone = await handlers[round % 2]!.fetch(
        new Request(`${TUS}/${name}`, { method: 'DELETE', headers: { ...auth, 'tus-resumable': '1.0.0' } }),
      )
      expect(gone.status).toBe(204)
    }
  })

  it('a crashed holder’s lease (another host) blocks the upload until it ends, then the PATCH goes through', async () => {
    const name = await createUpload(1000)
    const pending = storages[1]!.repository.pending
    const until = new Date(Date.now() + 1500).toISOString()
    expect(await pending.takeLease(name, 'crashed-instance', until, new Date().toISOString())).toBe('taken')
    const bytes = randomBytes(1000)
    expect((await patch(handlers[0]!, name, bytes)).status).toBe(409)
    await new Promise((r) => setTimeout(r, 1600))
    const res = await patch(handlers[0]!, name, bytes)
    expect(res.status).toBe(204)
    expect(res.headers.get('upload-offset')).toBe('1000')
    expect((await stored(name)).equals(bytes)).toBe(true)
  })

  it('a lease held by a process of this host that is gone is taken over at once', async () => {
    const name = await createUpload(1000)
    const child = spawn(process.execPath, ['-e', ''])
    const pid = child.pid!
    await new Promise((r) => child.once('exit', r))
    const pending = storages[1]!.repository.pending
    const until = new Date(Date.now() + 3600_000).toISOString()
    expect(await pending.takeLease(name, `${hostname()}|${pid}|gone`, until, new Date().toISOString())).toBe('taken')
    // A live holder (this very process, another request) keeps it.
    const mine = await createUpload(1000)
    expect(await pending.takeLease(mine, `${hostname()}|${process.pid}|other`, until, new Date().toISOString())).toBe('taken')
    const bytes = randomBytes(1000)
    expect((await patch(handlers[0]!, mine, bytes)).status).toBe(409)
    const res = await patch(handlers[0]!, name, bytes)
    expect(res.status).toBe(204)
    expect((await stored(name)).equals(bytes)).toBe(true)
  })

  it('presigned uploads count on both instances: 413 quota-exceeded past 3 MiB, the commit frees it', async () => {
    await storages[0]!.sweep()
    const used = await storages[0]!.repository.pending.used('7', new Date().toISOString())
    const presign = (h: AttachHandler, size: number) =>
      h.fetch(
        new Request('http://x/api/storage/attach/presign', {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({ refDomain: 'demo', fileName: 'direct.bin', size }),
        }),
      )
    const big = 2 * MiB
    const first = await presign(handlers[0]!, big)
    expect(first.status).toBe(200)
    const ticket = await first.json()
    const over = await presign(handlers[1]!, 3 * MiB - used - big + 1)
    expect(over.status).toBe(413)
    expect(await over.json()).toEqual({ code: 'quota-exceeded', message: expect.any(String) })
    const bytes = randomBytes(big)
    expect((await fetch(ticket.uploadUrl, { method: ticket.method, headers: ticket.headers, body: bytes })).status).toBe(200)
    const saved = await handlers[1]!.fetch(
      new Request('http://x/api/storage/attach/demo/77', {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ default: [{ savedName: ticket.name }] }),
      }),
    )
    expect(saved.status).toBe(200)
    expect((await presign(handlers[1]!, big)).status).toBe(200)
  })
})
