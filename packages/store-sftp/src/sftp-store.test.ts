import { createHash, randomBytes } from 'node:crypto'
import type { Dirent } from 'node:fs'
import { mkdtemp, readdir, readFile, rm, stat, unlink, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { inspect } from 'node:util'
import { AttachStorageError, createAttachHandler, createAttachStorage, openDatabase, type Store } from 'attach-storage'
import { describeStoreConformance } from 'attach-storage/testing'
import { SignJWT } from 'jose'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { createStore, SftpStore, type SftpStoreOptions } from './index.js'
import { startTestSshd, type TestSshd } from './test-sshd.js'

const MiB = 1024 * 1024

/** One OpenSSH server for the whole file, started on first use. */
let sshdPromise: Promise<TestSshd> | undefined
const server = (): Promise<TestSshd> => (sshdPromise ??= startTestSshd())
afterAll(async () => {
  const sshd = await sshdPromise?.catch(() => undefined)
  await sshd?.cleanup()
})

/** Password login under `root` (relative to the login directory unless absolute). */
function passwordOptions(sshd: TestSshd, root: string, extra: Partial<SftpStoreOptions> = {}): SftpStoreOptions {
  return { host: sshd.host, port: sshd.port, username: sshd.username, password: sshd.password, root, ...extra }
}

const pattern = (length: number, seed = 0): Buffer => {
  const bytes = Buffer.allocUnsafe(length)
  for (let i = 0; i < length; i++) bytes[i] = (i * 7 + seed) & 255
  return bytes
}
const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex')

async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(chunk as Buffer)
  return Buffer.concat(chunks)
}

async function rejection(promise: Promise<unknown>): Promise<AttachStorageError> {
  try {
    await promise
  } catch (err) {
    return err as AttachStorageError
  }
  return expect.unreachable('expected a rejection') as never
}

/** Every file below `dir`, relative, dot files included. */
async function filesUnder(dir: string): Promise<string[]> {
  const out: string[] = []
  const walk = async (d: string, prefix: string): Promise<void> => {
    let entries: Dirent[]
    try {
      entries = await readdir(d, { withFileTypes: true })
    } catch {
      return
    }
    for (const e of entries) {
      if (e.isDirectory()) await walk(join(d, e.name), `${prefix}${e.name}/`)
      else out.push(`${prefix}${e.name}`)
    }
  }
  await walk(dir, '')
  return out.sort()
}

/** Everything an error could show in a log: message, stack, causes, own properties, JSON. */
const everythingOf = (value: unknown): string =>
  `${inspect(value, { depth: Infinity, showHidden: true })}\n${JSON.stringify(value)}\n${String((value as Error)?.stack)}`

// ------------------------------------------------------------------------------------------------

describeStoreConformance(
  'SftpStore (password, relative root, pool of 4, server-side copy)',
  async () => {
    const sshd = await server()
    return { store: new SftpStore('sftp-password', passwordOptions(sshd, 'conformance-password')) }
  },
  { largeSize: 16 * MiB },
)

describeStoreConformance(
  'SftpStore (private key with passphrase, host-hash, absolute root, pool of 1, streamed copy)',
  async () => {
    const sshd = await server()
    const store = new SftpStore('sftp-key', {
      host: sshd.host,
      port: String(sshd.port),
      username: sshd.username,
      privateKey: sshd.privateKeyPath,
      passphrase: sshd.passphrase,
      hostHash: sshd.hostFingerprint,
      root: join(sshd.home, 'conformance-key'),
      poolSize: 1,
      serverCopy: false,
    })
    return { store }
  },
  { largeSize: 16 * MiB },
)

describe('SftpStore on OpenSSH', () => {
  let sshd: TestSshd
  const stores: Store[] = []
  const track = <T extends Store>(store: T): T => {
    stores.push(store)
    return store
  }
  beforeAll(async () => {
    sshd = await server()
  })
  afterAll(async () => {
    await Promise.all(stores.map((s) => s.close().catch(() => undefined)))
  })

  it('stores exactly the bytes given, and reads bytes written on the server as they are', async () => {
    const store = track(new SftpStore('exact', passwordOptions(sshd, 'exact')))
    const bytes = randomBytes(200_003)
    expect(await store.put('a/b/c.bin', bytes)).toEqual({ size: bytes.length })
    const onDisk = await readFile(join(sshd.home, 'exact/a/b/c.bin'))
    expect(onDisk.equals(bytes)).toBe(true)

    const written = pattern(4099, 3)
    await writeFile(join(sshd.home, 'exact/a/b/server-side.bin'), written)
    expect((await readAll(await store.get('a/b/server-side.bin'))).equals(written)).toBe(true)
    expect((await readAll(await store.get('a/b/server-side.bin', { start: 4000 }))).equals(written.subarray(4000))).toBe(true)
    // No temporary file is left beside them.
    expect(await filesUnder(join(sshd.home, 'exact'))).toEqual(['a/b/c.bin', 'a/b/server-side.bin'])
  })

  it('streams 16 MiB and a bit, stored byte for byte', async () => {
    const store = track(new SftpStore('large', passwordOptions(sshd, 'large')))
    const size = 16 * MiB + 12_345
    const block = randomBytes(MiB)
    const hash = createHash('sha256')
    let sent = 0
    const source = new Readable({
      read() {
        if (sent >= size) return void this.push(null)
        const chunk = Buffer.from(block.subarray(0, Math.min(block.length - 1, size - sent)))
        chunk.writeUInt32BE(sent, 0)
        sent += chunk.length
        hash.update(chunk)
        this.push(chunk)
      },
    })
    const started = Date.now()
    expect(await store.put('big/file.bin', source)).toEqual({ size })
    const expected = hash.digest('hex')
    expect(sha256(await readFile(join(sshd.home, 'large/big/file.bin')))).toBe(expected)
    expect(sha256(await readAll(await store.get('big/file.bin')))).toBe(expected)
    expect(Date.now() - started).toBeLessThan(30_000)
  })

  it('shares a pool of 2 between many concurrent operations, and unread streams do not block others', async () => {
    const store = track(new SftpStore('pool', passwordOptions(sshd, 'pool', { poolSize: 2 })))
    const bodies = Array.from({ length: 24 }, (_, i) => pattern(20_000 + i * 1_001, i))
    await Promise.all(bodies.map((b, i) => store.put(`p/${i % 4}/${i}.bin`, b)))
    const results = await Promise.all([
      ...bodies.map(async (b, i) => (await readAll(await store.get(`p/${i % 4}/${i}.bin`))).equals(b)),
      ...bodies.map(async (b, i) => (await store.stat(`p/${i % 4}/${i}.bin`)).size === b.length),
      ...bodies.map((_, i) => store.exists(`p/${i % 4}/${i}.bin`)),
    ])
    expect(results.every(Boolean)).toBe(true)
    expect(store.poolStats.created).toBeLessThanOrEqual(2)
    expect(store.poolStats.open).toBeLessThanOrEqual(2)

    // Three streams held open and unread: both connections stay usable.
    const held = await Promise.all([0, 1, 2].map((i) => store.get(`p/${i}/${i}.bin`)))
    expect(store.poolStats.busy).toBe(3)
    await store.put('p/while-held.bin', pattern(100_000))
    await store.copy('p/while-held.bin', 'p/copy.bin')
    expect((await readAll(await store.get('p/copy.bin'))).equals(pattern(100_000))).toBe(true)
    for (const s of held) s.destroy()
    await vi.waitFor(() => expect(store.poolStats.busy).toBe(0))
    expect(store.poolStats.created).toBeLessThanOrEqual(2)
    expect((await collect(store.list('p/'))).length).toBe(26)
  })

  it('drops a broken connection and replaces it', async () => {
    const store = track(new SftpStore('replace', passwordOptions(sshd, 'replace', { poolSize: 1 })))
    await store.put('r/a.txt', pattern(10))
    expect(store.poolStats).toMatchObject({ open: 1, created: 1 })
    await sshd.killSessions()
    await vi.waitFor(() => expect(store.poolStats.open).toBe(0))
    expect(await store.exists('r/a.txt')).toBe(true)
    await store.put('r/b.txt', pattern(20))
    expect((await readAll(await store.get('r/b.txt'))).equals(pattern(20))).toBe(true)
    expect(store.poolStats).toMatchObject({ open: 1, created: 2 })
  })

  it('times out a connection that stopped answering, and retries on a fresh one', async () => {
    const store = track(new SftpStore('frozen', passwordOptions(sshd, 'frozen', { poolSize: 1, timeout: 1 })))
    await store.put('f/a.txt', pattern(10))
    await sshd.freezeSessions()
    try {
      const started = Date.now()
      expect(await store.exists('f/a.txt')).toBe(true)
      expect(Date.now() - started).toBeGreaterThanOrEqual(900)
      expect(Date.now() - started).toBeLessThan(5_000)
      expect(store.poolStats).toMatchObject({ open: 1, created: 2 })
      await sshd.freezeSessions()
      // A put opens its partial file on a fresh connection too, before reading any byte of the body.
      expect(await store.put('f/b.txt', Readable.from([pattern(30)]))).toEqual({ size: 30 })
      expect(store.poolStats).toMatchObject({ open: 1, created: 3 })
      expect((await readFile(join(sshd.home, 'frozen/f/b.txt'))).equals(pattern(30))).toBe(true)
    } finally {
      await sshd.killSessions()
    }
  })

  it('reports a file deleted behind its back as not-found', async () => {
    const store = track(new SftpStore('behind', passwordOptions(sshd, 'behind')))
    await store.put('d/gone.txt', pattern(10))
    await store.put('d/kept.txt', pattern(11))
    await unlink(join(sshd.home, 'behind/d/gone.txt'))
    for (const call of [() => store.get('d/gone.txt'), () => store.get('d/gone.txt', { start: 1 }), () => store.stat('d/gone.txt')]) {
      expect(await rejection(call())).toMatchObject({ name: 'AttachStorageError', code: 'not-found', status: 404 })
    }
    expect(await rejection(store.copy('d/gone.txt', 'd/x.txt'))).toMatchObject({ code: 'not-found', status: 404 })
    expect(await rejection(store.move('d/gone.txt', 'd/x.txt'))).toMatchObject({ code: 'not-found', status: 404 })
    expect(await store.exists('d/gone.txt')).toBe(false)
    await store.delete('d/gone.txt')
    expect((await collect(store.list('d/'))).map((e) => e.key)).toEqual(['d/kept.txt'])
  })

  it('refuses a wrong password with a clear store-failure that never shows it', async () => {
    const wrong = `wrong-${randomBytes(8).toString('hex')}`
    const store = track(new SftpStore('wrong', passwordOptions(sshd, 'wrong', { password: wrong })))
    const started = Date.now()
    const err = await rejection(store.exists('a.txt'))
    expect(Date.now() - started).toBeLessThan(10_000)
    expect(err).toBeInstanceOf(AttachStorageError)
    expect(err).toMatchObject({ code: 'store-failure', status: 502 })
    expect(err.message).toMatch(/SFTP store "wrong": cannot connect to attach-sftp-\w+@127\.0\.0\.1:\d+: .*authentication/i)
    expect(everythingOf(err)).not.toContain(wrong)
    // The same again: a failed connection is not kept.
    expect(await rejection(store.stat('a.txt'))).toMatchObject({ code: 'store-failure' })
    expect(store.poolStats.open).toBe(0)
  })

  it('never shows the password, passphrase or key in errors or in the store object', async () => {
    const keyText = await readFile(sshd.privateKeyPath, 'utf8')
    const store = track(
      new SftpStore('secrets', {
        host: sshd.host,
        port: sshd.port,
        username: 'nobody-allowed-here',
        password: sshd.password,
        privateKey: keyText,
        passphrase: sshd.passphrase,
      }),
    )
    const errors = [await rejection(store.put('a/b.txt', pattern(5))), await rejection(store.get('a/b.txt'))]
    // A real failure on a working connection: the user may not write to "/".
    const denied = track(new SftpStore('denied', passwordOptions(sshd, '/')))
    const refused = await rejection(denied.put('not-allowed.txt', pattern(5)))
    expect(refused).toMatchObject({ code: 'store-failure', status: 502 })
    expect(refused.message).toMatch(/SFTP store "denied": put of "not-allowed\.txt" failed: .*Permission denied/i)
    errors.push(refused)
    const keyBody = keyText.split('\n')[2]!
    for (const err of errors) {
      expect(err).toMatchObject({ name: 'AttachStorageError', code: 'store-failure', status: 502 })
      const shown = everythingOf(err)
      for (const secret of [sshd.password, sshd.passphrase, keyBody]) expect(shown).not.toContain(secret)
    }
    for (const s of [store, denied]) {
      const shown = `${inspect(s, { depth: Infinity, showHidden: true })}${JSON.stringify(s)}`
      for (const secret of [sshd.password, sshd.passphrase, keyBody]) expect(shown).not.toContain(secret)
    }
  })

  it('refuses a server whose host key does not match host-hash, and accepts the right one', async () => {
    const other = `SHA256:${Buffer.alloc(32, 7).toString('base64').replace(/=+$/, '')}`
    const store = track(new SftpStore('mitm', passwordOptions(sshd, 'mitm', { hostHash: other })))
    const err = await rejection(store.put('a.txt', pattern(3)))
    expect(err).toMatchObject({ code: 'store-failure', status: 502 })
    expect(err.message).toContain(`host key of 127.0.0.1:${sshd.port} (${sshd.hostFingerprint}) does not match host-hash`)
    expect(await filesUnder(join(sshd.home, 'mitm'))).toEqual([])

    const hex = Buffer.from(sshd.hostFingerprint.slice(7), 'base64').toString('hex')
    const good = track(new SftpStore('trusted', passwordOptions(sshd, 'trusted', { hostHash: [other, hex] })))
    await good.put('a.txt', pattern(3))
    expect(await good.exists('a.txt')).toBe(true)
  })

  it('validates its settings with config-invalid errors that name the setting', async () => {
    const sshd2 = sshd
    const base = { host: '127.0.0.1', password: 'x' }
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{}, /missing required settings: host/],
      [{ host: '', password: 'x' }, /missing required settings: host/],
      [{ host: '127.0.0.1' }, /needs a password or a private-key/],
      [{ ...base, port: 'abc' }, /port must be an integer from 1 to 65535/],
      [{ ...base, port: 70000 }, /port must be an integer/],
      [{ ...base, poolSize: 0 }, /pool-size must be an integer from 1 to 64/],
      [{ ...base, timeout: 'soon' }, /timeout must be a number of seconds or a duration/],
      [{ ...base, hostHash: 'md5:abc' }, /host-hash must be a SHA-256 host key fingerprint/],
      [{ ...base, serverCopy: 'maybe' }, /server-copy must be true or false/],
      [{ ...base, privateKey: '/nonexistent/id_ed25519' }, /private-key file "\/nonexistent\/id_ed25519" cannot be read \(ENOENT\)/],
      [{ ...base, privateKey: sshd2.privateKeyPath }, /private-key cannot be parsed: .*passphrase/],
      [{ ...base, privateKey: sshd2.privateKeyPath, passphrase: 'not-the-passphrase' }, /private-key cannot be parsed: .*wrong passphrase/],
      [{ ...base, private_key: 'x', rooot: '/x' }, /unknown setting "private_key".*unknown setting "rooot"/],
      [{ ...base, password: 42 }, /password must be a string/],
    ]
    for (const [settings, message] of cases) {
      let err: unknown
      try {
        await createStore('bad', { type: 'sftp', ...settings })
      } catch (e) {
        err = e
      }
      expect(err, JSON.stringify(settings)).toMatchObject({ name: 'AttachStorageError', code: 'config-invalid' })
      expect((err as Error).message, JSON.stringify(settings)).toMatch(/^attach\.stores\.bad[ .:]/)
      expect((err as Error).message, JSON.stringify(settings)).toMatch(message)
      expect(everythingOf(err)).not.toContain('not-the-passphrase')
    }
    const ok = await createStore('ok', {
      type: 'sftp',
      cdnUrl: 'https://cdn.example.com/',
      host: 'h',
      port: '2222',
      username: 'u',
      password: 'p',
      poolSize: '3',
      timeout: '45s',
      connectTimeout: 5,
      keepaliveInterval: 0,
      root: '/srv/files/',
    })
    expect(ok).toBeInstanceOf(SftpStore)
    expect(ok).toMatchObject({ name: 'ok', type: 'sftp', root: '/srv/files' })
    await ok.close()
  })

  it('runs the whole service on SFTP: temporary upload, confirmed save, ranged view, delete', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'attach-sftp-service-'))
    const db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
    const secret = 'sftp-service-test-secret-0123456789'
    const storage = await createAttachStorage({
      config: {
        directory: { baseDir: join(dir, 'files'), tmpDir: join(dir, 'tmp') },
        stores: {
          remote: {
            type: 'sftp',
            host: '127.0.0.1',
            port: sshd.port,
            username: sshd.username,
            password: sshd.password,
            root: 'service',
          },
        },
        'default-store': 'remote',
        domains: { demo: {} },
      },
      db,
      jwt: { secret },
      logger: { info: () => {}, warn: () => {}, error: () => {} },
    })
    try {
      const handler = createAttachHandler(storage)
      const token = await new SignJWT({})
        .setProtectedHeader({ alg: 'HS256' })
        .setSubject('7')
        .setIssuedAt()
        .setExpirationTime('1h')
        .sign(new TextEncoder().encode(secret))
      const auth = { authorization: `Bearer ${token}` }
      const content = 'hello over sftp: 0123456789'

      const form = new FormData()
      form.append('refDomain', 'demo')
      form.append('file', new Blob([content], { type: 'text/plain' }), 'hello.txt')
      let res = await handler.fetch(new Request('http://x/api/storage/attach/tmp', { method: 'POST', body: form, headers: auth }))
      expect(res.status).toBe(200)
      const tmp = ((await res.json()) as { files: Array<{ name: string }> }).files[0]!

      res = await handler.fetch(
        new Request('http://x/api/storage/attach/demo/501', {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify({ default: [{ savedName: tmp.name, displayName: 'hello.txt' }] }),
        }),
      )
      expect(res.status).toBe(200)
      const saved = ((await res.json()) as { attachList: Array<{ id: number; savedDir: string; savedName: string }> }).attachList[0]!
      const remotePath = join(sshd.home, 'service', saved.savedDir, saved.savedName)
      expect(await readFile(remotePath, 'utf8')).toBe(content)

      res = await handler.fetch(new Request(`http://x/assets/storage/attach/view/${saved.id}`, { headers: { range: 'bytes=6-9' } }))
      expect(res.status).toBe(206)
      expect(res.headers.get('content-range')).toBe(`bytes 6-9/${content.length}`)
      expect(await res.text()).toBe(content.slice(6, 10))
      res = await handler.fetch(new Request(`http://x/assets/storage/attach/view/${saved.id}`))
      expect(await res.text()).toBe(content)

      res = await handler.fetch(
        new Request('http://x/api/storage/attach', {
          method: 'POST',
          headers: { ...auth, 'content-type': 'application/json' },
          body: JSON.stringify([{ id: saved.id }]),
        }),
      )
      expect(await res.json()).toEqual({ success: true, count: 1 })
      await expect(stat(remotePath)).rejects.toMatchObject({ code: 'ENOENT' })
      expect(await filesUnder(join(sshd.home, 'service'))).toEqual([])
      res = await handler.fetch(new Request(`http://x/assets/storage/attach/view/${saved.id}`))
      expect(res.status).toBe(404)
    } finally {
      await storage.close()
      await db.destroy()
      await rm(dir, { recursive: true, force: true })
    }
  })
})

describe('SftpStore when the server dies', () => {
  let sshd: TestSshd
  beforeAll(async () => {
    sshd = await startTestSshd()
  })
  afterAll(async () => {
    await sshd?.cleanup()
  })

  it('fails an upload cleanly and quickly when the server is killed mid-upload, and removes the partial file later', async () => {
    const store = new SftpStore('crash', passwordOptions(sshd, 'crash', { poolSize: 1, timeout: 5 }))
    try {
      await store.put('keep/old.bin', pattern(1000))
      const dir = join(sshd.home, 'crash/keep')
      // An endless, paced source: the upload is still running when the server dies.
      let produced = 0
      const source = new Readable({
        read() {
          setTimeout(() => {
            produced += 64 * 1024
            this.push(pattern(64 * 1024, produced & 255))
          }, 2)
        },
      })
      const put = store.put('keep/new.bin', source)
      put.catch(() => {})
      await vi.waitFor(
        async () => {
          const partial = (await readdir(dir)).find((n) => n.endsWith('.partial'))
          expect(partial).toBeDefined()
          expect((await stat(join(dir, partial!))).size).toBeGreaterThan(256 * 1024)
        },
        { timeout: 10_000, interval: 20 },
      )
      await sshd.kill()
      const killed = Date.now()
      const err = await rejection(put)
      expect(Date.now() - killed).toBeLessThan(3_000)
      expect(err).toBeInstanceOf(AttachStorageError)
      expect(err).toMatchObject({ code: 'store-failure', status: 502 })
      expect(err.message).toMatch(/^SFTP store "crash": put of "keep\/new\.bin" failed: /)
      expect(everythingOf(err)).not.toContain(sshd.password)
      source.destroy()
      // The server is down: the partial file is still there, and the store cannot remove it yet.
      expect((await readdir(dir)).some((n) => n.endsWith('.partial'))).toBe(true)
      expect(await rejection(store.exists('keep/old.bin'))).toMatchObject({ code: 'store-failure' })

      await sshd.start()
      expect(await store.exists('keep/old.bin')).toBe(true)
      expect(await store.exists('keep/new.bin')).toBe(false)
      // The next connection removes the partial file the crash left behind.
      await vi.waitFor(async () => expect(await readdir(dir)).toEqual(['old.bin']), { timeout: 5_000 })
    } finally {
      await store.close()
    }
  })
})

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const item of items) out.push(item)
  return out
}
