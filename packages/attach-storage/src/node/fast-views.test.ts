/**
 * The fast path of views by id answers exactly what the handlers answer: every request below goes to
 * two servers on the same service, one through the Node bridge with the fast path and one without,
 * and status, headers (but Date) and body must be the same.
 */
import { randomBytes } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { LocalStore } from '../stores/local-store.js'
import { type Kit, makeKit, png, saveFile, token } from '../testing/handler-kit.js'
import { type NodeUpstream, serveOnNode } from '../testing/front-servers.js'
import { UrlSigner } from '../service/signing.js'
import { type ViewKindsInput, viewKinds } from '../testing/view-kinds.js'
import { createFastViews, type FastViews } from './index.js'

const ASSETS = '/assets/storage'

/** One answer as compared: status, headers but Date and those of the connection, body (base64). */
interface Answer {
  status: number
  headers: Array<[string, string]>
  body: string
}

/** The answers of the same request at each of two servers (redirects not followed). */
async function answersAt(bases: [string, string], path: string, init: RequestInit): Promise<[Answer, Answer]> {
  const answers: Answer[] = []
  for (const base of bases) {
    const res = await fetch(base + path, { ...init, redirect: 'manual' })
    const headers = [...res.headers].filter(([name]) => name !== 'date' && name !== 'keep-alive' && name !== 'connection')
    answers.push({ status: res.status, headers, body: Buffer.from(await res.arrayBuffer()).toString('base64') })
  }
  return answers as [Answer, Answer]
}

describe('the fast path of views by id', () => {
  let kit: Kit
  let plain: NodeUpstream
  let fast: NodeUpstream
  let counted: FastViews
  let served = 0
  let requestsMade = 0
  const ids: Record<string, number> = {}

  let plainUrl: string
  let fastUrl: string

  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: { signing: { secret: 'a-signing-secret-of-32-characters!!' } } })
    ids.small = (await saveFile(kit, new Blob(['hello world']), 'hello.txt', '1')).id
    ids.large = (await saveFile(kit, new Blob([new Uint8Array(600 * 1024).fill(7)]), 'big.bin', '1')).id
    ids.html = (await saveFile(kit, new Blob(['<html><script>alert(1)</script></html>'], { type: 'text/html' }), 'page.html', '1')).id
    ids.image = (await saveFile(kit, await png(40, 30), 'photo.png', '2', 'image')).id
    ids.private = (await saveFile(kit, new Blob(['secret']), 'secret.txt', '1', 'private')).id
    const views = createFastViews(kit.storage)
    counted = {
      match: (req, target) => views.match(req, target),
      serve: (m, req, res, toRequest) => {
        served++
        return views.serve(m, req, res, () => {
          requestsMade++
          return toRequest()
        })
      },
    }
    plain = await serveOnNode(kit.handler.fetch)
    fast = await serveOnNode(kit.handler.fetch, { fast: counted })
    plainUrl = plain.url
    fastUrl = fast.url
  })
  afterAll(async () => {
    await plain?.stop()
    await fast?.stop()
    await kit?.cleanup()
  })

  const both = (path: string, init: RequestInit = {}) => answersAt([plainUrl, fastUrl], path, init)

  it('answers every case like the handlers, and takes the fast path for each', async () => {
    const bearer = { authorization: `Bearer ${await token('7')}` }
    const first = await fetch(`${plainUrl}${ASSETS}/attach/view/${ids.small}`)
    const etag = first.headers.get('etag')!
    const lastModified = first.headers.get('last-modified')!
    await first.arrayBuffer()
    const direct = await kit.call('/api/storage/direct-url', {
      method: 'POST',
      headers: bearer,
      body: JSON.stringify({ refDomain: 'demo', refKey: '1', refCategory: 'private' }),
    })
    const signedUrl = (await direct.json()) as string
    expect(signedUrl).toMatch(new RegExp(`^${ASSETS}/attach/view/${ids.private}\\?exp=`))
    const cases = viewKinds({
      ids: ids as ViewKindsInput['ids'],
      etag,
      lastModified,
      owner: bearer,
      ownerToken: await token('7'),
      otherToken: await token('8'),
      signedPath: signedUrl.replace(ASSETS, ''),
    })
    for (const [path, init] of cases) {
      const before = served
      const [a, b] = await both(ASSETS + path, init)
      expect(b, `${init?.method ?? 'GET'} ${path} ${JSON.stringify(init?.headers ?? {})}`).toEqual(a)
      expect(served, path).toBe(before + 1)
    }
  })

  it('makes a Web Request only for a secure-access function', async () => {
    const before = requestsMade
    await (await fetch(`${fastUrl}${ASSETS}/attach/view/${ids.small}`)).arrayBuffer()
    await (await fetch(`${fastUrl}${ASSETS}/attach/view/${ids.large}`)).arrayBuffer()
    expect(requestsMade).toBe(before)
    await (await fetch(`${fastUrl}${ASSETS}/attach/view/${ids.private}`)).arrayBuffer()
    expect(requestsMade).toBe(before + 1)
  })

  it('leaves every other request to the handlers', async () => {
    const before = served
    for (const path of [
      `${ASSETS}/attach/view/demo/1/default`,
      `${ASSETS}/attach/%76iew/${ids.small}`,
      `${ASSETS}/attach/view/${ids.small}/x`,
      `/api/storage/attach/demo/1`,
    ]) {
      const [a, b] = await both(path, { headers: { authorization: `Bearer ${await token('7')}` } })
      expect(b).toEqual(a)
    }
    const post = await fetch(`${fastUrl}${ASSETS}/attach/view/${ids.small}`, { method: 'POST' })
    expect(post.status).toBe(404)
    await post.arrayBuffer()
    expect(served).toBe(before)
  })
})

describe('the fast path reading small files into kept buffers', () => {
  let kit: Kit
  let fast: NodeUpstream
  const files: Record<string, { id: number; bytes: Buffer }> = {}
  // Spied before the service reads anything, so the store's instrumentation wraps the spy.
  const reads = vi.spyOn(LocalStore.prototype, 'readBytes')

  beforeAll(async () => {
    kit = await makeKit('sqlite')
    for (const [name, size] of [
      ['a', 50 * 1024],
      ['b', 20 * 1024],
      ['c', 9000],
    ] as const) {
      const bytes = randomBytes(size)
      files[name] = { id: (await saveFile(kit, new Blob([bytes]), `${name}.bin`, '1')).id, bytes }
    }
    fast = await serveOnNode(kit.handler.fetch, { fast: createFastViews(kit.storage) })
  })
  afterAll(async () => {
    reads.mockRestore()
    await fast?.stop()
    await kit?.cleanup()
  })

  const view = async (name: string, headers: Record<string, string> = {}) => {
    const res = await fetch(`${fast.url}${ASSETS}/attach/view/${files[name]!.id}`, { headers })
    return { status: res.status, body: Buffer.from(await res.arrayBuffer()) }
  }
  const lent = () => reads.mock.calls.map((call) => call[3]).filter((into) => into !== undefined)

  it('reuses one buffer for views one after another', async () => {
    reads.mockClear()
    for (let i = 0; i < 6; i++) expect((await view('a')).body.equals(files.a!.bytes)).toBe(true)
    expect(lent()).toHaveLength(6)
    expect(new Set(lent()).size).toBe(1)
  })

  it('answers every view whole and right while buffers are handed from one view to the next', async () => {
    reads.mockClear()
    const asked = Array.from({ length: 60 }, (_, i) => ['a', 'b', 'c'][i % 3]!)
    const answers = await Promise.all(asked.map((name) => view(name)))
    answers.forEach((a, i) => {
      expect(a.status).toBe(200)
      expect(a.body.equals(files[asked[i]!]!.bytes), `view ${i} of ${asked[i]}`).toBe(true)
    })
    // A range is read into a buffer of its own length's class.
    const part = await view('a', { range: 'bytes=100-30099' })
    expect(part.status).toBe(206)
    expect(part.body.equals(files.a!.bytes.subarray(100, 30100))).toBe(true)
    expect(lent().length).toBe(61)
    // Buffers go back: the same few serve all the views.
    expect(new Set(lent()).size).toBeLessThan(61)
  })
})

describe("the fast path of nginx's decision on a signed view", () => {
  const SIGNING = 'a-signing-secret-of-32-characters!!'
  let kit: Kit
  let plain: NodeUpstream
  let fast: NodeUpstream
  let served = 0
  const ids: Record<string, number> = {}

  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      config: {
        signing: { secret: SIGNING },
        stores: { local: { type: 'local', serve: 'x-accel-redirect', 'serve-location': '/_attach/local/' } },
      },
    })
    ids.private = (await saveFile(kit, new Blob(['secret']), 'secret.txt', '1', 'private')).id
    ids.public = (await saveFile(kit, new Blob(['open']), 'open.txt', '1')).id
    const views = createFastViews(kit.storage)
    const counted: FastViews = {
      match: (req, target) => views.match(req, target),
      serve: (m, req, res, toRequest) => {
        served++
        return views.serve(m, req, res, toRequest)
      },
    }
    plain = await serveOnNode(kit.handler.fetch)
    fast = await serveOnNode(kit.handler.fetch, { fast: counted })
  })
  afterAll(async () => {
    await plain?.stop()
    await fast?.stop()
    await kit?.cleanup()
  })

  const both = (path: string, init: RequestInit = {}) => answersAt([plain.url, fast.url], path, init)

  it('decides every case like the route, and takes the fast path for each GET', async () => {
    const signer = new UrlSigner(SIGNING, 10 * 60_000, () => new Date())
    const decide = (id: number, query = signer.query(id)) => `${ASSETS}/attach-decide/view/${id}?${query}`
    const past = Math.floor(Date.now() / 1000) - 60
    const cases: Array<[string, RequestInit?, number?]> = [
      [decide(ids.private!), undefined, 200],
      [decide(ids.private!), { headers: { 'x-attach-cache-bound': '5' } }, 200],
      [decide(ids.private!), { headers: { 'x-attach-cache-bound': 'soon' } }, 400],
      [decide(ids.private!, `${signer.query(ids.private!)}&w=10`), undefined, 403],
      // The signature's first character changed (to 'A', or 'B' where it was 'A').
      [
        decide(
          ids.private!,
          signer.query(ids.private!).replace(/sig=(.)/, (_, c) => `sig=${c === 'A' ? 'B' : 'A'}`),
        ),
        undefined,
        403,
      ],
      [decide(ids.private!, `exp=${past}&sig=${'A'.repeat(43)}`), undefined, 403],
      [decide(ids.private!, signer.query(ids.private!).replace(/&sig=.*/, '')), undefined, 400],
      [decide(ids.private!, `exp=1&sig=${'A'.repeat(65)}`), undefined, 400],
      [decide(ids.public!), undefined, 403],
      [decide(999999), undefined, 403],
    ]
    for (const [path, init, status] of cases) {
      const before = served
      const [a, b] = await both(path, init)
      expect(b, `${path} ${JSON.stringify(init?.headers ?? {})}`).toEqual(a)
      expect(a.status, path).toBe(status)
      expect(served, path).toBe(before + 1)
    }
    const [ok] = await both(decide(ids.private!))
    expect(Object.fromEntries(ok.headers)).toMatchObject({ 'x-accel-expires': '60', 'x-attach-content-type': 'text/plain' })
    // HEAD of the decision route is the handlers' (a 404 there): the fast path leaves it.
    const before = served
    const [a, b] = await both(decide(ids.private!), { method: 'HEAD' })
    expect(b).toEqual(a)
    expect(served).toBe(before)
  })
})
