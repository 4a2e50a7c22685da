import { createHash, createHmac, randomBytes } from 'node:crypto'
import { IncomingMessage } from 'node:http'
import type { Dirent } from 'node:fs'
import { mkdtemp, readdir, readFile, rm } from 'node:fs/promises'
import { createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { inspect } from 'node:util'
import {
  DeleteObjectCommand,
  HeadObjectCommand,
  ListMultipartUploadsCommand,
  PutObjectCommand,
  S3Client,
  type S3ClientConfig,
} from '@aws-sdk/client-s3'
import { createAttachHandler, createAttachStorage, openDatabase, type Store } from 'attach-storage'
import { describeStoreConformance, expectRedirectServing, generatedStream } from 'attach-storage/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createStore, S3Store, type S3StoreOptions } from './index.js'
import { fileExists, S3RVER_ACCESS_KEY, S3RVER_SECRET_KEY, startS3rver, type TestS3Server } from './test-server.js'

const MiB = 1024 * 1024

let s3: TestS3Server
beforeAll(async () => {
  s3 = await startS3rver()
})
afterAll(async () => {
  await s3?.close()
})

/** Store options on the shared s3rver, with overrides. */
const on = (overrides: Record<string, unknown> = {}): S3StoreOptions => ({ ...s3.settings, ...overrides }) as unknown as S3StoreOptions

describeStoreConformance('S3Store', async () => ({ store: new S3Store('s3', on()) }), { largeSize: 32 * MiB })

describeStoreConformance(
  'S3Store under a prefix (created by createStore)',
  async () => ({ store: await createStore('s3-prefixed', { ...s3.settings, prefix: 'attach/' }) }),
  { largeSize: 12 * MiB },
)

// ----------------------------------------------------------------------------------------------------

describe('S3Store on s3rver', () => {
  const stores: Store[] = []
  const make = (overrides: Record<string, unknown> = {}): S3Store => {
    const store = new S3Store('s3', on(overrides))
    stores.push(store)
    return store
  }
  const run = `s3-${randomBytes(4).toString('hex')}`
  afterAll(async () => {
    for (const store of stores) await store.close()
  })

  it('stores exactly the bytes put: no aws-chunked framing, single and multipart', async () => {
    const store = make()
    expect(await store.client.config.requestChecksumCalculation()).toBe('WHEN_REQUIRED')
    expect(await store.client.config.responseChecksumValidation()).toBe('WHEN_REQUIRED')
    const cases: Array<[string, Buffer, (b: Buffer) => Readable | Uint8Array, number | undefined]> = [
      ['bytes', randomBytes(1000), (b) => b, undefined],
      ['stream-unknown-size', randomBytes(300_001), (b) => chunked(b, 10_000), undefined],
      ['stream-with-size', randomBytes(2 * MiB + 7), (b) => chunked(b, 64 * 1024), 2 * MiB + 7],
      ['multipart', randomBytes(12 * MiB + 5), (b) => chunked(b, MiB), undefined],
    ]
    for (const [label, bytes, body, size] of cases) {
      const key = `${run}/exact/${label}.bin`
      expect(await store.put(key, body(bytes), { size, contentType: 'application/x-test' })).toEqual({ size: bytes.length })
      const onDisk = await readFile(s3.objectFile(key))
      expect(onDisk.length, label).toBe(bytes.length)
      expect(sha256(onDisk), label).toBe(sha256(bytes))
      const head = await store.client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: key }))
      expect(head.ContentType, label).toBe('application/x-test')
    }
  })

  it('uploads a 21 MiB stream of unknown size as a multipart upload, in 8 MiB parts', async () => {
    const store = make()
    const log = record(store.client)
    const key = `${run}/multipart/big.bin`
    const source = generatedStream(21 * MiB + 3, { chunkSize: MiB, defer: true })
    expect(await store.put(key, source.stream)).toEqual({ size: 21 * MiB + 3 })
    expect(log.started()).toEqual(['CreateMultipartUpload', 'UploadPart', 'UploadPart', 'UploadPart', 'CompleteMultipartUpload'])
    const back = await digest(await store.get(key))
    expect(back).toEqual({ size: 21 * MiB + 3, sha256: source.sha256() })
  })

  it('fills its part buffers again: parts in order, at most queue-size in flight, exact bytes, no empty last part', async () => {
    for (const queueSize of [1, 2]) {
      const store = make({ partSize: '5MB', queueSize })
      const log = record(store.client)
      // 33 MiB and 11 bytes in chunks of 777,777: chunks straddle every part boundary; seven parts, so
      // each buffer is filled again several times.
      const bytes = randomBytes(33 * MiB + 11)
      const key = `${run}/reuse/q${queueSize}.bin`
      expect(await store.put(key, chunked(bytes, 777_777))).toEqual({ size: bytes.length })
      const parts = log.inputs('UploadPart')
      expect(parts.map((p) => p.PartNumber)).toEqual([1, 2, 3, 4, 5, 6, 7])
      expect(parts.map((p) => p.ContentLength)).toEqual([...Array(6).fill(5 * MiB), 3 * MiB + 11])
      let inFlight = 0
      let most = 0
      for (const c of log.calls.filter((c) => c.command === 'UploadPart')) {
        inFlight += c.phase === 'start' ? 1 : -1
        most = Math.max(most, inFlight)
      }
      expect(most).toBe(queueSize)
      expect(await digest(await store.get(key))).toEqual({ size: bytes.length, sha256: sha256(bytes) })
    }
    // A body of whole parts: no empty part after them.
    const store = make({ partSize: '5MB', queueSize: 2 })
    const log = record(store.client)
    const whole = randomBytes(15 * MiB)
    expect(await store.put(`${run}/reuse/whole.bin`, chunked(whole, MiB))).toEqual({ size: whole.length })
    expect(log.inputs('UploadPart').map((p) => p.ContentLength)).toEqual([5 * MiB, 5 * MiB, 5 * MiB])
    expect(sha256(await readFile(s3.objectFile(`${run}/reuse/whole.bin`)))).toBe(sha256(whole))
  })

  it('a source that fails during a multipart upload: its error is thrown, the upload aborted, nothing left', async () => {
    const store = make({ partSize: '5MB' })
    const log = record(store.client)
    const key = `${run}/source-fails/big.bin`
    let sent = 0
    const source = new Readable({
      read() {
        if (sent >= 17 * MiB) return void setImmediate(() => this.destroy(new Error('the disk went away')))
        sent += MiB
        setImmediate(() => this.push(randomBytes(MiB)))
      },
    })
    await expect(store.put(key, source)).rejects.toThrow('the disk went away')
    expect(log.finished()).toContain('UploadPart')
    expect(log.finished()).toContain('AbortMultipartUpload')
    expect(log.started()).not.toContain('CompleteMultipartUpload')
    expect(await store.exists(key)).toBe(false)
    expect((await s3.pendingUploads()).filter((u) => u.key === key)).toEqual([])
  })

  it('serves a range as one ranged GetObject, streaming the response itself', async () => {
    const store = make()
    const log = record(store.client)
    const key = `${run}/range/a.bin`
    const bytes = randomBytes(1000)
    await store.put(key, bytes)
    const cases: Array<[{ start: number; end?: number }, string, number, number]> = [
      [{ start: 100, end: 199 }, 'bytes=100-199', 100, 200],
      [{ start: 990 }, 'bytes=990-', 990, 1000],
      [{ start: 990, end: 5000 }, 'bytes=990-5000', 990, 1000],
      // s3rver answers "bytes=0-0" with the whole object: the store cuts the answer to what was asked.
      [{ start: 0, end: 0 }, 'bytes=0-0', 0, 1],
    ]
    for (const [range, header, from, to] of cases) {
      log.calls.length = 0
      const stream = await store.get(key, range)
      expect(Buffer.compare(await readAll(stream), bytes.subarray(from, to)), header).toBe(0)
      expect(log.inputs('GetObject').map((i) => i.Range)).toEqual([header])
      expect(log.started()).toEqual(['GetObject'])
    }
    // Not buffered, no temporary file: the HTTP response of the SDK is what the caller reads.
    const whole = await store.get(key)
    expect(whole).toBeInstanceOf(IncomingMessage)
    expect(await store.get(key, { start: 1, end: 2 })).toBeInstanceOf(IncomingMessage)
    whole.destroy()
    // A range past the end: 416 with the size, as the local store answers.
    await expect(store.get(key, { start: 1000 })).rejects.toMatchObject({
      code: 'range-not-satisfiable',
      status: 416,
      details: { size: 1000 },
    })
    await expect(store.get(key, { start: -1 })).rejects.toMatchObject({ code: 'range-not-satisfiable', details: { size: 1000 } })
  })

  it('an aborted multipart upload leaves no object and no in-progress upload', async () => {
    const store = make()
    const log = record(store.client)
    const key = `${run}/abort/big.bin`
    const controller = new AbortController()
    const source = stallingAfter(12 * MiB)
    const put = store.put(key, source, { signal: controller.signal })
    put.catch(() => {})
    await waitFor(() => log.finished().includes('UploadPart'))
    controller.abort()
    await expect(put).rejects.toMatchObject({ name: 'AbortError' })
    expect(source.destroyed).toBe(true)
    expect(log.started()).toContain('AbortMultipartUpload')
    expect(log.finished()).toContain('AbortMultipartUpload')
    expect(log.started()).not.toContain('CompleteMultipartUpload')
    expect(await store.exists(key)).toBe(false)
    const pending = await store.client.send(new ListMultipartUploadsCommand({ Bucket: s3.bucket, Prefix: key }))
    expect(pending.Uploads ?? []).toEqual([])
    expect((await s3.pendingUploads()).filter((u) => u.key === key)).toEqual([])
  })

  it('an object deleted behind its back is not-found (404), never a 500', async () => {
    const store = make()
    const key = `${run}/gone/a.txt`
    await store.put(key, Buffer.from('soon gone'))
    const raw = rawClient(s3)
    await raw.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key: key }))
    raw.destroy()
    for (const call of [
      () => store.get(key),
      () => store.get(key, { start: 1, end: 3 }),
      () => store.stat(key),
      () => store.copy(key, `${run}/gone/b.txt`),
      () => store.move(key, `${run}/gone/c.txt`),
    ]) {
      await expect(call()).rejects.toMatchObject({ name: 'AttachStorageError', code: 'not-found', status: 404 })
    }
    expect(await store.exists(key)).toBe(false)
    await store.delete(key)
  })

  it('copies and moves a large object part by part (UploadPartCopy) above multipart-copy-threshold', async () => {
    const store = make({ multipartCopyThreshold: '5MB', copyPartSize: '5MB' })
    const log = record(store.client)
    const bytes = randomBytes(12 * MiB + 123)
    await store.put(`${run}/mpcopy/src.bin`, bytes, { contentType: 'application/x-big' })
    log.calls.length = 0
    await store.copy(`${run}/mpcopy/src.bin`, `${run}/mpcopy/copy +=,@.bin`)
    expect(log.started()).toEqual([
      'HeadObject',
      'CreateMultipartUpload',
      'UploadPartCopy',
      'UploadPartCopy',
      'UploadPartCopy',
      'CompleteMultipartUpload',
    ])
    expect(log.inputs('UploadPartCopy').map((i) => i.CopySourceRange)).toEqual([
      `bytes=0-${5 * MiB - 1}`,
      `bytes=${5 * MiB}-${10 * MiB - 1}`,
      `bytes=${10 * MiB}-${12 * MiB + 122}`,
    ])
    expect(sha256(await readAll(await store.get(`${run}/mpcopy/copy +=,@.bin`)))).toBe(sha256(bytes))
    const head = await store.client.send(new HeadObjectCommand({ Bucket: s3.bucket, Key: `${run}/mpcopy/copy +=,@.bin` }))
    expect(head.ContentType).toBe('application/x-big')

    await store.move(`${run}/mpcopy/copy +=,@.bin`, `${run}/mpcopy/moved.bin`)
    expect(await store.exists(`${run}/mpcopy/copy +=,@.bin`)).toBe(false)
    expect(sha256(await readAll(await store.get(`${run}/mpcopy/moved.bin`)))).toBe(sha256(bytes))
    expect((await s3.pendingUploads()).filter((u) => u.key.startsWith(`${run}/mpcopy/`))).toEqual([])
    // Below the threshold it stays one CopyObject.
    log.calls.length = 0
    await store.put(`${run}/mpcopy/small.bin`, bytes.subarray(0, 1000))
    log.calls.length = 0
    await store.copy(`${run}/mpcopy/small.bin`, `${run}/mpcopy/small-copy.bin`)
    expect(log.started()).toEqual(['HeadObject', 'CopyObject'])
  })

  it('keeps every key under its prefix and lists keys without it', async () => {
    const prefixed = make({ prefix: '/tenant-a' })
    expect(prefixed.prefix).toBe('tenant-a/')
    const plain = make()
    await prefixed.put(`${run}/p/a.txt`, Buffer.from('a'))
    expect(await fileExists(s3.objectFile(`tenant-a/${run}/p/a.txt`))).toBe(true)
    expect(await plain.exists(`tenant-a/${run}/p/a.txt`)).toBe(true)
    expect(await plain.exists(`${run}/p/a.txt`)).toBe(false)
    expect((await collect(prefixed.list(`${run}/p/`))).map((e) => e.key)).toEqual([`${run}/p/a.txt`])
    expect((await collect(plain.list(`tenant-a/${run}/`))).map((e) => e.key)).toEqual([`tenant-a/${run}/p/a.txt`])
    // Objects no key can name (written by someone else) are not listed.
    await plain.client.send(new PutObjectCommand({ Bucket: s3.bucket, Key: `tenant-a/${run}/p/.hidden`, Body: 'x' }))
    expect((await collect(prefixed.list(`${run}/p/`))).map((e) => e.key)).toEqual([`${run}/p/a.txt`])
    await prefixed.delete(`${run}/p/a.txt`)
    await plain.client.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key: `tenant-a/${run}/p/.hidden` }))
  })

  it('uses a ready client as is and leaves it open on close()', async () => {
    const client = rawClient(s3)
    try {
      const store = new S3Store('ready', { bucket: s3.bucket, client })
      expect(store.client).toBe(client)
      await store.put(`${run}/ready/a.txt`, Buffer.from('ready'))
      await store.close()
      expect((await readAll(await store.get(`${run}/ready/a.txt`))).toString()).toBe('ready')
      await store.delete(`${run}/ready/a.txt`)
    } finally {
      client.destroy()
    }
  })

  it('verify() checks bucket and credentials with HeadBucket; verify-on-start fails createStore', async () => {
    await make().verify()
    await expect(make({ bucket: 'no-such-bucket' }).verify()).rejects.toMatchObject({
      code: 'store-failure',
      status: 502,
      message: expect.stringMatching(/bucket "no-such-bucket" does not exist/),
    })
    await expect(createStore('s3', { ...s3.settings, bucket: 'no-such-bucket', verifyOnStart: true })).rejects.toMatchObject({
      code: 'store-failure',
    })
    const ok = await createStore('s3', { ...s3.settings, verifyOnStart: 'true' })
    await ok.close()
  })
})

// ----------------------------------------------------------------------------------------------------

describe('S3Store failures', () => {
  const SECRET = 'wr0ng-Secret-DO-NOT-LEAK-9f8e7d6c'
  const ACCESS = 'AKIAWRONGACCESSKEY42'

  /** Every form in which an error may end up in a log or an HTTP answer. */
  const forms = (err: unknown): string[] => [
    String(err),
    (err as Error).message,
    JSON.stringify(err),
    inspect(err, { depth: Infinity }),
    inspect(err, { depth: Infinity, showHidden: true }),
    String((err as Error).stack),
  ]

  it('wrong credentials: a clear store-failure (502) that never carries the secret or the access key', async () => {
    const store = new S3Store('s3', on({ accessKey: ACCESS, secretKey: SECRET }))
    try {
      const refused = /failed: S3 refused the credentials \(InvalidAccessKeyId\): check the access-key and secret-key settings/
      // A HEAD answer has no body, so no error code: S3 (and s3rver) give only the status.
      const denied = /failed: access denied \(HTTP 403\): check the credentials \(access-key, secret-key\) and the IAM permissions/
      const attempts: Array<[string, () => Promise<unknown>, RegExp]> = [
        ['put', () => store.put('creds/a.txt', Buffer.from('x')), refused],
        ['put stream', () => store.put('creds/b.bin', chunked(randomBytes(6 * MiB), MiB)), refused],
        ['get', () => store.get('creds/a.txt'), refused],
        ['list', () => collect(store.list('creds/')), refused],
        ['stat', () => store.stat('creds/a.txt'), denied],
        ['verify', () => store.verify(), denied],
      ]
      for (const [label, attempt, message] of attempts) {
        const err = await attempt().then(
          () => expect.unreachable(`${label} succeeded`),
          (e: unknown) => e,
        )
        expect(err, label).toMatchObject({ name: 'AttachStorageError', code: 'store-failure', status: 502 })
        expect((err as Error).message, label).toMatch(/^S3 store "s3": \w+/)
        expect((err as Error).message, label).toMatch(message)
        expect((err as Error).cause, label).toMatchObject({ $metadata: { httpStatusCode: 403 } })
        for (const form of forms(err)) {
          expect(form).not.toContain(SECRET)
          expect(form).not.toContain(ACCESS)
        }
      }
    } finally {
      await store.close()
    }
  })

  it('S3 answers that echo signing material or secrets are sanitized (message and cause)', async () => {
    const answers: Array<[number, string, RegExp]> = [
      [
        403,
        `<Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match</Message>` +
          `<AWSAccessKeyId>${ACCESS}</AWSAccessKeyId><StringToSign>AWS4-HMAC-SHA256 ${SECRET}</StringToSign>` +
          `<CanonicalRequest>GET /x ${SECRET}</CanonicalRequest><RequestId>R1</RequestId></Error>`,
        /GetObject of "a\.txt" failed: S3 refused the credentials \(SignatureDoesNotMatch\): check the access-key and secret-key/,
      ],
      [
        400,
        `<Error><Code>WeirdError</Code><Message>server echoed ${SECRET} and ${ACCESS}</Message></Error>`,
        /GetObject of "a\.txt" failed: WeirdError \(HTTP 400\): server echoed \*\*\* and \*\*\*/,
      ],
      [403, `<Error><Code>AccessDenied</Code><Message>Access Denied</Message></Error>`, /access denied \(AccessDenied\)/],
      [404, `<Error><Code>NoSuchBucket</Code><Message>nope</Message></Error>`, /the bucket "attach-test" does not exist/],
      [503, `<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>`, /SlowDown \(HTTP 503\)/],
    ]
    for (const [status, xml, message] of answers) {
      const store = new S3Store('s3', {
        ...on({ accessKey: ACCESS, secretKey: SECRET, maxAttempts: 1 }),
        clientConfig: { requestHandler: answering(status, xml) },
      })
      const err = await store.get('a.txt').then(
        () => expect.unreachable('get succeeded'),
        (e: unknown) => e,
      )
      expect(err).toMatchObject({ code: 'store-failure', status: 502 })
      expect((err as Error).message).toMatch(message)
      const cause = (err as Error).cause as Record<string, unknown>
      for (const field of ['StringToSign', 'CanonicalRequest', 'AWSAccessKeyId', '$response']) {
        expect(cause[field], field).toBeUndefined()
      }
      for (const form of forms(err)) {
        expect(form).not.toContain(SECRET)
        expect(form).not.toContain(ACCESS)
      }
      await store.close()
    }
  })

  it('the server stopped mid-upload: a clean store-failure, quickly, not a hang', async () => {
    const other = await startS3rver('stop-test')
    const store = new S3Store('s3', {
      ...(other.settings as unknown as S3StoreOptions),
      connectTimeout: '1s',
      socketTimeout: '2s',
      maxAttempts: 2,
    })
    try {
      const log = record(store.client)
      const source = generatedStream(40 * MiB, { chunkSize: MiB, defer: true })
      const started = Date.now()
      const put = store.put('stop/big.bin', source.stream)
      put.catch(() => {})
      await waitFor(() => log.started().includes('UploadPart'))
      await other.kill()
      const err = await put.then(
        () => expect.unreachable('put succeeded'),
        (e: unknown) => e,
      )
      expect(err).toMatchObject({ name: 'AttachStorageError', code: 'store-failure', status: 502 })
      expect((err as Error).message).toMatch(/S3 store "s3": multipart upload of "stop\/big\.bin" failed: /)
      expect(Date.now() - started).toBeLessThan(20_000)
      expect(source.stream.destroyed).toBe(true)
      // Later calls fail fast too.
      await expect(store.stat('stop/big.bin')).rejects.toMatchObject({
        code: 'store-failure',
        message: expect.stringMatching(/HeadObject of "stop\/big\.bin" failed: cannot reach S3: the connection was refused/),
      })
    } finally {
      await store.close()
      await other.close()
    }
  })

  it('a server that accepts connections but never answers: socket-timeout ends the request', async () => {
    const sockets = new Set<Socket>()
    const silent: Server = createServer((socket) => {
      sockets.add(socket)
      socket.on('error', () => {})
    })
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    const port = (silent.address() as { port: number }).port
    const store = new S3Store('s3', {
      ...on({ endpoint: `http://127.0.0.1:${port}` }),
      socketTimeout: '300ms',
      connectTimeout: '1s',
      maxAttempts: 1,
    })
    try {
      const started = Date.now()
      await expect(store.stat('a.txt')).rejects.toMatchObject({
        code: 'store-failure',
        message: expect.stringMatching(/HeadObject of "a\.txt" failed: the request timed out/),
      })
      await expect(store.put('a.txt', Buffer.from('x'))).rejects.toMatchObject({ code: 'store-failure' })
      expect(Date.now() - started).toBeLessThan(5_000)
    } finally {
      await store.close()
      for (const socket of sockets) socket.destroy()
      await new Promise((resolve) => silent.close(resolve))
    }
  })
})

// ----------------------------------------------------------------------------------------------------

describe('S3Store settings', () => {
  const base = { type: 's3', bucket: 'b', region: 'eu-central-1' }
  const invalid = (settings: Record<string, unknown>, message: RegExp) =>
    expect(() => new S3Store('files', settings as unknown as S3StoreOptions)).toThrow(
      expect.objectContaining({ name: 'AttachStorageError', code: 'config-invalid', message: expect.stringMatching(message) }),
    )

  it('names the missing or invalid setting, never echoing a credential', async () => {
    invalid({ type: 's3', region: 'r' }, /^attach\.stores\.files \(type s3\) is missing required settings: bucket$/)
    invalid({ type: 's3', bucket: 'b' }, /missing required settings: region/)
    invalid({ ...base, bucket: 'a/b' }, /\.bucket must be a bucket name/)
    invalid({ ...base, accessKey: 'AKIASECRETISH' }, /"access-key" and "secret-key" go together.*"secret-key" is missing/)
    invalid({ ...base, secretKey: 'super-secret-value' }, /"access-key" is missing/)
    invalid({ ...base, sessionToken: 'tok-123456' }, /"session-token" needs "access-key" and "secret-key"/)
    invalid({ ...base, endpoint: 'not a url' }, /\.endpoint must be an absolute http\(s\) URL/)
    invalid({ ...base, endpoint: 'ftp://x' }, /\.endpoint must be an absolute http\(s\) URL/)
    invalid({ ...base, endpoint: 'http://user:pw@x' }, /\.endpoint must not carry credentials/)
    invalid({ ...base, prefix: '../up' }, /\.prefix is not a valid key prefix/)
    invalid({ ...base, prefix: 'a//b' }, /\.prefix is not a valid key prefix/)
    invalid({ ...base, forcePathStyle: 'yes' }, /\.force-path-style must be true or false/)
    invalid({ ...base, requestChecksumCalculation: 'SOMETIMES' }, /\.request-checksum-calculation must be WHEN_REQUIRED or WHEN_SUPPORTED/)
    invalid({ ...base, socketTimeout: 'soon' }, /\.socket-timeout must be a number of seconds or a duration/)
    invalid({ ...base, connectTimeout: 0 }, /\.connect-timeout must be a number of seconds or a duration/)
    invalid({ ...base, maxAttempts: 0 }, /\.max-attempts must be an integer from 1 to 20/)
    invalid({ ...base, partSize: '1MB' }, /\.part-size must be a size from 5 MiB to 5 GiB/)
    invalid({ ...base, multipartCopyThreshold: '6GB' }, /\.multipart-copy-threshold must be a size/)
    invalid({ ...base, secretkey: 'x' }, /unknown setting "secretkey"; .*known settings: bucket, region, access-key, secret-key/)
    invalid({ ...base, accessKey: 12345678, secretKey: 'abcdefgh' }, /\.access-key must be a string$/)
    for (const settings of [
      { ...base, accessKey: 'AKIASECRETISH' },
      { ...base, secretKey: 'super-secret-value' },
      { ...base, accessKey: 'AKIASECRETISH', secretKey: 987654321 },
    ]) {
      try {
        new S3Store('files', settings as unknown as S3StoreOptions)
        expect.unreachable()
      } catch (err) {
        expect(String(err)).not.toMatch(/AKIASECRETISH|super-secret-value|987654321/)
      }
    }
    await expect(createStore('files', { type: 's3', region: 'r' })).rejects.toMatchObject({ code: 'config-invalid' })
  })

  it('applies defaults: prefix normalized, checksums WHEN_REQUIRED only with an endpoint, strings accepted', async () => {
    const aws = new S3Store('files', { ...base, prefix: 'attach' } as S3StoreOptions)
    expect(aws.prefix).toBe('attach/')
    expect(aws.bucket).toBe('b')
    expect(aws.type).toBe('s3')
    expect(await aws.client.config.requestChecksumCalculation()).toBe('WHEN_SUPPORTED')
    expect(await aws.client.config.responseChecksumValidation()).toBe('WHEN_SUPPORTED')
    expect(await aws.client.config.region()).toBe('eu-central-1')
    expect(aws.client.config.forcePathStyle).toBe(false)
    await aws.close()

    const compatible = new S3Store('files', {
      ...base,
      endpoint: 'http://127.0.0.1:9',
      forcePathStyle: 'true',
      prefix: '/a/b/',
      requestChecksumCalculation: 'when_supported',
      maxAttempts: '5',
      cdnUrl: 'https://cdn.example.com/',
    } as S3StoreOptions)
    expect(compatible.prefix).toBe('a/b/')
    expect(await compatible.client.config.requestChecksumCalculation()).toBe('WHEN_SUPPORTED')
    expect(await compatible.client.config.responseChecksumValidation()).toBe('WHEN_REQUIRED')
    expect(compatible.client.config.forcePathStyle).toBe(true)
    expect(await compatible.client.config.maxAttempts()).toBe(5)
    await compatible.close()

    // A ready client needs no region.
    const client = new S3Client({ region: 'us-west-2' })
    const ready = new S3Store('files', { bucket: 'b', client })
    expect(ready.client).toBe(client)
    client.destroy()
  })

  it('rejects traversal keys before any request (bad-key, 400), prefix or not', async () => {
    const store = new S3Store('files', {
      ...base,
      prefix: 'p/',
      endpoint: 'http://127.0.0.1:9',
      maxAttempts: 1,
    } as S3StoreOptions)
    const log = record(store.client)
    for (const bad of ['../x', 'a/../../x', '/../x', '%2e%2e/x', 'a//b']) {
      await expect(store.put(bad, Buffer.from('x'))).rejects.toMatchObject({ code: 'bad-key', status: 400 })
      await expect(store.get(bad)).rejects.toMatchObject({ code: 'bad-key', status: 400 })
      await expect(store.exists(bad)).rejects.toMatchObject({ code: 'bad-key', status: 400 })
    }
    const long = `${`${'x'.repeat(200)}/`.repeat(5)}${'y'.repeat(18)}` // 1023 characters, 1025 with "p/"
    expect(long.length).toBe(1023)
    await expect(store.put(long, Buffer.from('x'))).rejects.toMatchObject({
      code: 'bad-key',
      message: expect.stringMatching(/with the store prefix it is longer than 1024 bytes/),
    })
    expect(log.started()).toEqual([])
    await store.close()
  })
})

// ----------------------------------------------------------------------------------------------------

describe('attach-storage on S3 (createStore loaded by the core)', () => {
  let dir: string
  let storage: Awaited<ReturnType<typeof createAttachStorage>>
  let handler: ReturnType<typeof createAttachHandler>
  let db: Awaited<ReturnType<typeof openDatabase>>
  let store: S3Store
  const API = 'http://x/api/storage'
  const ASSETS = 'http://x/assets/storage'

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-s3-service-'))
    db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
    storage = await createAttachStorage({
      config: {
        directory: { 'base-dir': join(dir, 'files'), 'tmp-dir': join(dir, 'tmp') },
        stores: {
          s3: {
            type: 's3',
            bucket: s3.bucket,
            region: 'us-east-1',
            endpoint: s3.endpoint,
            'force-path-style': true,
            'access-key': S3RVER_ACCESS_KEY,
            'secret-key': S3RVER_SECRET_KEY,
            prefix: 'service/',
          },
        },
        'default-store': 's3',
        'tmp-store': 's3',
        domains: { demo: {} },
      },
      db,
      authenticate: () => ({ id: 7 }),
      logger: { info: () => {}, warn: () => {}, error: () => {} },
    })
    handler = createAttachHandler(storage)
    store = storage.store('s3') as S3Store
  })
  afterAll(async () => {
    await storage?.close()
    await db?.destroy()
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  const upload = async (bytes: Uint8Array, name: string): Promise<Record<string, any>> => {
    const form = new FormData()
    form.append('refDomain', 'demo')
    form.append('file', new Blob([new Uint8Array(bytes)]), name)
    const res = await handler.fetch(new Request(`${API}/attach/tmp`, { method: 'POST', body: form }))
    expect(res.status).toBe(200)
    return ((await res.json()) as { files: Array<Record<string, any>> }).files[0]!
  }
  const save = async (refKey: string, tmp: Record<string, any>): Promise<Record<string, any>> => {
    const res = await handler.fetch(
      new Request(`${API}/attach/demo/${refKey}`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({
          refDomain: 'demo',
          default: [{ savedName: tmp.name, displayName: tmp.displayName, fileSize: tmp.size, fileType: tmp.type }],
        }),
      }),
    )
    const body = (await res.json()) as { success: boolean; attachList: Array<Record<string, any>> }
    expect(res.status, JSON.stringify(body)).toBe(200)
    expect(body.success).toBe(true)
    return body.attachList[0]!
  }

  it('is an S3Store made by this package from the kebab-case settings', () => {
    expect(store).toBeInstanceOf(S3Store)
    expect(store.prefix).toBe('service/')
  })

  it('runs upload → confirmed save → ranged view → delete entirely on S3, with no local file', async () => {
    const bytes = randomBytes(300_000)
    const tmp = await upload(bytes, 'report.bin')
    expect(tmp).toMatchObject({ displayName: 'report.bin', size: 300_000 })
    expect((await collect(store.list('_tmp/'))).some((e) => e.key.startsWith(`_tmp/${tmp.name}`))).toBe(true)

    const record_ = await save('42', tmp)
    const key = `${String(record_.savedDir).slice(1)}${record_.savedName}`
    expect(key).toMatch(/^demo\/\d{4}\/\d{2}\/42\/[^/]+\.bin$/)
    expect(await fileExists(s3.objectFile(`service/${key}`))).toBe(true)
    expect((await collect(store.list('_tmp/'))).filter((e) => e.key.startsWith(`_tmp/${tmp.name}`) && !e.key.endsWith('.json'))).toEqual([])

    const log = record(store.client)
    const ranged = await handler.fetch(new Request(`${ASSETS}/attach/view/demo/42/default/0`, { headers: { range: 'bytes=1000-1999' } }))
    expect(ranged.status).toBe(206)
    expect(ranged.headers.get('content-range')).toBe('bytes 1000-1999/300000')
    expect(Buffer.compare(Buffer.from(await ranged.arrayBuffer()), bytes.subarray(1000, 2000))).toBe(0)
    expect(log.inputs('GetObject').map((i) => i.Range)).toEqual(['bytes=1000-1999'])

    const whole = await handler.fetch(new Request(`${ASSETS}/attach/view/demo/42/default/0`))
    expect(whole.status).toBe(200)
    expect(sha256(Buffer.from(await whole.arrayBuffer()))).toBe(sha256(bytes))

    const del = await handler.fetch(
      new Request(`${API}/attach`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify([{ id: record_.id }]),
      }),
    )
    expect(await del.json()).toMatchObject({ success: true, count: 1 })
    await waitFor(async () => !(await store.exists(key)))
    const gone = await handler.fetch(new Request(`${ASSETS}/attach/view/demo/42/default/0`))
    expect(gone.status).toBe(404)

    // Nothing of this went through the local file system.
    expect(await filesUnder(join(dir, 'files'))).toEqual([])
    expect(await filesUnder(join(dir, 'tmp'))).toEqual([])
  })

  it('takes the spec\'s attach.s3.* settings as the implicit store "s3"', async () => {
    const implicitDb = await openDatabase({ type: 'sqlite', file: join(dir, 'implicit.db') })
    const implicit = await createAttachStorage({
      config: {
        directory: { 'base-dir': join(dir, 'files'), 'tmp-dir': join(dir, 'tmp') },
        s3: {
          bucket: s3.bucket,
          region: 'us-east-1',
          endpoint: s3.endpoint,
          'force-path-style': 'true',
          'access-key': S3RVER_ACCESS_KEY,
          'secret-key': S3RVER_SECRET_KEY,
          'cdn-url': 'https://cdn.example.com/',
        },
        'default-store': 's3',
        domains: { demo: {} },
      },
      db: implicitDb,
      authenticate: () => ({ id: 7 }),
      logger: { info: () => {}, warn: () => {}, error: () => {} },
    })
    try {
      const s = implicit.store('s3')
      expect(s).toBeInstanceOf(S3Store)
      await s.put('implicit/a.txt', Buffer.from('implicit'))
      expect((await readAll(await s.get('implicit/a.txt'))).toString()).toBe('implicit')
      await s.delete('implicit/a.txt')
    } finally {
      await implicit.close()
      await implicitDb.destroy()
    }
  })

  it('a saved object removed from the bucket behind its back answers 404 not-found, not 500', async () => {
    const tmp = await upload(randomBytes(5000), 'x.bin')
    const saved = await save('43', tmp)
    const raw = rawClient(s3)
    await raw.send(new DeleteObjectCommand({ Bucket: s3.bucket, Key: `service/${String(saved.savedDir).slice(1)}${saved.savedName}` }))
    raw.destroy()
    for (const headers of [{}, { range: 'bytes=0-9' }] as Array<Record<string, string>>) {
      const res = await handler.fetch(new Request(`${ASSETS}/attach/view/demo/43/default/0`, { headers }))
      expect(res.status).toBe(404)
      expect(await res.json()).toMatchObject({ code: 'not-found' })
    }
  })
})

// ----------------------------------------------------------------------------------------------------

describe('S3Store presignGet (serve: redirect) on s3rver', () => {
  const stores: S3Store[] = []
  const make = (overrides: Record<string, unknown> = {}): S3Store => {
    const store = new S3Store('s3', on(overrides))
    stores.push(store)
    return store
  }
  const run = `presign-${randomBytes(4).toString('hex')}`
  const name = '보고서 (최종).pdf'
  const disposition = `attachment; filename="___ (__).pdf"; filename*=UTF-8''${rfc5987(name)}`
  afterAll(async () => {
    for (const store of stores) await store.close()
  })

  it('signs an address that a plain fetch reads: same bytes, the signed type and download name, ranges', async () => {
    // A prefix and a cdn-url: the address is the S3 endpoint's, with the prefixed key.
    const store = make({ prefix: 'signed/', cdnUrl: 'https://cdn.example.com/files/' })
    const key = `${run}/a b+c.pdf`
    const bytes = randomBytes(200_000)
    await store.put(key, bytes, { contentType: 'application/octet-stream' })
    const url = await store.presignGet(key, { expiresIn: 60, contentType: 'application/pdf', contentDisposition: disposition })
    const address = new URL(url)
    expect(address.origin).toBe(s3.endpoint)
    expect(address.pathname).toBe(`/${s3.bucket}/signed/${run}/a%20b%2Bc.pdf`)
    expect(address.searchParams.get('X-Amz-Expires')).toBe('60')
    expect(address.searchParams.get('response-content-type')).toBe('application/pdf')
    expect(address.searchParams.get('response-content-disposition')).toBe(disposition)

    const res = await fetch(url)
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toBe('application/pdf')
    expect(res.headers.get('content-disposition')).toBe(disposition)
    expect(sha256(Buffer.from(await res.arrayBuffer()))).toBe(sha256(bytes))

    const ranged = await fetch(url, { headers: { range: 'bytes=1000-1999' } })
    expect(ranged.status).toBe(206)
    expect(ranged.headers.get('content-range')).toBe('bytes 1000-1999/200000')
    expect(ranged.headers.get('content-disposition')).toBe(disposition)
    expect(Buffer.compare(Buffer.from(await ranged.arrayBuffer()), bytes.subarray(1000, 2000))).toBe(0)

    // Signing is local: a missing object is the client's 404, from S3.
    const missing = await fetch(
      await store.presignGet(`${run}/missing.pdf`, { expiresIn: 60, contentType: 'application/pdf', contentDisposition: 'inline' }),
    )
    expect(missing.status).toBe(404)
    await missing.arrayBuffer()
  })

  it('an expired address is refused (403 AccessDenied "Request has expired")', async () => {
    const store = make()
    const key = `${run}/expiring.txt`
    await store.put(key, Buffer.from('soon gone'))
    const url = await store.presignGet(key, { expiresIn: 1, contentType: 'text/plain', contentDisposition: 'inline' })
    // X-Amz-Date has whole seconds: the address ends at most 1 s after it was signed.
    await new Promise((resolve) => setTimeout(resolve, 2_100))
    const res = await fetch(url)
    expect(res.status).toBe(403)
    const body = await res.text()
    expect(body).toContain('<Code>AccessDenied</Code>')
    expect(body).toContain('Request has expired')
  })

  it('a tampered address is refused (403 SignatureDoesNotMatch): signature, signed overrides, key, secret', async () => {
    const store = make()
    const key = `${run}/guarded.txt`
    await store.put(key, Buffer.from('do not touch'))
    const url = await store.presignGet(key, { expiresIn: 60, contentType: 'text/plain', contentDisposition: 'inline' })
    expect(await (await fetch(url)).text()).toBe('do not touch')

    const signature = new URL(url).searchParams.get('X-Amz-Signature')!
    const flipped = `${signature.slice(0, -1)}${signature.endsWith('0') ? '1' : '0'}`
    const tampered = [
      url.replace(`X-Amz-Signature=${signature}`, `X-Amz-Signature=${flipped}`),
      url.replace('response-content-type=text%2Fplain', 'response-content-type=text%2Fhtml'),
      url.replace('response-content-disposition=inline', 'response-content-disposition=attachment'),
      url.replace('guarded.txt', 'other.txt'),
      url.replace('X-Amz-Expires=60', 'X-Amz-Expires=600'),
      // Signed with a wrong secret key: s3rver alone lets it through (it does not check SigV4).
      await make({ secretKey: 'not-the-secret' }).presignGet(key, {
        expiresIn: 60,
        contentType: 'text/plain',
        contentDisposition: 'inline',
      }),
    ]
    for (const address of tampered) {
      expect(address).not.toBe(url)
      const res = await fetch(address)
      expect(res.status, address).toBe(403)
      expect(await res.text()).toContain('<Code>SignatureDoesNotMatch</Code>')
    }
  })

  it('s3rver on its own checks the expiry but not the signature (what the test server adds)', async () => {
    const bare = await startS3rver('attach-bare', { verifyPresigned: false })
    const store = new S3Store('bare', { ...bare.settings } as unknown as S3StoreOptions)
    try {
      await store.put('a.txt', Buffer.from('bare'))
      const url = await store.presignGet('a.txt', { expiresIn: 60, contentType: 'text/plain', contentDisposition: 'inline' })
      const signature = new URL(url).searchParams.get('X-Amz-Signature')!
      const res = await fetch(url.replace(signature, '0'.repeat(64)))
      expect(res.status).toBe(200)
      expect(await res.text()).toBe('bare')
    } finally {
      await store.close()
      await bare.close()
    }
  })

  it('refuses a bad key as get does (bad-key, 400), before signing', async () => {
    const store = make({ prefix: 'p/' })
    const options = { expiresIn: 60, contentType: 'text/plain', contentDisposition: 'inline' }
    for (const bad of ['../x', 'a/../../x', '/../x', '%2e%2e/x', 'a//b', '']) {
      const refusal = await store.get(bad).catch((err: unknown) => err)
      expect(refusal).toMatchObject({ code: 'bad-key', status: 400 })
      await expect(store.presignGet(bad, options)).rejects.toMatchObject({
        code: 'bad-key',
        status: 400,
        message: (refusal as Error).message,
      })
    }
    await expect(store.presignGet('a.txt', { ...options, expiresIn: 0 })).rejects.toThrow(/expiresIn must be 1 to 604800 seconds/)
    await expect(store.presignGet('a.txt', { ...options, expiresIn: 604_801 })).rejects.toThrow(/expiresIn/)
  })
})

describe('attach-storage on S3 with serve: redirect (end to end)', () => {
  const SECRET = 'presign-test-secret-of-32-bytes!'
  let dir: string
  let db: Awaited<ReturnType<typeof openDatabase>>
  let storage: Awaited<ReturnType<typeof createAttachStorage>>
  let handler: ReturnType<typeof createAttachHandler>

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-s3-redirect-'))
    db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
    storage = await createAttachStorage({
      config: {
        directory: { baseDir: join(dir, 'files'), tmpDir: join(dir, 'tmp') },
        defaultStore: 's3',
        stores: { s3: { type: 's3', serve: 'redirect', 'redirect-ttl': '2m', ...s3.settings, prefix: 'redirect/' } },
        domains: { demo: { categories: { default: {} } } },
      },
      db,
      jwt: { secret: SECRET },
      logger: { info: () => {}, warn: () => {}, error: () => {} },
    })
    handler = createAttachHandler(storage)
  })
  afterAll(async () => {
    await storage?.close()
    await db?.destroy()
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  it('upload, confirmed save, then download answers 302 to a presigned S3 address that serves the file', async () => {
    await expectRedirectServing({
      handler,
      authorization: `Bearer ${hs256Token(SECRET, '7')}`,
      checkAddress: (address, file) => {
        expect(address.origin).toBe(s3.endpoint)
        expect(address.pathname).toBe(`/${s3.bucket}/redirect${file.savedDir}${file.savedName}`)
        expect(address.searchParams.get('X-Amz-Expires')).toBe('120')
      },
    })
  })
})

// ----------------------------------------------------------------------------------------------------

/** A download name as `filename*` carries it (RFC 5987), as the core encodes it. */
function rfc5987(name: string): string {
  return encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
}

/** An HS256 JWT for user `sub`, valid for an hour. */
function hs256Token(secret: string, sub: string): string {
  const part = (o: object) => Buffer.from(JSON.stringify(o)).toString('base64url')
  const now = Math.floor(Date.now() / 1000)
  const unsigned = `${part({ alg: 'HS256', typ: 'JWT' })}.${part({ sub, iat: now, exp: now + 3600 })}`
  return `${unsigned}.${createHmac('sha256', secret).update(unsigned).digest('base64url')}`
}

function sha256(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex')
}

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(Buffer.from(chunk as Uint8Array))
  return Buffer.concat(chunks)
}

async function digest(stream: Readable): Promise<{ size: number; sha256: string }> {
  const hash = createHash('sha256')
  let size = 0
  for await (const chunk of stream) {
    size += (chunk as Buffer).length
    hash.update(chunk as Buffer)
  }
  return { size, sha256: hash.digest('hex') }
}

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const item of items) out.push(item)
  return out
}

/** `bytes` as a stream of `size`-byte chunks, pushed asynchronously. */
function chunked(bytes: Buffer, size: number): Readable {
  let offset = 0
  return new Readable({
    read() {
      if (offset >= bytes.length) return void this.push(null)
      const chunk = bytes.subarray(offset, offset + size)
      offset += chunk.length
      setImmediate(() => this.push(chunk))
    },
  })
}

/** Pushes `size` bytes in 1 MiB chunks, then never ends. */
function stallingAfter(size: number): Readable {
  let sent = 0
  return new Readable({
    read() {
      if (sent >= size) return
      const chunk = randomBytes(Math.min(MiB, size - sent))
      sent += chunk.length
      setImmediate(() => this.push(chunk))
    },
  })
}

async function waitFor(condition: () => boolean | Promise<boolean>, timeout = 15_000): Promise<void> {
  const until = Date.now() + timeout
  while (!(await condition())) {
    if (Date.now() > until) throw new Error('waitFor: timed out')
    await new Promise((resolve) => setTimeout(resolve, 10))
  }
}

/** Records the commands a client sends (name, input, and whether each finished). */
function record(client: S3Client) {
  const calls: Array<{ command: string; input: Record<string, unknown>; phase: 'start' | 'done' | 'failed' }> = []
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const command = String(context.commandName ?? '?').replace(/Command$/, '')
      const input = args.input as Record<string, unknown>
      calls.push({ command, input, phase: 'start' })
      try {
        const out = await next(args)
        calls.push({ command, input, phase: 'done' })
        return out
      } catch (err) {
        calls.push({ command, input, phase: 'failed' })
        throw err
      }
    },
    { step: 'initialize', name: `recorder-${randomBytes(4).toString('hex')}` },
  )
  return {
    calls,
    started: () => calls.filter((c) => c.phase === 'start').map((c) => c.command),
    finished: () => calls.filter((c) => c.phase === 'done').map((c) => c.command),
    inputs: (command: string) => calls.filter((c) => c.phase === 'start' && c.command === command).map((c) => c.input),
  }
}

/** A client of its own on the test server (to act behind a store's back). */
function rawClient(server: TestS3Server): S3Client {
  return new S3Client({
    region: 'us-east-1',
    endpoint: server.endpoint,
    forcePathStyle: true,
    credentials: { accessKeyId: S3RVER_ACCESS_KEY, secretAccessKey: S3RVER_SECRET_KEY },
    requestChecksumCalculation: 'WHEN_REQUIRED',
    responseChecksumValidation: 'WHEN_REQUIRED',
  })
}

/** An SDK request handler that answers every request with `status` and the XML `body`. */
function answering(status: number, body: string): NonNullable<S3ClientConfig['requestHandler']> {
  return {
    handle: async () => ({
      response: {
        statusCode: status,
        reason: '',
        headers: { 'content-type': 'application/xml', 'x-amz-request-id': 'REQ1' },
        body: Readable.from([Buffer.from(`<?xml version="1.0" encoding="UTF-8"?>\n${body}`)]),
      },
    }),
    updateHttpClientConfig: () => {},
    httpHandlerConfigs: () => ({}),
  } as unknown as NonNullable<S3ClientConfig['requestHandler']>
}

/** Every file below `dir` (none when it does not exist). */
async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = []
  const walk = async (d: string): Promise<void> => {
    let entries: Dirent[]
    try {
      entries = await readdir(d, { withFileTypes: true })
    } catch {
      return
    }
    for (const e of entries) {
      if (e.isDirectory()) await walk(join(d, e.name))
      else out.push(join(d, e.name))
    }
  }
  await walk(dir)
  return out
}
