import { createServer, type Server, type Socket } from 'node:net'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { parseAttachConfig } from '../config/schema.js'
import { createPrometheusMetrics } from '../metrics/index.js'
import { contextOf } from './attach-storage.js'
import { tmpKey, tmpMetaKey, tmpUploadKey } from './temporary.js'
import { clamdScan, parseClamdAddress, parseClamdReply } from '../media/clamd.js'
import { startClamd, type TestClamd, TEST_SIGNATURE, TEST_VIRUS_MARKER, freePort } from '../testing/clamd-kit.js'
import { type Kit, makeKit, tusInOnePatch } from '../testing/handler-kit.js'

const text = (s: string) => new Blob([s], { type: 'text/plain' })
const INFECTED = `hello ${TEST_VIRUS_MARKER} bye`

/** A fake clamd: `answer` decides what it does with each connection once it has read `after` bytes. */
async function fakeClamd(after: number, answer: (socket: Socket) => void): Promise<{ address: string; server: Server; hits: number }> {
  const state = { address: '', server: createServer(), hits: 0 }
  state.server.on('connection', (socket) => {
    state.hits++
    let read = 0
    let done = false
    socket.on('error', () => {})
    socket.on('data', (c) => {
      read += c.length
      if (!done && read >= after) {
        done = true
        answer(socket)
      }
    })
  })
  await new Promise<void>((resolve) => state.server.listen(0, '127.0.0.1', resolve))
  state.address = `tcp://127.0.0.1:${(state.server.address() as { port: number }).port}`
  return state
}

describe('virus scanning with a real clamd (scan per category)', () => {
  let clamd: TestClamd
  let kit: Kit
  let garbage: Awaited<ReturnType<typeof fakeClamd>>
  let midstream: Awaited<ReturnType<typeof fakeClamd>>
  const outcomes: string[] = []
  const tmpFiles = async () => (await kit.files(kit.tmpDir)).filter((f) => !f.startsWith('.'))

  beforeAll(async () => {
    clamd = await startClamd({ streamMaxLength: '1M' })
    garbage = await fakeClamd(14, (s) => s.end('HELLO, I AM NOT CLAMD\n'))
    midstream = await fakeClamd(100_000, (s) => s.destroy())
    const down = `tcp://127.0.0.1:${await freePort()}`
    kit = await makeKit('sqlite', {
      instrumentation: { scan: (outcome) => outcomes.push(outcome) },
      config: {
        resumable: { enabled: true },
        domains: {
          demo: {
            categories: {
              default: {},
              scanned: { scan: { clamd: clamd.tcp } },
              unix: { scan: { clamd: clamd.unix } },
              garbage: { scan: { clamd: garbage.address } },
              midstream: { scan: { clamd: midstream.address } },
              down: { scan: { clamd: down } },
              lenient: { scan: { clamd: down, 'on-error': 'accept' } },
            },
          },
        },
      },
    })
  })
  afterAll(async () => {
    await kit?.cleanup()
    garbage?.server.close()
    midstream?.server.close()
    await clamd?.stop()
  })

  const upload = (category: string, blob: Blob, name: string, path = '/api/storage/attach/tmp') =>
    kit.upload(path, [
      ['refDomain', 'demo'],
      ['refCategory', category],
      ['file', blob, name],
    ])

  it('an infected file fails its item with infected naming the signature; nothing is kept', async () => {
    for (const category of ['scanned', 'unix']) {
      const res = await upload(category, text(INFECTED), 'evil.txt')
      expect(res.status).toBe(200)
      const [item] = (await res.json()).files
      expect(item).toEqual({
        displayName: 'evil.txt',
        size: INFECTED.length,
        error: { code: 'infected', message: `evil.txt is infected: ${TEST_SIGNATURE}` },
      })
      expect(await tmpFiles()).toEqual([])
    }
  })

  it('a clean file is kept and saves; a direct upload is scanned too', async () => {
    const res = await upload('scanned', text('a perfectly clean file'), 'clean.txt')
    const [item] = (await res.json()).files
    expect(item.name).toMatch(/\.txt$/)
    expect((await tmpFiles()).some((f) => f.endsWith(item.name))).toBe(true)
    const saved = await kit.call('/api/storage/attach/demo/1', {
      method: 'POST',
      body: JSON.stringify({ scanned: [{ savedName: item.name, displayName: 'clean.txt' }] }),
    })
    expect(saved.status).toBe(200)
    const direct = await upload('scanned', text(INFECTED), 'evil.txt', '/api/storage/attach/direct')
    expect((await direct.json()).files[0].error.code).toBe('infected')
    expect((await kit.files()).filter((f) => f.includes('/_/scanned/'))).toEqual([])
  })

  it('a tus upload is scanned at completion: infected answers 400 infected and leaves nothing', async () => {
    const { patched } = await tusInOnePatch(kit, new TextEncoder().encode(INFECTED), 'evil.txt', 'scanned')
    expect(patched.status).toBe(400)
    expect(await patched.json()).toEqual({ code: 'infected', message: `evil.txt is infected: ${TEST_SIGNATURE}` })
    expect(await tmpFiles()).toEqual([])
  })

  it('a presigned upload is scanned at commit: infected fails the entry with infected and removes the object', async () => {
    // What attach/presign leaves (a pending sidecar) and the client's PUT to the presigned address (the
    // object under _tmp/_up/ of the presigning store), written here on the local store.
    const ctx = contextOf(kit.storage)
    const presigned = async (name: string, body: string) => {
      const pending = { size: body.length, expiresAt: new Date(Date.now() + 60_000).toISOString(), store: 'local' }
      const meta = { name, displayName: name, size: body.length, type: '', sha256: '', refDomain: 'demo', refCategory: 'scanned' }
      const sidecar = { ...meta, createdBy: '7', createdDt: new Date().toISOString(), pending }
      await ctx.stores.tmpStore.put(tmpMetaKey(name), Buffer.from(JSON.stringify(sidecar)), { contentType: 'application/json' })
      await ctx.store('local').put(tmpUploadKey(name), Buffer.from(body), { contentType: 'application/octet-stream' })
    }
    await presigned('0b4c1f0e-0000-4000-8000-000000000001.txt', INFECTED)
    const res = await kit.call('/api/storage/attach/demo/3', {
      method: 'POST',
      body: JSON.stringify({ scanned: [{ savedName: '0b4c1f0e-0000-4000-8000-000000000001.txt' }] }),
    })
    const body = await res.json()
    expect(res.status).toBe(500)
    expect(body.failures).toEqual([
      expect.objectContaining({ code: 'infected', reason: expect.stringContaining(`is infected: ${TEST_SIGNATURE}`) }),
    ])
    expect(await ctx.stores.tmpStore.exists(tmpKey('0b4c1f0e-0000-4000-8000-000000000001.txt'))).toBe(false)
    expect(await ctx.stores.tmpStore.exists(tmpMetaKey('0b4c1f0e-0000-4000-8000-000000000001.txt'))).toBe(false)
    expect(await ctx.store('local').exists(tmpUploadKey('0b4c1f0e-0000-4000-8000-000000000001.txt'))).toBe(false)
    await presigned('0b4c1f0e-0000-4000-8000-000000000002.txt', 'clean and presigned')
    const ok = await kit.call('/api/storage/attach/demo/3', {
      method: 'POST',
      body: JSON.stringify({ scanned: [{ savedName: '0b4c1f0e-0000-4000-8000-000000000002.txt' }] }),
    })
    expect(ok.status).toBe(200)
  })

  it("a file over clamd's StreamMaxLength fails its item with too-large; nothing is kept", async () => {
    const big = new Blob([new Uint8Array(1536 * 1024).fill(65)])
    const [item] = (await (await upload('scanned', big, 'big.bin')).json()).files
    expect(item.error).toEqual({ code: 'too-large', message: "big.bin is larger than the virus scanner accepts (clamd's StreamMaxLength)" })
    expect(await tmpFiles()).toEqual([])
  })

  it('clamd answering garbage, or closing mid-stream: 503 scan-unavailable naming the problem; the server keeps serving', async () => {
    const res = await upload('garbage', text('anything'), 'a.txt')
    expect(res.status).toBe(503)
    expect(await res.json()).toEqual({
      code: 'scan-unavailable',
      message: 'The virus scanner is unavailable: clamd answered something that is not a scan result: "HELLO, I AM NOT CLAMD"',
    })
    expect(garbage.hits).toBe(1)
    const cut = await upload('midstream', new Blob([new Uint8Array(1024 * 1024)]), 'b.bin')
    expect(cut.status).toBe(503)
    const body = await cut.json()
    expect(body.code).toBe('scan-unavailable')
    expect(body.message).toMatch(/^The virus scanner is unavailable: clamd closed the connection (before answering|mid-stream)/)
    expect(await tmpFiles()).toEqual([])
    // The same service still scans and keeps.
    const ok = await upload('scanned', text('still clean'), 'ok.txt')
    expect((await ok.json()).files[0].name).toBeDefined()
  })

  it('with on-error accept, an unreachable clamd keeps the file and logs a warning', async () => {
    const [item] = (await (await upload('lenient', text(INFECTED), 'unscanned.txt')).json()).files
    expect(item.name).toBeDefined()
    expect(kit.warnings.some((w) => w.includes('kept unscanned (scan.on-error: accept): clamd could not be reached'))).toBe(true)
  })

  it('clamd stopped: 503 scan-unavailable, nothing kept', async () => {
    const before = await tmpFiles()
    await clamd.stop()
    const res = await upload('scanned', text('clean but unscannable'), 'c.txt')
    expect(res.status).toBe(503)
    expect(res.headers.get('retry-after')).toBe('30')
    expect(await res.json()).toEqual({
      code: 'scan-unavailable',
      message: 'The virus scanner is unavailable: clamd could not be reached (ECONNREFUSED)',
    })
    expect(await tmpFiles()).toEqual(before)
  })

  it('each scan is counted by outcome (instrumentation scan, attach_storage_scans_total)', async () => {
    expect(new Set(outcomes)).toEqual(new Set(['infected', 'clean', 'too-large', 'unavailable', 'unscanned']))
    expect(outcomes.filter((o) => o === 'infected')).toHaveLength(5)
    const metrics = createPrometheusMetrics()
    for (const o of outcomes) metrics.instrumentation.scan?.(o as 'clean')
    const text = await (await metrics.answer()).text()
    expect(text).toContain('attach_storage_scans_total{outcome="infected"} 5')
    expect(text).toContain('attach_storage_scans_total{outcome="unavailable"} 3')
  })
})

describe('the clamd client and the scan setting', () => {
  it('reads addresses and answers', () => {
    expect(parseClamdAddress('tcp://127.0.0.1:3310')).toEqual({ host: '127.0.0.1', port: 3310 })
    expect(parseClamdAddress('tcp://[::1]:3310')).toEqual({ host: '::1', port: 3310 })
    expect(parseClamdAddress('unix:/run/clamav/clamd.ctl')).toEqual({ path: '/run/clamav/clamd.ctl' })
    expect(() => parseClamdAddress('http://x')).toThrow('must be tcp://host:port or unix:/path')
    expect(parseClamdReply('stream: OK\0')).toEqual({ infected: false })
    expect(parseClamdReply('stream: Eicar-Signature FOUND\0')).toEqual({ infected: true, signature: 'Eicar-Signature' })
    expect(() => parseClamdReply('INSTREAM size limit exceeded. ERROR\0')).toThrow(expect.objectContaining({ failure: 'size-limit' }))
    expect(() => parseClamdReply('lstat() failed. ERROR\0')).toThrow(expect.objectContaining({ failure: 'error' }))
    expect(() => parseClamdReply('stream: FOUND\0')).toThrow(expect.objectContaining({ failure: 'garbage' }))
  })

  it('a clamd that resets a stream mid-way and answers PING has refused it (its size limit); one that does not answer PING is closed', async () => {
    // What a real clamd does past StreamMaxLength when its answer is lost to the reset: drop the stream.
    const resetting = createServer((socket) => {
      let read = 0
      socket.on('error', () => {})
      socket.on('data', (c: Buffer) => {
        if (read === 0 && c.subarray(0, 5).toString() === 'zPING') return void socket.end('PONG\0')
        read += c.length
        if (read >= 100_000) socket.resetAndDestroy()
      })
    })
    await new Promise<void>((resolve) => resetting.listen(0, '127.0.0.1', resolve))
    const address = `tcp://127.0.0.1:${(resetting.address() as { port: number }).port}`
    const big = () => [new Uint8Array(1024 * 1024)]
    await expect(clamdScan(big(), { address })).rejects.toMatchObject({
      failure: 'size-limit',
      message: expect.stringContaining('closed the stream after'),
    })
    const dropping = await fakeClamd(100_000, (s) => s.destroy())
    await expect(clamdScan(big(), { address: dropping.address })).rejects.toMatchObject({ failure: 'closed' })
    dropping.server.close()
    resetting.close()
  })

  it('a clamd that never answers times out; one that stops reading does not grow memory', async () => {
    const silent = await fakeClamd(Number.POSITIVE_INFINITY, () => {})
    const address = silent.address
    const started = Date.now()
    await expect(clamdScan([new Uint8Array(10)], { address, replyTimeoutMs: 300 })).rejects.toMatchObject({ failure: 'timeout' })
    expect(Date.now() - started).toBeLessThan(2000)
    // A peer that reads nothing: the writes wait for drain, so the source is not read ahead without bound.
    const stalled = createServer((s) => s.pause())
    await new Promise<void>((resolve) => stalled.listen(0, '127.0.0.1', resolve))
    let pulled = 0
    async function* endless() {
      for (;;) {
        pulled++
        yield new Uint8Array(64 * 1024)
      }
    }
    const port = (stalled.address() as { port: number }).port
    await expect(clamdScan(endless(), { address: `tcp://127.0.0.1:${port}`, replyTimeoutMs: 500 })).rejects.toMatchObject({
      failure: 'timeout',
    })
    expect(pulled * 64 * 1024).toBeLessThan(64 * 1024 * 1024)
    silent.server.close()
    stalled.close()
  })

  it('the setting is read from kebab-case; a misspelt key or a bad address is refused', () => {
    const cats = (scan: unknown) => ({ domains: { d: { categories: { c: { scan } } } } })
    const parsed = parseAttachConfig(cats({ clamd: 'unix:/run/clamav/clamd.ctl', 'on-error': 'accept' }))
    expect(parsed.domains.d!.categories.c!.scan).toEqual({ clamd: 'unix:/run/clamav/clamd.ctl', onError: 'accept' })
    expect(parseAttachConfig(cats({ clamd: 'tcp://h:1' })).domains.d!.categories.c!.scan!.onError).toBe('refuse')
    expect(() => parseAttachConfig(cats({ clamd: 'tcp://h:1', 'on-eror': 'accept' }))).toThrow(
      'unknown setting attach.domains.d.categories.c.scan.on-eror; did you mean on-error?',
    )
    expect(() => parseAttachConfig(cats({ clamd: 'localhost' }))).toThrow('must be tcp://host:port or unix:/path')
  })
})
