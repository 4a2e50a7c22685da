import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AttachClient } from './client.js'
import { AttachContainerBuilder, limiter, mergeContainers } from './container.js'
import { startTestServer, type TestServer } from './test-kit.js'

/** A 1×1 PNG. */
const PNG = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg==', 'base64')

// The client in Node against the real handlers (no socket: its `fetch` is the handler's).
describe('AttachClient in Node', () => {
  let srv: TestServer
  let client: AttachClient
  beforeAll(async () => {
    srv = await startTestServer({ default: {}, image: { filters: ['image'] } })
    client = srv.client
  })
  afterAll(() => srv?.close())

  it('uploads, reports progress, saves, looks up, reorders with the builder, deletes', async () => {
    const seen: number[] = []
    const a = await client.upload(new Blob(['first file']), { refDomain: 'demo', fileName: 'a.txt', onProgress: (n) => seen.push(n) })
    const b = await client.upload(new File([PNG], 'b.png', { type: 'image/png' }), { refDomain: 'demo' })
    if (!a.ok || !b.ok) throw new Error('upload failed')
    expect(a.value).toMatchObject({ displayName: 'a.txt', size: 10 })
    expect(seen).toEqual([10])
    const saved = await client.save(
      'demo',
      'k1',
      new AttachContainerBuilder('demo').category('default', [{ temporary: a.value }, { temporary: b.value }]).build(),
    )
    if (!saved.ok) throw new Error(saved.error.message)
    const [ra, rb] = saved.value.attachList
    expect([ra!.displayName, rb!.displayName]).toEqual(['a.txt', 'b.png'])
    expect(client.viewUrl(rb!.id, { w: 10, h: 10 })).toBe(`http://app.test/assets/storage/attach/view/${rb!.id}?w=10&h=10`)

    // Reorder: b first; then remove a.
    const c = await client.upload(new Blob(['third']), { refDomain: 'demo', fileName: 'c.txt' })
    if (!c.ok) throw new Error('upload failed')
    const bag = new AttachContainerBuilder('demo')
      .category('default', [{ id: rb!.id }, { temporary: c.value }, { id: ra!.id }])
      .remove(ra!.id)
      .build()
    expect(bag).toEqual({
      refDomain: 'demo',
      default: [{ id: rb!.id }, { savedName: c.value.name, displayName: 'c.txt', fileSize: 5, fileType: c.value.type }],
      _deleted: [{ id: ra!.id }],
    })
    expect((await client.save('demo', 'k1', bag)).ok).toBe(true)
    const looked = await client.lookup('demo', 'k1', 'default')
    if (!looked.ok) throw new Error(looked.error.message)
    expect((looked.value.default as Array<{ displayName: string }>).map((r) => r.displayName)).toEqual(['b.png', 'c.txt'])

    const zip = await client.zip([rb!.id], 'both')
    if (!zip.ok) throw new Error(zip.error.message)
    expect(zip.value.fileName).toBe('both.zip')
    expect(
      Buffer.from(await zip.value.blob.arrayBuffer())
        .subarray(0, 2)
        .toString(),
    ).toBe('PK')

    const del = await client.delete([{ id: rb!.id }])
    expect(del).toEqual({ ok: true, value: { success: true, count: 1 } })
  })

  it('reads filter refusals and error answers into typed results', async () => {
    const refused = await client.upload(new Blob(['not an image']), { refDomain: 'demo', refCategory: 'image', fileName: 'x.png' })
    expect(refused).toMatchObject({ ok: false, error: { kind: 'filter', code: 'type', status: 200 } })
    const big = await client.upload(new Blob([new Uint8Array(3000)]), {
      refDomain: 'demo',
      fileName: 'big.bin',
      filters: { size: { maxSize: '1KB' } },
    })
    expect(big).toMatchObject({ ok: false, error: { kind: 'filter', code: 'size' } })
    const unknown = await client.upload(new Blob(['x']), { refDomain: 'nowhere', fileName: 'x.txt' })
    expect(unknown).toMatchObject({ ok: false, error: { kind: 'http', status: 400, code: 'unknown-domain' } })
    const anonymous = new AttachClient({
      baseUrl: 'http://app.test',
      fetch: (i, init) => srv.handler.fetch(new Request(i, init)),
    })
    expect(await anonymous.lookup('demo', 'k1')).toMatchObject({ ok: false, error: { kind: 'http', status: 401, code: 'unauthorized' } })
    const partial = await client.save('demo', 'k2', {
      refDomain: 'demo',
      default: [{ savedName: 'no-such-file.txt', displayName: 'gone.txt' }],
    })
    expect(partial.ok).toBe(false)
    if (!partial.ok) expect(partial.error.failures?.[0]).toMatchObject({ refCategory: 'default', index: 0, displayName: 'gone.txt' })
  })

  it('answers network failures and aborts as results, never throws', async () => {
    const down = new AttachClient({ baseUrl: 'http://127.0.0.1:9', fetch: () => Promise.reject(new TypeError('fetch failed')) })
    expect(await down.lookup('demo', '1')).toMatchObject({ ok: false, error: { kind: 'network', code: 'network' } })
    const abort = new AbortController()
    abort.abort()
    expect(await client.upload(new Blob(['x']), { refDomain: 'demo', fileName: 'x.txt', signal: abort.signal })).toMatchObject({
      ok: false,
      error: { kind: 'aborted' },
    })
  })
})

describe('the container helpers', () => {
  it('merges the bags of several fields of one domain', () => {
    expect(
      mergeContainers([
        { refDomain: 'board', image: [{ id: 1 }], _deleted: [{ id: 9 }] },
        { refDomain: 'board', default: [{ id: 2 }], _deleted: [{ id: 8 }] },
      ]),
    ).toEqual({ refDomain: 'board', image: [{ id: 1 }], default: [{ id: 2 }], _deleted: [{ id: 9 }, { id: 8 }] })
    expect(() => mergeContainers([{ refDomain: 'a' }, { refDomain: 'b' }])).toThrow()
    expect(() => new AttachContainerBuilder('a').category('_deleted', [])).toThrow()
  })

  it('runs at most n tasks at once', async () => {
    const limit = limiter(3)
    let running = 0
    let most = 0
    await Promise.all(
      Array.from({ length: 12 }, () =>
        limit(async () => {
          most = Math.max(most, ++running)
          await new Promise((r) => setTimeout(r, 5))
          running--
        }),
      ),
    )
    expect(most).toBe(3)
  })

  it('lets a waiting task leave the queue when its signal aborts', async () => {
    const limit = limiter(1)
    let release!: () => void
    const first = limit(() => new Promise<string>((r) => (release = () => r('first'))))
    const abort = new AbortController()
    const second = limit(async () => 'second', abort.signal)
    const third = limit(async () => 'third')
    abort.abort(new Error('cancelled'))
    await expect(second).rejects.toThrow('cancelled')
    release()
    expect(await Promise.all([first, third])).toEqual(['first', 'third'])
  })
})
