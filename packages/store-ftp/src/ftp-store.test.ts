import { createHash, createHmac, randomBytes } from 'node:crypto'
import { mkdtemp, readdir, readFile, rm, unlink } from 'node:fs/promises'
import { createServer, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { inspect } from 'node:util'
import { AttachStorageError, createAttachHandler, createAttachStorage, openDatabase } from 'attach-storage'
import { describeStoreConformance } from 'attach-storage/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { createStore, FtpStore, parseFtpSettings } from './index.js'
import { startFtpServer, type TestFtpServer } from './testing/ftp-server.js'
import { selfSignedCertificate } from './testing/tls-cert.js'

const MiB = 1024 * 1024

// ---------------------------------------------------------------------------------------------------
// The conformance suite, over plain FTP against a real server (ftp-srv on 127.0.0.1).

describeStoreConformance(
  'FtpStore',
  async () => {
    const server = await startFtpServer()
    const store = new FtpStore('ftp', {
      host: server.host,
      port: server.port,
      user: server.user,
      password: server.password,
      root: '/store',
    })
    return { store, cleanup: () => server.close() }
  },
  { largeSize: 16 * MiB },
)

// ---------------------------------------------------------------------------------------------------

/** `length` bytes counting 0..255 from `seed`. */
function pattern(length: number, seed = 0): Buffer {
  const bytes = Buffer.allocUnsafe(length)
  for (let i = 0; i < length; i++) bytes[i] = (i + seed) & 255
  return bytes
}

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

async function rejection(fn: () => Promise<unknown>): Promise<unknown> {
  try {
    await fn()
  } catch (err) {
    return err
  }
  return expect.unreachable('expected the call to fail')
}

/** Every file under a local directory, as relative paths. */
async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = []
  const walk = async (d: string, rel: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true })) {
      if (e.isDirectory()) await walk(join(d, e.name), `${rel}${e.name}/`)
      else out.push(`${rel}${e.name}`)
    }
  }
  await walk(dir, '')
  return out.sort()
}

const storeOn = (server: TestFtpServer, extra: Record<string, unknown> = {}): FtpStore =>
  new FtpStore('ftp', {
    host: server.host,
    port: server.port,
    user: server.user,
    password: server.password,
    ...extra,
  })

describe('FtpStore over FTPS', () => {
  const tls = selfSignedCertificate()

  describe('explicit TLS (AUTH TLS), the certificate pinned with ca', () => {
    let server: TestFtpServer
    let store: FtpStore
    beforeAll(async () => {
      server = await startFtpServer({ tls })
      store = storeOn(server, { secure: true, secureOptions: { ca: tls.cert }, root: '/tls' })
    })
    afterAll(async () => {
      await store?.close()
      await server?.close()
    })

    it('puts, gets whole and ranged, lists, moves and deletes', async () => {
      const bytes = pattern(300_000, 7)
      expect(await store.put('a/b/one.bin', Readable.from([bytes.subarray(0, 1000), bytes.subarray(1000)]))).toEqual({
        size: bytes.length,
      })
      const read = async (range?: { start: number; end?: number }) => readAll(await store.get('a/b/one.bin', range))
      expect((await read()).equals(bytes)).toBe(true)
      expect((await read({ start: 5, end: 70_004 })).equals(bytes.subarray(5, 70_005))).toBe(true)
      expect((await read({ start: 299_990 })).equals(bytes.subarray(299_990))).toBe(true)
      expect((await store.stat('a/b/one.bin')).size).toBe(bytes.length)
      await store.copy('a/b/one.bin', 'a/c/two.bin')
      await store.move('a/c/two.bin', 'a/d/three.bin')
      const listed = []
      for await (const e of store.list('a/')) listed.push([e.key, e.size])
      expect(listed).toEqual([
        ['a/b/one.bin', bytes.length],
        ['a/d/three.bin', bytes.length],
      ])
      await store.delete('a/b/one.bin')
      await store.delete('a/d/three.bin')
      expect(await store.exists('a/b/one.bin')).toBe(false)
      expect(await filesUnder(server.dir)).toEqual([])
    })

    it('verifies the server certificate: without ca the self-signed one is refused', async () => {
      const strict = storeOn(server, { secure: true })
      try {
        const err = await rejection(() => strict.exists('x'))
        expect(err).toBeInstanceOf(AttachStorageError)
        expect(err).toMatchObject({ code: 'store-failure', status: 502 })
        expect((err as Error).message).toMatch(/cannot connect to 127\.0\.0\.1:\d+ as "attach" \(.*self[- ]signed/i)
      } finally {
        await strict.close()
      }
    })
  })

  it('implicit TLS: puts and gets (rejectUnauthorized: false)', async () => {
    const server = await startFtpServer({ tls, implicit: true })
    const store = storeOn(server, { secure: 'implicit', secureOptions: { rejectUnauthorized: false } })
    try {
      await store.put('x/implicit.txt', Buffer.from('over implicit TLS'))
      expect((await readAll(await store.get('x/implicit.txt', { start: 5 }))).toString()).toBe('implicit TLS')
      await store.delete('x/implicit.txt')
      expect(await filesUnder(server.dir)).toEqual([])
    } finally {
      await store.close()
      await server.close()
    }
  })
})

describe('FtpStore behaviour', () => {
  let server: TestFtpServer
  const stores: FtpStore[] = []
  const open = (extra: Record<string, unknown> = {}): FtpStore => {
    const store = storeOn(server, extra)
    stores.push(store)
    return store
  }
  beforeAll(async () => {
    server = await startFtpServer()
  })
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close()))
    await server?.close()
  })

  it('stores the exact bytes at root/key on the server, creating the root, leaving no partial file', async () => {
    const store = open({ root: '/deep/root' })
    const bytes = randomBytes(200_003)
    await store.put('/demo/2026/11/42/file name+x.bin', bytes)
    const onDisk = await readFile(join(server.dir, 'deep/root/demo/2026/11/42/file name+x.bin'))
    expect(createHash('sha256').update(onDisk).digest('hex')).toBe(createHash('sha256').update(bytes).digest('hex'))
    expect(await filesUnder(join(server.dir, 'deep/root'))).toEqual(['demo/2026/11/42/file name+x.bin'])
    // The last delete removes the folders it emptied, never the root.
    await store.delete('demo/2026/11/42/file name+x.bin')
    expect(await readdir(join(server.dir, 'deep/root'))).toEqual([])
  })

  it('takes a relative root from the login directory', async () => {
    const store = open({ root: 'rel/dir' })
    await store.put('k.txt', Buffer.from('relative'))
    expect(await readFile(join(server.dir, 'rel/dir/k.txt'), 'utf8')).toBe('relative')
  })

  it('keeps its connections across ranged reads and early-destroyed streams', async () => {
    const store = open({ poolSize: 2, root: '/ranges' })
    const bytes = pattern(2 * MiB, 3)
    await store.put('big.bin', bytes)
    const before = server.logins
    for (let i = 0; i < 8; i++) {
      const start = i * 100_000
      const got = await readAll(await store.get('big.bin', { start, end: start + 65_535 }))
      expect(got.equals(bytes.subarray(start, start + 65_536))).toBe(true)
    }
    for (let i = 0; i < 3; i++) {
      const stream = await store.get('big.bin')
      await new Promise<void>((resolve) => stream.once('data', () => resolve()))
      stream.destroy()
    }
    expect((await store.stat('big.bin')).size).toBe(bytes.length)
    expect(server.logins - before).toBeLessThanOrEqual(2)
  })

  it('serves 20 parallel operations over a pool of 2 connections', async () => {
    const store = open({ poolSize: 2, root: '/pool' })
    const before = server.logins
    const bodies = Array.from({ length: 10 }, (_, i) => pattern(50_000 + i * 1_001, i))
    const results = await Promise.all([
      ...bodies.map((b, i) => store.put(`p/${i}.bin`, i % 2 ? b : Readable.from([b]))),
      ...bodies.map(async (_b, i) => {
        // Each reader waits for its writer through exists(), itself another pooled operation.
        while (!(await store.exists(`p/${i}.bin`))) await new Promise((r) => setTimeout(r, 10))
        return readAll(await store.get(`p/${i}.bin`, { start: 1 }))
      }),
    ])
    expect(results.slice(0, 10)).toEqual(bodies.map((b) => ({ size: b.length })))
    for (const [i, got] of results.slice(10).entries()) expect((got as Buffer).equals((bodies[i] as Buffer).subarray(1))).toBe(true)
    expect(server.logins - before).toBe(2)
  })

  it('reports not-found for a file deleted behind its back', async () => {
    const store = open({ root: '/behind' })
    await store.put('gone/file.txt', Buffer.from('soon gone'))
    await unlink(join(server.dir, 'behind/gone/file.txt'))
    for (const call of [
      () => store.get('gone/file.txt'),
      () => store.get('gone/file.txt', { start: 1 }),
      () => store.stat('gone/file.txt'),
      () => store.copy('gone/file.txt', 'gone/copy.txt'),
      () => store.move('gone/file.txt', 'gone/moved.txt'),
    ]) {
      expect(await rejection(call)).toMatchObject({ name: 'AttachStorageError', code: 'not-found', status: 404 })
    }
    expect(await store.exists('gone/file.txt')).toBe(false)
    await store.delete('gone/file.txt')
  })

  it('fails a wrong password with a clear error that never holds the password', async () => {
    const secret = 'Wr0ng-Secret-42'
    const store = open({ password: secret })
    const err = await rejection(() => store.put('a.txt', Buffer.from('x')))
    expect(err).toBeInstanceOf(AttachStorageError)
    expect(err).toMatchObject({ code: 'store-failure', status: 502 })
    const message = (err as Error).message
    expect(message).toMatch(/^FTP store "ftp": put "a\.txt" failed: /)
    expect(message).toMatch(/the server refused the login of user "attach" at 127\.0\.0\.1:\d+ \(530 /)
    // This server repeats the password in its 530 reply; none of it may come through.
    for (const text of [message, String((err as Error).stack), inspect(err, { depth: 10 }), JSON.stringify(err)]) {
      expect(text).not.toContain(secret)
    }
  })

  it('fails quickly and cleanly when the server goes away in the middle of an upload', async () => {
    const doomed = await startFtpServer()
    const store = storeOn(doomed, { timeout: '5s' })
    let revived: TestFtpServer | undefined
    try {
      let pushed = 0
      let markStalled!: () => void
      const stalled = new Promise<void>((resolve) => (markStalled = resolve))
      const source = new Readable({
        read() {
          if (pushed >= 4) return markStalled()
          pushed++
          this.push(pattern(128 * 1024, pushed))
        },
      })
      const put = store.put('mid/upload.bin', source)
      put.catch(() => {})
      await stalled
      const t0 = Date.now()
      void doomed.stop()
      const err = await rejection(() => put)
      expect(Date.now() - t0).toBeLessThan(3_000)
      expect(err).toBeInstanceOf(AttachStorageError)
      expect(err).toMatchObject({ code: 'store-failure', status: 502 })
      expect((err as Error).message).toMatch(/^FTP store "ftp": put "mid\/upload\.bin" failed: /)
      // Back on the same port and directory: the next login removes the partial file left behind.
      await doomed.stop()
      expect(await filesUnder(doomed.dir)).toEqual([expect.stringMatching(/^mid\/\.upload\.bin\.[0-9a-f]{16}\.partial$/)])
      revived = await startFtpServer({ port: doomed.port, dir: doomed.dir })
      expect(await store.exists('mid/upload.bin')).toBe(false)
      expect(await filesUnder(doomed.dir)).toEqual([])
    } finally {
      await store.close()
      await doomed.close()
      await revived?.close()
    }
  })

  it('times out on a server that never answers', async () => {
    const sockets = new Set<Socket>()
    const silent = createServer((socket) => {
      sockets.add(socket)
      socket.on('error', () => {})
    })
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
    const port = (silent.address() as { port: number }).port
    const store = new FtpStore('mute', { host: '127.0.0.1', port, user: 'u', password: 'p4ssw0rd', timeout: '300ms' })
    try {
      const t0 = Date.now()
      const err = await rejection(() => store.stat('a'))
      expect(Date.now() - t0).toBeLessThan(3_000)
      expect(err).toMatchObject({ name: 'AttachStorageError', code: 'store-failure', status: 502 })
      expect((err as Error).message).toMatch(/^FTP store "mute": stat "a" failed: cannot connect to 127\.0\.0\.1:\d+ as "u"/)
      expect((err as Error).message).toMatch(/timeout/i)
    } finally {
      await store.close()
      for (const s of sockets) s.destroy()
      await new Promise((resolve) => silent.close(resolve))
    }
  })
})

describe('FtpStore settings', () => {
  const problem = (settings: Record<string, unknown>): AttachStorageError => {
    try {
      createStore('remote', settings)
    } catch (err) {
      expect(err).toBeInstanceOf(AttachStorageError)
      expect(err).toMatchObject({ code: 'config-invalid', status: 500 })
      return err as AttachStorageError
    }
    return expect.unreachable('expected the settings to be refused')
  }

  it('requires host', () => {
    expect(problem({ type: 'ftp' }).message).toMatch(/attach\.stores\.remote .*missing required settings: host/)
    expect(problem({ type: 'ftp', host: '  ' }).message).toMatch(/missing required settings: host/)
    expect(problem({ type: 'ftp', host: 'ftp://example.com/x' }).message).toMatch(/\.host must be a bare host name/)
  })

  it('names every problem at once, with hints for near misses', () => {
    const message = problem({
      type: 'ftp',
      host: 'h',
      port: 'abc',
      poolSize: 1,
      secure: 'yes',
      username: 'u',
      timeout: 'soon',
      root: '/a/../b',
      password: 42,
    }).message
    expect(message).toMatch(/\.port must be an integer from 1 to 65535/)
    expect(message).toMatch(/\.pool-size must be an integer from 2 to 64/)
    expect(message).toMatch(/\.secure must be true, false or "implicit"/)
    expect(message).toMatch(/unknown setting "username" \(did you mean "user"\?\)/)
    expect(message).toMatch(/\.timeout must be a number of seconds or a duration/)
    expect(message).toMatch(/\.root must be a directory path without control characters and without "\.\." segments/)
    expect(message).toMatch(/\.password must be a string/)
  })

  it('applies defaults and accepts values as a configuration file gives them', () => {
    expect(parseFtpSettings('r', { host: 'ftp.example.com' })).toEqual({
      host: 'ftp.example.com',
      port: 21,
      user: 'anonymous',
      password: 'guest',
      secure: false,
      secureOptions: {},
      root: undefined,
      poolSize: 4,
      timeout: 30_000,
      idleTimeout: 30_000,
    })
    expect(
      parseFtpSettings('r', {
        type: 'ftp',
        host: 'h',
        port: '2121',
        secure: 'true',
        secureOptions: { rejectUnauthorized: false },
        root: '/a//b/',
        poolSize: '3',
        timeout: '1.5s',
        idleTimeout: 10,
        cdnUrl: 'https://cdn.example.com/',
      }),
    ).toMatchObject({
      port: 2121,
      secure: true,
      secureOptions: { rejectUnauthorized: false },
      root: '/a/b',
      poolSize: 3,
      timeout: 1500,
      idleTimeout: 10_000,
    })
    expect(parseFtpSettings('r', { host: 'h', secure: 'implicit' })).toMatchObject({ port: 990, secure: 'implicit' })
    expect(parseFtpSettings('r', { host: 'h', root: '/' }).root).toBe('')
    expect(parseFtpSettings('r', { host: 'h', root: './x/' }).root).toBe('x')
  })

  it('creates the store without connecting', async () => {
    const store = await createStore('remote', { type: 'ftp', host: '127.0.0.1', port: 1 })
    expect(store).toBeInstanceOf(FtpStore)
    expect(store.type).toBe('ftp')
    expect(store.name).toBe('remote')
    await store.close()
  })
})

// ---------------------------------------------------------------------------------------------------
// The whole service with its files on FTP: temporary upload, confirmed save, ranged view, delete.

const SECRET = 'ftp-store-test-secret-0123456789'

/** An HS256 JWT for `sub`, made with node:crypto. */
function token(sub: string): string {
  const b64 = (value: unknown): string => Buffer.from(JSON.stringify(value)).toString('base64url')
  const now = Math.floor(Date.now() / 1000)
  const body = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, iat: now, exp: now + 600 })}`
  return `${body}.${createHmac('sha256', SECRET).update(body).digest('base64url')}`
}

describe('attach-storage on an FTP store', () => {
  let server: TestFtpServer
  let dir: string
  beforeAll(async () => {
    server = await startFtpServer()
    dir = await mkdtemp(join(tmpdir(), 'attach-ftp-service-'))
  })
  afterAll(async () => {
    await server?.close()
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  it('uploads, saves, serves a range and deletes through the HTTP handler', async () => {
    const db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
    const requested: string[] = []
    const storage = await createAttachStorage({
      config: {
        directory: { 'base-dir': join(dir, 'files') },
        stores: {
          remote: {
            type: 'ftp',
            host: server.host,
            port: server.port,
            user: server.user,
            password: server.password,
            root: '/',
          },
        },
        'default-store': 'remote',
        domains: { demo: {} },
      },
      db,
      jwt: { secret: SECRET },
      logger: { info: () => {}, warn: () => {}, error: () => {} },
      // The core's loader, pointed at this package's source (the workspace link need not exist here).
      importModule: async (specifier) => {
        requested.push(specifier)
        return import('./index.js')
      },
    })
    const handler = createAttachHandler(storage)
    const auth = { authorization: `Bearer ${token('7')}` }
    try {
      expect(requested).toEqual(['@attach-storage/store-ftp'])
      const content = 'attach-storage keeps this text on an FTP server. '.repeat(50)

      const form = new FormData()
      form.append('refDomain', 'demo')
      form.append('file', new Blob([content], { type: 'text/plain' }), 'notes.txt')
      let res = await handler.fetch(new Request('http://x/api/storage/attach/tmp', { method: 'POST', body: form, headers: auth }))
      expect(res.status).toBe(200)
      const item = ((await res.json()) as { files: Array<{ name: string; size: number }> }).files[0]!
      expect(item.size).toBe(content.length)

      res = await handler.fetch(
        new Request('http://x/api/storage/attach/demo/77', {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({ refDomain: 'demo', default: [{ savedName: item.name, displayName: 'notes.txt' }] }),
        }),
      )
      expect(res.status).toBe(200)
      const saved = (await res.json()) as { success: boolean; attachList: Array<{ id: number; savedDir: string }> }
      expect(saved.success).toBe(true)
      const record = saved.attachList[0]!
      expect(record.savedDir).toMatch(/^\/demo\/\d{4}\/\d{2}\/77\/$/)
      const onServer = join(server.dir, record.savedDir, item.name)
      expect(await readFile(onServer, 'utf8')).toBe(content)

      res = await handler.fetch(new Request(`http://x/assets/storage/attach/view/${record.id}`))
      expect(res.status).toBe(200)
      expect(await res.text()).toBe(content)

      res = await handler.fetch(new Request(`http://x/assets/storage/attach/view/${record.id}`, { headers: { range: 'bytes=15-41' } }))
      expect(res.status).toBe(206)
      expect(res.headers.get('content-range')).toBe(`bytes 15-41/${content.length}`)
      expect(await res.text()).toBe(content.slice(15, 42))

      res = await handler.fetch(
        new Request('http://x/api/storage/attach', {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify([{ id: record.id }]),
        }),
      )
      expect(await res.json()).toEqual({ success: true, count: 1 })
      expect(await filesUnder(server.dir)).toEqual([])
      res = await handler.fetch(new Request(`http://x/assets/storage/attach/view/${record.id}`))
      expect(res.status).toBe(404)
    } finally {
      await storage.close()
      await db.destroy()
    }
  })
})
