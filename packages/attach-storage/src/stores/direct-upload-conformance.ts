import { createHash, randomBytes } from 'node:crypto'
import { expect } from 'vitest'
import type { AttachHandler } from '../http/handler.js'

/** What {@link expectDirectUploads} needs: a service whose temporary store is the store under test. */
export interface DirectUploadsOptions {
  /**
   * The handlers of a service whose `tmp-store` is the store under test, with domain `refDomain` holding
   * categories `default` (no filters) and `image` (the `image` filter), and `upload.max-file-size` of
   * `maxFileSize`.
   */
  handler: AttachHandler
  /** The `Authorization` header of the JSON group (one user). */
  authorization: string
  /** The `Authorization` header of another user. */
  otherAuthorization: string
  /** The service's `upload.max-file-size` in bytes (at least 64 KiB). */
  maxFileSize: number
  /** Every key in the temporary store: checks that a refused upload leaves nothing. */
  keys(): Promise<string[]>
  /**
   * True when the store itself refuses a body longer than declared (S3 signs the length); false when
   * it takes it and the commit refuses it (Azure).
   */
  lengthSignedByStore: boolean
  /**
   * True when the store refuses another write through an address whose upload was committed (the
   * committed upload leaves a tombstone at its key, and the address is create-only: Azure's `c` SAS,
   * which Azurite enforces; S3's signed `If-None-Match: *`, which real S3 honours and s3rver 3.7.1
   * ignores). Either way what such a write sends is never committed.
   */
  rewriteRefusedByStore: boolean
  /** Moves the service's clock past `tmp-ttl` and runs its sweep (`storage.sweep()`); checked last. */
  expire(): Promise<void>
  /** @default 'demo' */
  refDomain?: string
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')

/** A 1×1 PNG. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64')

/**
 * The end-to-end check of a store's `presignPut` behind `POST {api}/attach/presign`, for its package's
 * tests: a file sent with a plain `fetch` to the answered address and committed with only its
 * `savedName` becomes a record whose name, size, type and sha256 come from the service; a presigned
 * object that is missing, longer than declared, of a refused type, committed by another user, or named
 * with `..` fails its entry with the right code and leaves nothing; a size above the limit answers 413
 * at presign; bad bodies answer 400 naming the field; unclaimed uploads go with the sweep.
 */
export async function expectDirectUploads(options: DirectUploadsOptions): Promise<void> {
  const { handler, authorization, otherAuthorization, maxFileSize, refDomain = 'demo' } = options
  const api = (path: string, body: unknown, auth = authorization) =>
    handler.fetch(
      new Request(`http://x/api/storage/${path}`, {
        method: 'POST',
        headers: { authorization: auth, 'content-type': 'application/json' },
        body: typeof body === 'string' ? body : JSON.stringify(body),
      }),
    )
  const presign = async (body: Record<string, unknown>) => {
    const res = await api('attach/presign', { refDomain, ...body })
    const answer = (await res.json()) as {
      name: string
      uploadUrl: string
      method: string
      headers: Record<string, string>
      expiresAt: string
    }
    expect(res.status, JSON.stringify(answer)).toBe(200)
    return answer
  }
  const send = (p: { uploadUrl: string; method: string; headers: Record<string, string> }, bytes: Uint8Array) =>
    fetch(p.uploadUrl, { method: p.method, headers: p.headers, body: new Uint8Array(bytes) })
  const commit = async (refKey: string, category: string, entry: Record<string, unknown>, auth = authorization) => {
    const res = await api(`attach/${refDomain}/${refKey}`, { [category]: [entry] }, auth)
    return { status: res.status, body: (await res.json()) as Record<string, any> }
  }
  const failed = async (refKey: string, category: string, entry: Record<string, unknown>, code: string, auth = authorization) => {
    const { status, body } = await commit(refKey, category, entry, auth)
    expect(status, JSON.stringify(body)).toBe(500)
    expect(body.code).toBe('attach-save-failure')
    expect(body.failures).toEqual([expect.objectContaining({ refCategory: category, index: 0, code })])
  }
  const leftFor = async (name: string) => (await options.keys()).filter((k) => k.startsWith('_tmp/') && k.includes(name))

  // Sent by the client, committed with nothing but its savedName: the service fills in the rest.
  const bytes = Buffer.concat([PNG, randomBytes(1000)])
  const p = await presign({ refCategory: 'image', fileName: 'photo.png', size: bytes.length, type: 'image/png' })
  expect(p.method).toBe('PUT')
  expect(p.name).toMatch(/^[0-9a-f-]{36}\.png$/)
  expect(Date.parse(p.expiresAt)).toBeGreaterThan(Date.now())
  expect((await send(p, bytes)).ok).toBe(true)
  const saved = await commit('1', 'image', { savedName: p.name })
  expect(saved.status, JSON.stringify(saved.body)).toBe(200)
  const record = saved.body.attachList.find((r: { savedName: string }) => r.savedName === p.name)
  expect(record).toMatchObject({ displayName: 'photo.png', fileSize: bytes.length, fileType: 'image/png', createdBy: expect.anything() })
  const view = await handler.fetch(new Request(`http://x/assets/storage/attach/view/${record.id}`))
  const served = view.status === 302 ? await fetch(view.headers.get('location')!) : view
  expect(sha256(new Uint8Array(await served.arrayBuffer()))).toBe(sha256(bytes))
  // Only the tombstone is left at the upload's key, and the address writes nothing more (where the
  // store enforces it); what it sends is never committed.
  expect(await leftFor(p.name)).toEqual([`_tmp/_up/${p.name}`])
  const again = await send(p, Buffer.from('<html><script>alert(1)</script></html>'.padEnd(bytes.length, ' ')))
  expect(again.ok, `a second write through a committed upload's address answered ${again.status}`).toBe(!options.rewriteRefusedByStore)
  await failed('1b', 'image', { savedName: p.name }, 'not-found')

  // Nothing was sent: the entry fails, nothing is saved.
  const missing = await presign({ fileName: 'never.txt', size: 10 })
  await failed('2', 'default', { savedName: missing.name }, 'not-found')

  // More bytes than declared: refused by the store (its signature fixes the length), else at commit.
  const short = await presign({ fileName: 'short.txt', size: 10 })
  const longer = await send(short, Buffer.from('twenty bytes of text'))
  expect(longer.ok).toBe(!options.lengthSignedByStore)
  await failed('2', 'default', { savedName: short.name }, options.lengthSignedByStore ? 'not-found' : 'too-large')
  if (!options.lengthSignedByStore) expect(await leftFor(short.name)).toEqual([])

  // Declared above the limit: 413 at presign, nothing written.
  const before = (await options.keys()).length
  const big = await api('attach/presign', { refDomain, fileName: 'big.bin', size: maxFileSize + 1 })
  expect(big.status).toBe(413)
  expect(await big.json()).toMatchObject({ code: 'too-large' })
  expect((await options.keys()).length).toBe(before)

  // A text file named .png into the image category: refused by its filter at commit, nothing left.
  const fake = await presign({ refCategory: 'image', fileName: 'fake.png', size: 11 })
  expect((await send(fake, Buffer.from('not a photo'))).ok).toBe(true)
  await failed('3', 'image', { savedName: fake.name }, 'type')
  expect(await leftFor(fake.name)).toEqual([])

  // Another user's upload, and names that climb: the entry fails, the upload stays its owner's.
  const mine = await presign({ fileName: 'mine.txt', size: 5 })
  expect((await send(mine, Buffer.from('hello'))).ok).toBe(true)
  await failed('4', 'default', { savedName: mine.name }, 'forbidden', otherAuthorization)
  for (const climbing of [`../${mine.name}`, `_up/../${mine.name}`, `${mine.name}/..`, '../../etc/passwd']) {
    await failed('4', 'default', { savedName: climbing }, 'bad-request')
  }
  const own = await commit('4', 'default', { savedName: mine.name, displayName: 'renamed.txt' })
  expect(own.status).toBe(200)
  expect(own.body.attachList[0]).toMatchObject({ displayName: 'renamed.txt', fileSize: 5, fileType: 'text/plain' })

  // Bad bodies: 400 naming the field.
  const bad: Array<[unknown, RegExp]> = [
    [[], /^body: The body must be a JSON object/],
    [{ fileName: 'a.txt', size: 1 }, /^body\.refDomain: refDomain is required/],
    [{ refDomain, size: 1 }, /^body\.fileName: fileName is required/],
    [{ refDomain, fileName: '', size: 1 }, /^body\.fileName: fileName must be a non-empty file name/],
    [{ refDomain, fileName: 'a.txt' }, /^body\.size: size is required/],
    [{ refDomain, fileName: 'a.txt', size: -1 }, /^body\.size: size must be/],
    [{ refDomain, fileName: 'a.txt', size: 1.5 }, /^body\.size: size must be/],
    [{ refDomain, fileName: 'a.txt', size: '1' }, /^body\.size: size must be/],
    [{ refDomain, fileName: 'a.txt', size: 1, type: 'text html' }, /^body\.type: type must be a media type/],
  ]
  for (const [body, message] of bad) {
    const res = await api('attach/presign', body)
    expect(res.status, JSON.stringify(body)).toBe(400)
    const answer = (await res.json()) as { code: string; message: string }
    expect(answer.code).toBe('bad-request')
    expect(answer.message).toMatch(message)
  }
  const unknown = await api('attach/presign', { refDomain: 'no-such-domain', fileName: 'a.txt', size: 1 })
  expect(unknown.status).toBe(400)
  expect(((await unknown.json()) as { code: string }).code).toBe('unknown-domain')
  const anonymous = await handler.fetch(
    new Request('http://x/api/storage/attach/presign', { method: 'POST', body: JSON.stringify({ refDomain, fileName: 'a', size: 1 }) }),
  )
  expect(anonymous.status).toBe(401)

  // Unclaimed uploads, sent or not, expire with the sweep: nothing is left, and they cannot be committed.
  const unclaimed = [await presign({ fileName: 'sent.txt', size: 4 }), await presign({ fileName: 'unsent.txt', size: 4 })]
  expect((await send(unclaimed[0]!, Buffer.from('sent'))).ok).toBe(true)
  expect(await leftFor(unclaimed[0]!.name)).toHaveLength(2)
  await options.expire()
  for (const u of unclaimed) {
    expect(await leftFor(u.name)).toEqual([])
    await failed('5', 'default', { savedName: u.name }, 'not-found')
  }
}
