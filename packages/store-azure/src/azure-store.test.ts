import { createHash, createHmac, randomBytes } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { createServer, request, type IncomingHttpHeaders } from 'node:http'
import type { Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Readable } from 'node:stream'
import { inspect } from 'node:util'
import {
  AccountSASPermissions,
  AccountSASResourceTypes,
  AccountSASServices,
  BlobServiceClient,
  ContainerClient,
  generateAccountSASQueryParameters,
  StorageSharedKeyCredential,
} from '@azure/storage-blob'
import { AttachStorageError, createAttachHandler, createAttachStorage, openDatabase, type Store } from 'attach-storage'
import { startAzurite, type Azurite } from './test-azurite.js'
import { describeStoreConformance, expectRedirectServing, generatedStream } from 'attach-storage/testing'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AzureBlobStore, createStore } from './index.js'

// The well-known development account of Azurite (documented, not a secret).
const ACCOUNT = 'devstoreaccount1'
const ACCOUNT_KEY = 'Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=='
const MiB = 1024 * 1024

const connectionString = (port: number, key = ACCOUNT_KEY): string =>
  `DefaultEndpointsProtocol=http;AccountName=${ACCOUNT};AccountKey=${key};BlobEndpoint=http://127.0.0.1:${port}/${ACCOUNT};`

// ---------------------------------------------------------------------------------------------------
// Azurite, started once for the file

// ---------------------------------------------------------------------------------------------------
// A small HTTP proxy in front of Azurite: records requests, can refuse server-side copies, can stop

interface Proxy {
  port: number
  requests: Array<{ method: string; url: string; headers: IncomingHttpHeaders }>
  /** Closes the listener and cuts every open connection: the "server" is gone. */
  stop(): Promise<void>
}

async function startProxy(target: number, options: { refuseCopy?: 403 | 404 } = {}): Promise<Proxy> {
  const requests: Proxy['requests'] = []
  const sockets = new Set<Socket>()
  const server = createServer((req, res) => {
    requests.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers })
    if (options.refuseCopy && req.headers['x-ms-copy-source']) {
      req.resume()
      // Real Azure answers 404 when it cannot authorize a private source, 401/403 otherwise.
      res.writeHead(options.refuseCopy, { 'content-type': 'application/xml', 'x-ms-error-code': 'CannotVerifyCopySource' })
      res.end(
        '<?xml version="1.0" encoding="utf-8"?><Error><Code>CannotVerifyCopySource</Code>' +
          '<Message>The test proxy refuses server-side copies.</Message></Error>',
      )
      return
    }
    const upstream = request({ host: '127.0.0.1', port: target, method: req.method, path: req.url, headers: req.headers }, (answer) => {
      res.writeHead(answer.statusCode ?? 502, answer.rawHeaders)
      answer.pipe(res)
    })
    upstream.on('error', () => res.destroy())
    req.pipe(upstream)
  })
  server.on('connection', (socket) => {
    sockets.add(socket)
    socket.on('close', () => sockets.delete(socket))
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  const address = server.address()
  return {
    port: typeof address === 'object' && address ? address.port : 0,
    requests,
    async stop() {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()))
      for (const socket of sockets) socket.destroy()
      await closed
    },
  }
}

// ---------------------------------------------------------------------------------------------------
// Helpers

async function readAll(stream: NodeJS.ReadableStream): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk as unknown as Uint8Array))
  return Buffer.concat(chunks)
}

const sha256 = (bytes: Uint8Array): string => createHash('sha256').update(bytes).digest('hex')

async function rejection(fn: () => unknown): Promise<unknown> {
  try {
    await fn()
  } catch (err) {
    return err
  }
  return expect.unreachable('expected the call to fail')
}

async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const item of items) out.push(item)
  return out
}

/** Everything an error could show: message, JSON body, and the full inspection with its cause. */
const everythingOf = (err: unknown): string =>
  [String((err as Error).message), JSON.stringify(err), inspect(err, { depth: null })].join('\n')

/** A download name as `filename*` carries it (RFC 5987), as the core encodes it. */
function rfc5987(name: string): string {
  return encodeURIComponent(name).replace(/['()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
}

/** A HS256 JWT (what the service's `jwt.secret` verifies). */
function signJwt(sub: string, secret: string): string {
  const b64 = (value: unknown) => Buffer.from(JSON.stringify(value)).toString('base64url')
  const now = Math.floor(Date.now() / 1000)
  const unsigned = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, iat: now, exp: now + 600 })}`
  return `${unsigned}.${createHmac('sha256', secret).update(unsigned).digest('base64url')}`
}

// ---------------------------------------------------------------------------------------------------

let azurite: Azurite
let service: BlobServiceClient

beforeAll(async () => {
  azurite = await startAzurite()
  service = BlobServiceClient.fromConnectionString(connectionString(azurite.port), { retryOptions: { maxTries: 1 } })
})

afterAll(async () => {
  await azurite?.stop()
})

describeStoreConformance(
  'AzureBlobStore',
  async () => ({
    store: new AzureBlobStore('az', {
      connectionString: connectionString(azurite.port),
      container: 'conformance',
      createContainer: true,
    }),
  }),
  { largeSize: 32 * MiB },
)

// Under a prefix, with small blocks so that the multi-block upload path runs in most cases too.
describeStoreConformance(
  'AzureBlobStore with a prefix and 256 KiB blocks',
  async () => ({
    store: createStore('az-prefixed', {
      type: 'azure',
      connectionString: connectionString(azurite.port),
      container: 'conformance',
      prefix: 'tenant-a/files',
      createContainer: true,
      blockSize: '256KB',
    }) as Store,
  }),
  { largeSize: 6 * MiB },
)

describe('AzureBlobStore on Azurite', () => {
  let store: AzureBlobStore
  let container: ContainerClient

  beforeAll(async () => {
    container = service.getContainerClient('extra')
    await container.createIfNotExists()
    store = new AzureBlobStore('az', { connectionString: connectionString(azurite.port), container: 'extra', prefix: 'p/' })
  })

  afterAll(async () => {
    await store?.close()
  })

  it('stores the exact bytes under prefix + key, with the content type', async () => {
    const bytes = randomBytes(100_003)
    await store.put('demo/2026/11/42/a.png', bytes, { contentType: 'image/png' })
    const blob = container.getBlobClient('p/demo/2026/11/42/a.png')
    expect(sha256(await blob.downloadToBuffer())).toBe(sha256(bytes))
    expect((await blob.getProperties()).contentType).toBe('image/png')
    expect(await store.exists('/demo/2026/11/42/a.png')).toBe(true)
    expect((await collect(store.list('demo/'))).map((e) => e.key)).toEqual(['demo/2026/11/42/a.png'])
  })

  it('streams a 24 MiB upload in blocks and commits it whole', async () => {
    const source = generatedStream(24 * MiB, { chunkSize: MiB })
    const key = 'big/stream.bin'
    const started = Date.now()
    expect(await store.put(key, source.stream, { contentType: 'application/x-test' })).toEqual({ size: 24 * MiB })
    const blob = container.getBlockBlobClient(`p/${key}`)
    const blocks = await blob.getBlockList('all')
    expect(blocks.committedBlocks?.length).toBe(6) // 4 MiB blocks
    expect(blocks.uncommittedBlocks ?? []).toEqual([])
    expect((await blob.getProperties()).contentType).toBe('application/x-test')
    expect(sha256(await readAll(await store.get(key)))).toBe(source.sha256())
    expect(Date.now() - started).toBeLessThan(60_000)
    await store.delete(key)
  })

  it('passes a range through to the service (x-ms-range), not a whole download', async () => {
    const proxy = await startProxy(azurite.port)
    const viaProxy = new AzureBlobStore('az-proxy', {
      connectionString: connectionString(proxy.port),
      container: 'extra',
      prefix: 'p/',
    })
    try {
      const bytes = randomBytes(10_000)
      await viaProxy.put('range/a.bin', bytes)
      proxy.requests.length = 0
      const part = await readAll(await viaProxy.get('range/a.bin', { start: 100, end: 199 }))
      expect(part.equals(bytes.subarray(100, 200))).toBe(true)
      const tail = await readAll(await viaProxy.get('range/a.bin', { start: 9_990, end: 50_000 }))
      expect(tail.equals(bytes.subarray(9_990))).toBe(true)
      const ranges = proxy.requests.filter((r) => r.method === 'GET').map((r) => r.headers['x-ms-range'])
      expect(ranges).toEqual(['bytes=100-199', 'bytes=9990-50000'])
      expect(await rejection(() => viaProxy.get('range/a.bin', { start: 10_000 }))).toMatchObject({
        code: 'range-not-satisfiable',
        status: 416,
        details: { size: 10_000 },
      })
    } finally {
      await viaProxy.close()
      await proxy.stop()
    }
  })

  it('an aborted multi-block upload leaves no blob (staged blocks are never committed)', async () => {
    const small = new AzureBlobStore('az-small', {
      connectionString: connectionString(azurite.port),
      container: 'extra',
      blockSize: '256KB',
    })
    const controller = new AbortController()
    let produced = 0
    let release!: () => void
    const stalled = new Promise<void>((resolve) => {
      release = resolve
    })
    // 2 MiB, then the source stalls (a slow client) and the request is aborted.
    const source = new Readable({
      read() {
        if (produced >= 2 * MiB) {
          release()
          return
        }
        produced += 64 * 1024
        this.push(randomBytes(64 * 1024))
      },
    })
    const put = small.put('aborted/a.bin', source, { signal: controller.signal })
    put.catch(() => {})
    await stalled
    await new Promise((r) => setTimeout(r, 200)) // let some Put Block requests finish
    controller.abort()
    const err = await rejection(() => put)
    expect((err as Error).name).toBe('AbortError')
    expect(source.destroyed).toBe(true)
    expect(await small.exists('aborted/a.bin')).toBe(false)
    expect(await collect(small.list('aborted/'))).toEqual([])
    expectErrorCode(await rejection(() => small.get('aborted/a.bin')), 'not-found', 404)
  })

  it("a blob deleted behind the store's back is not-found everywhere", async () => {
    await store.put('gone/a.txt', Buffer.from('soon gone'))
    await container.getBlobClient('p/gone/a.txt').delete()
    expect(await store.exists('gone/a.txt')).toBe(false)
    expectErrorCode(await rejection(() => store.get('gone/a.txt')), 'not-found', 404)
    expectErrorCode(await rejection(() => store.get('gone/a.txt', { start: 2 })), 'not-found', 404)
    expectErrorCode(await rejection(() => store.stat('gone/a.txt')), 'not-found', 404)
    expectErrorCode(await rejection(() => store.copy('gone/a.txt', 'gone/b.txt')), 'not-found', 404)
    expectErrorCode(await rejection(() => store.move('gone/a.txt', 'gone/b.txt')), 'not-found', 404)
    await store.delete('gone/a.txt')
    expect(await collect(store.list('gone/'))).toEqual([])
  })

  it('wrong credentials give a clear store-failure that never shows the key', async () => {
    const wrongKey = Buffer.from('this is not the account key of devstoreaccount1, at all').toString('base64')
    const cs = connectionString(azurite.port, wrongKey)
    const bad = new AzureBlobStore('az-bad', { connectionString: cs, container: 'extra', maxTries: 1 })
    const calls: Array<() => unknown> = [
      () => bad.put('x/a.bin', Buffer.from('x')),
      () => bad.put('x/b.bin', Readable.from([Buffer.from('x')])),
      () => bad.get('x/a.bin'),
      () => bad.stat('x/a.bin'),
      () => bad.exists('x/a.bin'),
      () => bad.copy('x/a.bin', 'x/c.bin'),
      () => bad.delete('x/a.bin'),
      () => collect(bad.list('x/')),
    ]
    for (const call of calls) {
      const err = await rejection(call)
      expectErrorCode(err, 'store-failure', 502)
      expect((err as Error).message).toMatch(/Azure store "az-bad".*refused the credentials \(403/)
      const shown = everythingOf(err)
      expect(shown).not.toContain(wrongKey)
      expect(shown).not.toContain(wrongKey.slice(0, 20))
      expect(shown).not.toContain(cs)
    }
  })

  it('a SAS connection string works, copies and moves included, and never shows its signature', async () => {
    const sas = generateAccountSASQueryParameters(
      {
        expiresOn: new Date(Date.now() + 3_600_000),
        permissions: AccountSASPermissions.parse('rwdlc'),
        resourceTypes: AccountSASResourceTypes.parse('sco').toString(),
        services: AccountSASServices.parse('b').toString(),
      },
      new StorageSharedKeyCredential(ACCOUNT, ACCOUNT_KEY),
    ).toString()
    const sasStore = new AzureBlobStore('az-sas', {
      connectionString: `BlobEndpoint=http://127.0.0.1:${azurite.port}/${ACCOUNT};SharedAccessSignature=${sas}`,
      container: 'extra',
      prefix: 'sas',
    })
    await sasStore.put('a/src.txt', Buffer.from('via sas'), { contentType: 'text/plain' })
    await sasStore.copy('a/src.txt', 'a/copy.txt')
    await sasStore.move('a/src.txt', 'b/moved.txt')
    expect((await collect(sasStore.list(''))).map((e) => e.key).sort()).toEqual(['a/copy.txt', 'b/moved.txt'])
    expect((await readAll(await sasStore.get('b/moved.txt'))).toString()).toBe('via sas')

    const signature = new URLSearchParams(sas).get('sig')!
    // One character changed (never to itself: a signature starting with x would stay valid).
    const forged = sas.replace(
      encodeURIComponent(signature),
      encodeURIComponent(`${signature[0] === 'x' ? 'y' : 'x'}${signature.slice(1)}`),
    )
    const forgedStore = new AzureBlobStore('az-forged', {
      connectionString: `BlobEndpoint=http://127.0.0.1:${azurite.port}/${ACCOUNT};SharedAccessSignature=${forged}`,
      container: 'extra',
      maxTries: 1,
    })
    const err = await rejection(() => forgedStore.get('sas/a/copy.txt'))
    expectErrorCode(err, 'store-failure', 502)
    expect(everythingOf(err)).not.toContain(signature.slice(1, 20))
  })

  it.each([403, 404] as const)('copy and move fall back to streaming when the service refuses a server-side copy (%i)', async (status) => {
    const proxy = await startProxy(azurite.port, { refuseCopy: status })
    const refusing = new AzureBlobStore('az-refusing', {
      connectionString: connectionString(proxy.port),
      container: 'extra',
      prefix: `refused-${status}/`,
    })
    try {
      const bytes = randomBytes(300_000)
      await refusing.put('src.bin', bytes, { contentType: 'application/x-kept' })
      await refusing.copy('src.bin', 'dir/copy.bin')
      await refusing.move('src.bin', 'dir/moved.bin')
      expect(proxy.requests.filter((r) => r.headers['x-ms-copy-source']).length).toBe(2)
      expect(await refusing.exists('src.bin')).toBe(false)
      for (const key of ['dir/copy.bin', 'dir/moved.bin']) {
        expect(sha256(await readAll(await refusing.get(key)))).toBe(sha256(bytes))
        const blob = container.getBlobClient(`refused-${status}/${key}`)
        expect((await blob.getProperties()).contentType).toBe('application/x-kept')
      }
      expectErrorCode(await rejection(() => refusing.copy('nope.bin', 'dir/x.bin')), 'not-found', 404)
    } finally {
      await refusing.close()
      await proxy.stop()
    }
  })

  it('the server stopped mid-upload: a clean store-failure, quickly, and the source is released', async () => {
    const proxy = await startProxy(azurite.port)
    const doomed = new AzureBlobStore('az-doomed', {
      connectionString: connectionString(proxy.port),
      container: 'extra',
      blockSize: '1MB',
      maxTries: 3,
      retryDelay: '100ms',
      maxRetryDelay: '500ms',
    })
    let stopping: Promise<void> | undefined
    const source = generatedStream(256 * MiB, {
      chunkSize: MiB,
      onProduced: (bytes) => {
        if (bytes >= 6 * MiB && stopping === undefined) stopping = proxy.stop()
      },
    })
    const started = Date.now()
    const err = await rejection(() => doomed.put('doomed/a.bin', source.stream))
    const elapsed = Date.now() - started
    await stopping
    expectErrorCode(err, 'store-failure', 502)
    expect((err as Error).message).toMatch(/Azure store "az-doomed".*put of "doomed\/a.bin" failed: .*did not answer/)
    expect(elapsed).toBeLessThan(15_000)
    expect(source.stream.destroyed).toBe(true)
    expect(await container.getBlobClient('doomed/a.bin').exists()).toBe(false)
  })

  it('accepts a ready ContainerClient', async () => {
    const byClient = new AzureBlobStore('az-client', { containerClient: service.getContainerClient('extra') })
    expect(byClient.container).toBe('extra')
    await byClient.put('client/a.txt', Buffer.from('hi'))
    expect((await readAll(await byClient.get('client/a.txt'))).toString()).toBe('hi')
    await byClient.delete('client/a.txt')
    expect(await byClient.exists('client/a.txt')).toBe(false)
  })

  it('a missing container is a clear store-failure, or is created with createContainer', async () => {
    const missing = new AzureBlobStore('az-nocont', {
      connectionString: connectionString(azurite.port),
      container: 'does-not-exist',
      maxTries: 1,
    })
    const err = await rejection(() => missing.put('a.txt', Buffer.from('x')))
    expectErrorCode(err, 'store-failure', 502)
    expect((err as Error).message).toContain('container "does-not-exist" does not exist')
    const creating = new AzureBlobStore('az-create', {
      connectionString: connectionString(azurite.port),
      container: 'created-on-use',
      createContainer: 'true' as unknown as boolean,
    })
    await creating.put('a.txt', Buffer.from('x'))
    expect(await service.getContainerClient('created-on-use').exists()).toBe(true)
  })
})

describe('AzureBlobStore settings', () => {
  const cs = 'DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=U0VDUkVUU0VDUkVUU0VDUkVU;EndpointSuffix=core.windows.net'
  const configError = (fn: () => unknown): AttachStorageError => {
    try {
      fn()
    } catch (err) {
      expect(err).toBeInstanceOf(AttachStorageError)
      expect(err).toMatchObject({ code: 'config-invalid' })
      expect(everythingOf(err)).not.toContain('U0VDUkVUU0VDUkVUU0VDUkVU')
      return err as AttachStorageError
    }
    return expect.unreachable('expected a config-invalid error')
  }

  it('names the missing required settings', () => {
    expect(configError(() => createStore('s', {})).message).toBe(
      'attach.stores.s (type azure) is missing required settings: connection-string, container',
    )
    expect(configError(() => createStore('s', { connectionString: cs })).message).toContain('missing required settings: container')
    expect(configError(() => createStore('s', { container: 'files', connectionString: '' })).message).toContain(
      'missing required settings: connection-string',
    )
  })

  it('rejects malformed values with messages that name the setting and never echo the secret', () => {
    const cases: Array<[Record<string, unknown>, string]> = [
      [{ connectionString: 'AccountName=acct;AccountKey=U0VDUkVUU0VDUkVUU0VDUkVU' }, 'connection-string'],
      [{ connectionString: 'BlobEndpoint=ftp://x;SharedAccessSignature=sig=U0VDUkVUU0VDUkVUU0VDUkVU' }, 'connection-string'],
      [{ connectionString: 42 }, 'connection-string'],
      [{ container: 'Bad_Name' }, '.container'],
      [{ container: 'ab' }, '.container'],
      [{ container: 'a--b' }, '.container'],
      [{ prefix: '../up' }, '.prefix'],
      [{ prefix: 'a//b' }, '.prefix'],
      [{ createContainer: 'yes' }, '.create-container'],
      [{ maxTries: 0 }, '.max-tries'],
      [{ retryDelay: 500 }, '.retry-delay'],
      [{ retryDelay: 'soon' }, '.retry-delay'],
      [{ retryDelay: '2s', maxRetryDelay: '1s' }, '.max-retry-delay'],
      [{ tryTimeout: '10ms' }, '.try-timeout'],
      [{ blockSize: '1KB' }, '.block-size'],
      [{ blockSize: '1GB' }, '.block-size'],
      [{ uploadConcurrency: 0 }, '.upload-concurrency'],
      [{ copyTimeout: '1ms' }, '.copy-timeout'],
      [{ containerClient: {} }, 'containerClient'],
    ]
    for (const [settings, named] of cases) {
      const err = configError(() => createStore('s', { connectionString: cs, container: 'files', ...settings }))
      expect(err.message).toContain(named)
    }
  })

  it('accepts the documented shapes and creates no client before first use', async () => {
    const store = createStore('s', {
      type: 'azure',
      connectionString: cs,
      container: 'files',
      prefix: '/tenant-a/2026',
      cdnUrl: 'https://cdn.example.com/',
      createContainer: false,
      maxTries: '5',
      retryDelay: '250ms',
      maxRetryDelay: 30,
      tryTimeout: '2m',
      blockSize: '8MB',
      uploadConcurrency: 2,
      copyTimeout: '1h',
    }) as AzureBlobStore
    expect(store).toBeInstanceOf(AzureBlobStore)
    expect(store.type).toBe('azure')
    expect(store.prefix).toBe('tenant-a/2026/')
    expect(store.container).toBe('files')
    expect(new AzureBlobStore('d', { connectionString: 'UseDevelopmentStorage=true', container: '$root' }).prefix).toBe('')
    const sas = new AzureBlobStore('sas', {
      connectionString: 'BlobEndpoint=https://acct.blob.core.windows.net/;SharedAccessSignature=sv=2024&sig=abc',
      container: 'files',
    })
    // Keys are checked before any request: a traversal never reaches the SDK.
    expect(await rejection(() => sas.get('a/../../b'))).toMatchObject({ code: 'bad-key', status: 400 })
    expect(await rejection(() => collect(sas.list('../')))).toMatchObject({ code: 'bad-key', status: 400 })
    // 1013 characters: a valid key, but with the 14 of the prefix longer than a blob name may be.
    const long = [...Array.from({ length: 4 }, () => 'k'.repeat(250)), 'k'.repeat(9)].join('/')
    expect(await rejection(() => store.put(long, Buffer.from('x')))).toMatchObject({ code: 'bad-key', status: 400 })
    await store.close()
  })
})

describe('the whole service on Azure', () => {
  const SECRET = 'a-test-secret-of-32-characters!!'
  let dir: string
  let db: Awaited<ReturnType<typeof openDatabase>>
  let storage: Awaited<ReturnType<typeof createAttachStorage>>

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-azure-'))
    db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
    const quiet = { info: () => {}, warn: () => {}, error: () => {} }
    storage = await createAttachStorage({
      config: {
        directory: { 'base-dir': join(dir, 'files'), 'tmp-dir': join(dir, 'tmp') },
        stores: {
          az: {
            type: 'azure',
            'connection-string': connectionString(azurite.port),
            container: 'service',
            prefix: 'attach',
            'create-container': true,
          },
        },
        'default-store': 'az',
        'tmp-store': 'az',
        domains: { demo: {} },
      },
      db,
      jwt: { secret: SECRET },
      logger: quiet,
    })
  })

  afterAll(async () => {
    await storage?.close()
    await db?.destroy()
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  it('temporary upload, confirmed save, ranged view and delete go through the Azure store', async () => {
    const handler = createAttachHandler(storage)
    const auth = { authorization: `Bearer ${signJwt('7', SECRET)}` }
    const blobs = async () => {
      const names: string[] = []
      for await (const b of service.getContainerClient('service').listBlobsFlat()) names.push(b.name)
      return names.sort()
    }
    const content = 'Hello from Azure Blob Storage, with a range to read.'

    const form = new FormData()
    form.append('refDomain', 'demo')
    form.append('file', new Blob([content], { type: 'text/plain' }), 'hello.txt')
    const tmp = await handler.fetch(new Request('http://x/api/storage/attach/tmp', { method: 'POST', body: form, headers: auth }))
    expect(tmp.status).toBe(200)
    const item = ((await tmp.json()) as { files: Array<Record<string, any>> }).files[0]!
    expect(item).toMatchObject({ displayName: 'hello.txt', size: content.length })
    expect((await blobs()).some((n) => n.startsWith('attach/') && n.includes(item.name))).toBe(true)

    const bag = {
      refDomain: 'demo',
      default: [{ savedName: item.name, displayName: item.displayName, fileSize: item.size, fileType: item.type }],
    }
    const saved = await handler.fetch(
      new Request('http://x/api/storage/attach/demo/77', {
        method: 'POST',
        body: JSON.stringify(bag),
        headers: { ...auth, 'content-type': 'application/json' },
      }),
    )
    expect(saved.status).toBe(200)
    const record = ((await saved.json()) as { success: boolean; attachList: Array<Record<string, any>> }).attachList[0]!
    expect(record).toMatchObject({ refDomain: 'demo', refKey: '77', displayName: 'hello.txt', fileSize: content.length })
    const finalName = `attach${record.savedDir}${record.savedName}`
    expect(await blobs()).toEqual([finalName]) // the temporary blob was moved, not left behind
    expect(finalName).toMatch(/^attach\/demo\/\d{4}\/\d{2}\/77\/[^/]+\.txt$/)

    const view = await handler.fetch(
      new Request('http://x/assets/storage/attach/view/demo/77/default/0', { headers: { range: 'bytes=6-9' } }),
    )
    expect(view.status).toBe(206)
    expect(view.headers.get('content-range')).toBe(`bytes 6-9/${content.length}`)
    expect(await view.text()).toBe(content.slice(6, 10))
    const whole = await handler.fetch(new Request('http://x/assets/storage/attach/view/demo/77/default/0'))
    expect(await whole.text()).toBe(content)

    const deleted = await handler.fetch(
      new Request('http://x/api/storage/attach', {
        method: 'POST',
        body: JSON.stringify([{ id: record.id }]),
        headers: { ...auth, 'content-type': 'application/json' },
      }),
    )
    expect(deleted.status).toBe(200)
    expect(await deleted.json()).toMatchObject({ success: true, count: 1 })
    await storage.drainEvents()
    await expect.poll(blobs, { timeout: 5_000 }).toEqual([])
    const after = await handler.fetch(new Request('http://x/assets/storage/attach/view/demo/77/default/0'))
    expect(after.status).toBe(404)
  })
})

describe('AzureBlobStore presignGet (serve: redirect) on Azurite', () => {
  const name = '보고서 (최종).pdf'
  const disposition = `attachment; filename="___ (__).pdf"; filename*=UTF-8''${rfc5987(name)}`
  const options = { expiresIn: 60, contentType: 'text/plain', contentDisposition: 'inline' }
  let store: AzureBlobStore

  beforeAll(async () => {
    await service.getContainerClient('signed').createIfNotExists()
    store = new AzureBlobStore('az', { connectionString: connectionString(azurite.port), container: 'signed', prefix: 'p/' })
  })
  afterAll(async () => {
    await store?.close()
  })

  it('signs a read-only SAS that a plain fetch reads: same bytes, the signed type and download name, ranges', async () => {
    const bytes = randomBytes(200_000)
    await store.put('demo/a b+c.pdf', bytes, { contentType: 'application/octet-stream' })
    const url = await store.presignGet!('demo/a b+c.pdf', {
      expiresIn: 60,
      contentType: 'application/pdf',
      contentDisposition: disposition,
    })
    const address = new URL(url)
    expect(`${address.origin}${address.pathname}`).toBe(`http://127.0.0.1:${azurite.port}/${ACCOUNT}/signed/p/demo/a%20b%2Bc.pdf`)
    const sas = address.searchParams
    expect(sas.get('sp')).toBe('r')
    expect(sas.get('sr')).toBe('b')
    expect(sas.get('rsct')).toBe('application/pdf')
    expect(sas.get('rscd')).toBe(disposition)
    // A minute of clock skew allowed before, the validity asked for after.
    const now = Date.now()
    expect(Date.parse(sas.get('st')!)).toBeGreaterThan(now - 62_000)
    expect(Date.parse(sas.get('st')!)).toBeLessThan(now - 58_000)
    expect(Date.parse(sas.get('se')!)).toBeGreaterThan(now + 58_000)
    expect(Date.parse(sas.get('se')!)).toBeLessThan(now + 61_000)

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

    // Read only: the same address cannot write or delete.
    const put = await fetch(url, { method: 'PUT', body: 'overwritten', headers: { 'x-ms-blob-type': 'BlockBlob' } })
    expect(put.status).toBe(403)
    await put.arrayBuffer()
    const del = await fetch(url, { method: 'DELETE' })
    expect(del.status).toBe(403)
    await del.arrayBuffer()
    expect(sha256(await readAll(await store.get('demo/a b+c.pdf')))).toBe(sha256(bytes))
  })

  // Azurite answers a refused SAS with 403 AuthorizationFailure (real Azure: 403 AuthenticationFailed).
  it('an expired SAS is refused (403 AuthorizationFailure on Azurite)', async () => {
    await store.put('expiring.txt', Buffer.from('soon gone'))
    const url = await store.presignGet!('expiring.txt', { ...options, expiresIn: 1 })
    // `se` has whole seconds: the address ends at most 1 s after it was signed.
    await new Promise((resolve) => setTimeout(resolve, 2_100))
    const res = await fetch(url)
    expect(res.status).toBe(403)
    expect(res.headers.get('x-ms-error-code')).toBe('AuthorizationFailure')
    await res.arrayBuffer()
  })

  it('a tampered SAS is refused (403): signature, signed overrides, expiry, blob, permissions', async () => {
    await store.put('guarded.txt', Buffer.from('do not touch'))
    const url = await store.presignGet!('guarded.txt', options)
    expect(await (await fetch(url)).text()).toBe('do not touch')
    const address = new URL(url)
    const tamper = (change: (sas: URLSearchParams, u: URL) => void): string => {
      const u = new URL(url)
      change(u.searchParams, u)
      return u.toString()
    }
    const signature = address.searchParams.get('sig')!
    const tampered = [
      tamper((sas) => sas.set('sig', `${signature.startsWith('A') ? 'B' : 'A'}${signature.slice(1)}`)),
      tamper((sas) => sas.set('rsct', 'text/html')),
      tamper((sas) => sas.set('rscd', 'attachment')),
      tamper((sas) => sas.set('se', new Date(Date.now() + 86_400_000).toISOString().replace(/\.\d+Z$/, 'Z'))),
      tamper((sas) => sas.set('sp', 'rw')),
      tamper((_, u) => {
        u.pathname = u.pathname.replace('guarded.txt', 'other.txt')
      }),
    ]
    for (const forged of tampered) {
      expect(forged).not.toBe(url)
      const res = await fetch(forged)
      expect(res.status, forged).toBe(403)
      expect(res.headers.get('x-ms-error-code')).toBe('AuthorizationFailure')
      await res.arrayBuffer()
    }
  })

  it('refuses a bad key as get does (bad-key, 400), before signing', async () => {
    for (const bad of ['../x', 'a/../../x', '/../x', '%2e%2e/x', 'a//b', '']) {
      const refusal = await rejection(() => store.get(bad))
      expect(refusal).toMatchObject({ code: 'bad-key', status: 400 })
      expect(await rejection(() => store.presignGet!(bad, options))).toMatchObject({
        code: 'bad-key',
        status: 400,
        message: (refusal as Error).message,
      })
    }
    await expect(store.presignGet!('a.txt', { ...options, expiresIn: 0 })).rejects.toThrow(/expiresIn must be 1 to 604800 seconds/)
  })

  it('exists only with the account key: not with a SAS connection string or an anonymous client', () => {
    const shared = new AzureBlobStore('a', { connectionString: connectionString(azurite.port), container: 'signed' })
    expect(typeof shared.presignGet).toBe('function')
    expect(typeof new AzureBlobStore('d', { connectionString: 'UseDevelopmentStorage=true', container: 'signed' }).presignGet).toBe(
      'function',
    )
    expect(typeof new AzureBlobStore('c', { containerClient: service.getContainerClient('signed') }).presignGet).toBe('function')
    const sas = new AzureBlobStore('s', {
      connectionString: `BlobEndpoint=http://127.0.0.1:${azurite.port}/${ACCOUNT};SharedAccessSignature=sv=2024-11-04&sig=abc`,
      container: 'signed',
    })
    expect(sas.presignGet).toBeUndefined()
    expect('presignGet' in sas).toBe(false)
    const anonymous = new ContainerClient(`http://127.0.0.1:${azurite.port}/${ACCOUNT}/signed`)
    expect(new AzureBlobStore('n', { containerClient: anonymous }).presignGet).toBeUndefined()
  })

  it('serve: redirect on a store that cannot sign is refused at start', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'attach-azure-nosign-'))
    const db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
    try {
      const started = createAttachStorage({
        config: {
          directory: { baseDir: join(dir, 'files'), tmpDir: join(dir, 'tmp') },
          defaultStore: 'az',
          stores: {
            az: {
              type: 'azure',
              serve: 'redirect',
              connectionString: `BlobEndpoint=http://127.0.0.1:${azurite.port}/${ACCOUNT};SharedAccessSignature=sv=2024-11-04&sig=abc`,
              container: 'signed',
            },
          },
          domains: { demo: { categories: { default: {} } } },
        },
        db,
        jwt: { secret: 'a-test-secret-of-32-characters!!' },
        logger: { info: () => {}, warn: () => {}, error: () => {} },
      })
      await expect(started).rejects.toMatchObject({
        code: 'config-invalid',
        message: expect.stringMatching(/attach\.stores\.az: serve: redirect needs a store that signs addresses/),
      })
    } finally {
      await db.destroy()
      await rm(dir, { recursive: true, force: true })
    }
  })
})

describe('the whole service on Azure with serve: redirect (end to end)', () => {
  const SECRET = 'a-test-secret-of-32-characters!!'
  let dir: string
  let db: Awaited<ReturnType<typeof openDatabase>>
  let storage: Awaited<ReturnType<typeof createAttachStorage>>

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-azure-redirect-'))
    db = await openDatabase({ type: 'sqlite', file: join(dir, 'attach.db') })
    storage = await createAttachStorage({
      config: {
        directory: { baseDir: join(dir, 'files'), tmpDir: join(dir, 'tmp') },
        defaultStore: 'az',
        stores: {
          az: {
            type: 'azure',
            serve: 'redirect',
            'redirect-ttl': '2m',
            connectionString: connectionString(azurite.port),
            container: 'redirected',
            prefix: 'attach',
            createContainer: true,
          },
        },
        domains: { demo: { categories: { default: {} } } },
      },
      db,
      jwt: { secret: SECRET },
      logger: { info: () => {}, warn: () => {}, error: () => {} },
    })
  })
  afterAll(async () => {
    await storage?.close()
    await db?.destroy()
    if (dir) await rm(dir, { recursive: true, force: true })
  })

  it('upload, confirmed save, then download answers 302 to a SAS address that serves the file', async () => {
    await expectRedirectServing({
      handler: createAttachHandler(storage),
      authorization: `Bearer ${signJwt('7', SECRET)}`,
      checkAddress: (address, file) => {
        expect(`${address.origin}${address.pathname}`).toBe(
          `http://127.0.0.1:${azurite.port}/${ACCOUNT}/redirected/attach${file.savedDir}${file.savedName}`,
        )
        expect(Date.parse(address.searchParams.get('se')!) - Date.now()).toBeGreaterThan(115_000)
      },
    })
  })
})

function expectErrorCode(err: unknown, code: string, status: number): void {
  expect(err).toBeInstanceOf(AttachStorageError)
  expect(err).toMatchObject({ code, status })
}
