/**
 * One access rule on every path that reads or changes a record, signed view URLs, and the small bounds
 * of the JSON group (tokens without `exp`, multipart text parts, log lines a client controls).
 */
import { SignJWT } from 'jose'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeKit, SECRET, type Kit } from '../testing/handler-kit.js'

const API = '/api/storage'
const ASSETS = '/assets/storage'
const SIGNING = 'signing-secret-of-at-least-16-bytes'
const text = (s: string) => new Blob([s], { type: 'text/plain' })

type Rec = Record<string, any>

async function tmp(kit: Kit, content: string, name: string, category = 'default', user = '7', domain = 'demo'): Promise<Rec> {
  const res = await kit.upload(
    `${API}/attach/tmp`,
    [
      ['refDomain', domain],
      ['refCategory', category],
      ['file', text(content), name],
    ],
    user,
  )
  expect(res.status).toBe(200)
  return ((await res.json()) as { files: Rec[] }).files[0]!
}

async function save(kit: Kit, refKey: string, bag: unknown, user = '7', domain = 'demo'): Promise<Response> {
  return kit.call(`${API}/attach/${domain}/${refKey}`, { method: 'POST', body: JSON.stringify(bag), user })
}

/** Saves files into `demo/{refKey}` as user 7: returns the records by category. */
async function seed(kit: Kit, refKey: string, files: Record<string, string[]>): Promise<Record<string, Rec[]>> {
  const bag: Rec = { refDomain: 'demo' }
  for (const [category, names] of Object.entries(files)) {
    bag[category] = []
    for (const n of names) bag[category].push({ savedName: (await tmp(kit, `bytes of ${n}`, n, category)).name, displayName: n })
  }
  const res = await save(kit, refKey, bag)
  expect(res.status).toBe(200)
  const out: Record<string, Rec[]> = {}
  for (const r of ((await res.json()) as { attachList: Rec[] }).attachList) {
    const list = out[r.refCategory] ?? []
    list.push(r)
    out[r.refCategory] = list
  }
  return out
}

describe('who may change records: one rule on every path', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite')
  })
  afterAll(async () => kit?.cleanup())

  it("refuses another user's _deleted of a private record with 403 and changes nothing", async () => {
    const { private: [p] = [] } = await seed(kit, 'del-1', { private: ['secret.txt'] })
    const before = await kit.files()
    const res = await save(kit, 'del-1', { refDomain: 'demo', _deleted: [{ id: p!.id }] }, '8')
    expect(res.status).toBe(403)
    expect(await res.json()).toMatchObject({ code: 'forbidden', message: expect.any(String) })
    expect(await kit.storage.repository.findById(p!.id)).toBeDefined()
    expect(await kit.files()).toEqual(before)
  })

  it("refuses another user's _deleted of a record in an unguarded category (the creator rule)", async () => {
    const { default: [d] = [] } = await seed(kit, 'del-2', { default: ['notes.txt'] })
    const res = await save(kit, 'del-2', { _deleted: [{ id: d!.id }] }, '8')
    expect(res.status).toBe(403)
    expect((await res.json()).code).toBe('forbidden')
    expect(await kit.storage.repository.findById(d!.id)).toBeDefined()
  })

  it("refuses another user's re-sort entries with 403 and leaves the order as it was", async () => {
    const { default: recs = [] } = await seed(kit, 'sort-1', { default: ['a.txt', 'b.txt'] })
    const [a, b] = recs
    const res = await save(kit, 'sort-1', { default: [{ id: b!.id }, { id: a!.id }] }, '8')
    expect(res.status).toBe(403)
    const list = await kit.storage.repository.listByReference('demo', 'sort-1')
    expect(list.map((r) => r.id)).toEqual([a!.id, b!.id])
  })

  it("refuses the whole save when one touched record is not the caller's: a new file in the same bag is not saved", async () => {
    const { default: [a] = [] } = await seed(kit, 'mixed', { default: ['a.txt'] })
    const mine = await tmp(kit, 'of user 8', 'mine.txt', 'default', '8')
    const res = await save(kit, 'mixed', { default: [{ savedName: mine.name }], _deleted: [{ id: a!.id }] }, '8')
    expect(res.status).toBe(403)
    expect((await kit.storage.repository.listByReference('demo', 'mixed')).map((r) => r.id)).toEqual([a!.id])
  })

  it('lets the creator delete and re-sort their own records through the confirmed save', async () => {
    const { default: recs = [], private: [p] = [] } = await seed(kit, 'own', { default: ['a.txt', 'b.txt'], private: ['p.txt'] })
    const res = await save(kit, 'own', { default: [{ id: recs[1]!.id }, { id: recs[0]!.id }], _deleted: [{ id: p!.id }] })
    expect(res.status).toBe(200)
    const list = await kit.storage.repository.listByReference('demo', 'own')
    expect(list.map((r) => r.id)).toEqual([recs[1]!.id, recs[0]!.id])
  })
})

describe("a domain's mayChange hook decides who may change an entity's attachments", () => {
  let kit: Kit
  const asked: Array<[unknown, string, boolean]> = []
  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      registrar: (registry) => {
        registry.registerDomain('board', {
          store: 'local',
          mayChange: (user, refKey, request) => {
            asked.push([user?.id, refKey, request instanceof Request])
            if (refKey === 'explodes') throw new Error('boom')
            return refKey === `post-of-${String(user?.id)}`
          },
        })
      },
    })
  })
  afterAll(async () => kit?.cleanup())

  it('answers 403 forbidden and leaves the temporary file where it was when the hook says no', async () => {
    const f = await tmp(kit, 'hello', 'a.txt', 'default', '8', 'board')
    const res = await save(kit, 'post-of-7', { default: [{ savedName: f.name }] }, '8', 'board')
    expect(res.status).toBe(403)
    expect(await res.json()).toMatchObject({ code: 'forbidden' })
    expect(asked).toContainEqual([8, 'post-of-7', true])
    expect(await kit.storage.repository.listByReference('board', 'post-of-7')).toEqual([])
    // The owner of the entity... is not user 8: user 8 can still save the same file to its own post.
    const ok = await save(kit, 'post-of-8', { default: [{ savedName: f.name }] }, '8', 'board')
    expect(ok.status).toBe(200)
  })

  it('counts a throwing hook as a refusal', async () => {
    const res = await save(kit, 'explodes', { default: [] }, '7', 'board')
    expect(res.status).toBe(403)
    expect(kit.warnings.some((w) => w.includes('mayChange of domain "board" threw'))).toBe(true)
  })

  it('applies to commitAttachContainer too', async () => {
    const f = await tmp(kit, 'hello', 'b.txt', 'default', '8', 'board')
    await expect(
      kit.storage.commitAttachContainer({
        attachContainer: { refDomain: 'board', default: [{ savedName: f.name }] },
        refKey: 'post-of-7',
        user: { id: 8 },
      }),
    ).rejects.toMatchObject({ code: 'forbidden', status: 403 })
  })

  it('leaves domains without a hook open', async () => {
    const f = await tmp(kit, 'hello', 'c.txt', 'default', '8')
    expect((await save(kit, 'anything', { default: [{ savedName: f.name }] }, '8')).status).toBe(200)
  })
})

describe('reads in the JSON group apply the secure-access function', () => {
  for (const cdn of [false, true]) {
    describe(cdn ? 'with a CDN configured' : 'without a CDN', () => {
      let kit: Kit
      let seeded: Record<string, Rec[]>
      beforeAll(async () => {
        kit = await makeKit('sqlite', { config: cdn ? { cdnUrl: 'https://cdn.example.com/' } : {} })
        seeded = await seed(kit, 'r1', { default: ['open.txt'], private: ['p0.txt', 'p1.txt'] })
      })
      afterAll(async () => kit?.cleanup())

      it("leaves another user's private records out of the lookup, and gives the creator the guarded route", async () => {
        const other = await (await kit.call(`${API}/attach/demo/r1`, { user: '8' })).json()
        expect(other.private).toEqual([])
        expect(other.default).toHaveLength(1)
        const onlyPrivate = await (await kit.call(`${API}/attach/demo/r1/private`, { user: '8' })).json()
        expect(onlyPrivate).toEqual({ refDomain: 'demo', private: [] })
        const mine = await (await kit.call(`${API}/attach/demo/r1`, { user: '7' })).json()
        expect(mine.private.map((r: Rec) => r.url)).toEqual([
          `${ASSETS}/attach/view/demo/r1/private/0`,
          `${ASSETS}/attach/view/demo/r1/private/1`,
        ])
        for (const r of mine.private) expect(r.cdnUrl).toBeUndefined()
        if (cdn) expect(mine.default[0].url).toMatch(/^https:\/\/cdn\.example\.com\//)
      })

      it('counts only what the caller may read', async () => {
        expect(await (await kit.call(`${API}/attach/demo/r1/private/_count`, { user: '8' })).json()).toBe(0)
        expect(await (await kit.call(`${API}/attach/demo/r1/private/_count`, { user: '7' })).json()).toBe(2)
        expect(await (await kit.call(`${API}/attach/demo/r1/default/_count`, { user: '8' })).json()).toBe(1)
      })

      it('leaves them out of the conditional list, its pages and its total', async () => {
        const q = `${API}/attach?refDomain=demo&refKeyList=r1&_usePaging=true&dataPerPage=2`
        const other = await kit.call(q, { user: '8' })
        expect(other.headers.get('x-app-total-count')).toBe('1')
        const otherRows = (await other.json()) as Rec[]
        expect(otherRows.map((r) => r.displayName)).toEqual(['open.txt'])
        const mine = await kit.call(q, { user: '7' })
        expect(mine.headers.get('x-app-total-count')).toBe('3')
        const rows = (await mine.json()) as Rec[]
        expect(rows).toHaveLength(2)
        const page2 = (await (await kit.call(`${q}&currentPage=2`, { user: '7' })).json()) as Rec[]
        expect([...rows, ...page2].map((r) => r.displayName)).toEqual(['open.txt', 'p0.txt', 'p1.txt'])
        for (const r of [...rows, ...page2].filter((r) => r.refCategory === 'private')) {
          expect(r.url).toMatch(new RegExp(`^${ASSETS}/attach/view/demo/r1/private/[01]$`))
          expect(r.cdnUrl).toBeUndefined()
        }
        const unpaged = (await (
          await kit.call(`${API}/attach?refDomain=demo&refKeyList=r1&refCategoryList=private`, { user: '8' })
        ).json()) as Rec[]
        expect(unpaged).toEqual([])
      })

      it('refuses direct-url of a private record to another user, and gives its owner the guarded route', async () => {
        const body = JSON.stringify({ refDomain: 'demo', refKey: 'r1', refCategory: 'private', index: 1 })
        const other = await kit.call(`${API}/direct-url`, { method: 'POST', body, user: '8' })
        expect(other.status).toBe(403)
        expect((await other.json()).code).toBe('forbidden')
        const mine = await kit.call(`${API}/direct-url`, { method: 'POST', body, user: '7' })
        expect(mine.status).toBe(200)
        expect(await mine.json()).toBe(`${ASSETS}/attach/view/${seeded.private![1]!.id}`)
      })

      it('gives a direct upload into a guarded category no public address', async () => {
        const res = await kit.upload(`${API}/attach/direct`, [
          ['refDomain', 'demo'],
          ['refCategory', 'private'],
          ['file', text('x'), 'd.txt'],
        ])
        const [item] = ((await res.json()) as { files: Rec[] }).files
        expect(item!.url).toMatch(new RegExp(`^${ASSETS}/attach-direct/view/demo/private\\?path=`))
      })
    })
  }
})

describe('signed view URLs of guarded records', () => {
  let kit: Kit
  let now = Date.now()
  let recs: Rec[]
  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: { signing: { secret: SIGNING, ttl: '10m' } }, now: () => new Date(now) })
    recs = (await seed(kit, 's1', { private: ['first.txt', 'second.txt'] })).private!
  })
  afterAll(async () => kit?.cleanup())

  const lookupUrls = async (user: string) =>
    ((await (await kit.call(`${API}/attach/demo/s1/private`, { user })).json()).private as Rec[]).map((r) => r.url as string)

  it('gives the reader a signed url that works without a token, for the original and its variants', async () => {
    const [url] = await lookupUrls('7')
    expect(url).toMatch(/^\/assets\/storage\/attach\/view\/demo\/s1\/private\/0\?exp=\d+&sig=[A-Za-z0-9_-]{43}$/)
    const res = await kit.call(url!, { user: null })
    expect(res.status).toBe(200)
    expect(await res.text()).toBe('bytes of first.txt')
    expect((await kit.call(`${url}&w=10`, { user: null })).status).toBe(200)
    expect((await kit.call(url!.replace('/view/', '/download/'), { user: null })).status).toBe(200)
    expect(res.headers.get('cache-control')).toMatch(/^private/)
  })

  it('refuses a tampered, a foreign or an expired signature with 403', async () => {
    const [url] = await lookupUrls('7')
    const tampered = url!.replace(/sig=(.)/, (_m, c: string) => `sig=${c === 'A' ? 'B' : 'A'}`)
    expect((await kit.call(tampered, { user: null })).status).toBe(403)
    // A signature is for one record: the same query on another record's route is refused.
    const other = `${ASSETS}/attach/view/${recs[1]!.id}?${url!.split('?')[1]}`
    expect((await kit.call(other, { user: null })).status).toBe(403)
    const later = `${ASSETS}/attach/view/${recs[0]!.id}?${url!.split('?')[1]}`
    expect((await kit.call(later, { user: null })).status).toBe(200)
    now += 11 * 60_000
    try {
      const res = await kit.call(later, { user: null })
      expect(res.status).toBe(403)
      expect((await res.json()).code).toBe('forbidden')
    } finally {
      now -= 11 * 60_000
    }
  })

  it('names the record, not the slot: after a re-sort the old slot url no longer opens the other file', async () => {
    const [slot0] = await lookupUrls('7')
    expect((await save(kit, 's1', { private: [{ id: recs[1]!.id }, { id: recs[0]!.id }] })).status).toBe(200)
    expect((await kit.call(slot0!, { user: null })).status).toBe(403)
    const [fresh] = await lookupUrls('7')
    const res = await kit.call(fresh!, { user: null })
    expect(await res.text()).toBe('bytes of second.txt')
  })

  it('signs nothing for a caller who may not read the record', async () => {
    expect(await lookupUrls('8')).toEqual([])
  })

  it('answers direct-url of a guarded record with a signed by-id url', async () => {
    const res = await kit.call(`${API}/direct-url`, {
      method: 'POST',
      body: JSON.stringify({ refDomain: 'demo', refKey: 's1', refCategory: 'private', index: 0 }),
      user: '7',
    })
    const url = (await res.json()) as string
    expect(url).toMatch(/^\/assets\/storage\/attach\/view\/\d+\?exp=\d+&sig=/)
    expect((await kit.call(url, { user: null })).status).toBe(200)
  })

  it('refuses a signing secret shorter than 16 characters at start', async () => {
    await expect(makeKit('sqlite', { config: { signing: { secret: 'short' } } })).rejects.toThrow(/signing/)
  })
})

describe('a view by reference identifies the file, not the slot', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite')
  })
  afterAll(async () => kit?.cleanup())

  it('answers an old If-Modified-Since or If-None-Match with the new bytes after a re-sort, never 304', async () => {
    const { default: recs = [] } = await seed(kit, 'slot', { default: ['old.txt', 'new.txt'] })
    const first = await kit.call(`${ASSETS}/attach/view/demo/slot/default/0`, { user: null })
    expect(await first.text()).toBe('bytes of old.txt')
    const etag = first.headers.get('etag')!
    // The slot may name another file later: no date validator for it.
    expect(first.headers.get('last-modified')).toBeNull()
    const since = new Date(Date.now() + 3600_000).toUTCString()
    expect((await kit.call(`${ASSETS}/attach/view/demo/slot/default/0`, { user: null, headers: { 'if-none-match': etag } })).status).toBe(
      304,
    )
    expect((await save(kit, 'slot', { default: [{ id: recs[1]!.id }, { id: recs[0]!.id }] })).status).toBe(200)
    const validators: Array<Record<string, string>> = [
      { 'if-modified-since': since },
      { 'if-none-match': etag },
      { 'if-none-match': etag, 'if-modified-since': since },
    ]
    for (const headers of validators) {
      const res = await kit.call(`${ASSETS}/attach/view/demo/slot/default/0`, { user: null, headers })
      expect(res.status).toBe(200)
      expect(await res.text()).toBe('bytes of new.txt')
    }
    // A view by id still names one file forever and keeps its date validator.
    const byId = await kit.call(`${ASSETS}/attach/view/${recs[0]!.id}`, { user: null })
    expect(byId.headers.get('last-modified')).not.toBeNull()
    expect((await kit.call(`${ASSETS}/attach/view/${recs[0]!.id}`, { user: null, headers: { 'if-modified-since': since } })).status).toBe(
      304,
    )
  })
})

describe('small bounds of the JSON group', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite')
  })
  afterAll(async () => kit?.cleanup())

  const noExp = (sub: string) => new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(sub).sign(new TextEncoder().encode(SECRET))

  it('refuses a Bearer token without exp with 401', async () => {
    const res = await kit.call(`${API}/config`, { user: null, headers: { authorization: `Bearer ${await noExp('7')}` } })
    expect(res.status).toBe(401)
    expect(await res.json()).toMatchObject({ code: 'unauthorized', message: expect.any(String) })
  })

  it('accepts one when the host opts out with requireExp: false', async () => {
    const lax = await makeKit('sqlite', { jwt: { secret: SECRET, requireExp: false } })
    try {
      const res = await lax.call(`${API}/config`, { user: null, headers: { authorization: `Bearer ${await noExp('7')}` } })
      expect(res.status).toBe(200)
    } finally {
      await lax.cleanup()
    }
  })

  it('logs unregistered filter keys in one line, escaped and bounded, whatever the client sent', async () => {
    kit.warnings.length = 0
    const filters: Record<string, unknown> = { 'evil\nattach-storage: FAKE LINE': {}, ['x'.repeat(500)]: {} }
    for (let i = 0; i < 40; i++) filters[`k${i}`] = {}
    const res = await kit.upload(`${API}/attach/tmp`, [
      ['refDomain', 'demo'],
      ['filters', JSON.stringify(filters)],
      ['file', text('x'), 'a.txt'],
    ])
    expect(res.status).toBe(200)
    const lines = kit.warnings.filter((w) => w.includes('request filters not registered'))
    expect(lines).toHaveLength(1)
    expect(lines[0]).not.toMatch(/[\n\r]/)
    expect(lines[0]).toContain('\\nattach-storage: FAKE LINE')
    expect(lines[0]!.length).toBeLessThan(1200)
    expect(lines[0]).toContain('and 32 more')
  })

  it('keeps ext and fmetaValue well-formed text of at most 1024 units (never half a surrogate pair)', async () => {
    const { default: [r] = [] } = await seed(kit, 'text', { default: ['t.txt'] })
    const long = `${'a'.repeat(1023)}\u{1F600}`
    const res = await kit.call(`${API}/attach/`, {
      method: 'PUT',
      body: JSON.stringify([{ id: r!.id, ext: long, fmetaValue: 'x\ud800y' }]),
    })
    expect(res.status).toBe(200)
    const stored = await kit.storage.repository.findById(r!.id)
    expect(stored!.ext).toBe('a'.repeat(1023))
    expect(stored!.fmetaValue).toBe('x\ufffdy')
  })

  it('refuses more than 32 text parts with 400 and a text part over 64 KiB with 413, keeping nothing', async () => {
    const before = await kit.files(kit.tmpDir)
    const many: Array<[string, string | Blob, string?]> = [['refDomain', 'demo']]
    for (let i = 0; i < 32; i++) many.push([`f${i}`, 'v'])
    many.push(['file', text('x'), 'a.txt'])
    const res = await kit.upload(`${API}/attach/tmp`, many)
    expect(res.status).toBe(400)
    expect(await res.json()).toMatchObject({ code: 'bad-request', message: expect.stringContaining('32') })
    const big = await kit.upload(`${API}/attach/tmp`, [
      ['refDomain', 'demo'],
      ['ext', 'y'.repeat(64 * 1024 + 1)],
      ['file', text('x'), 'a.txt'],
    ])
    expect(big.status).toBe(413)
    expect(await big.json()).toMatchObject({ code: 'too-large', message: expect.any(String) })
    expect(await kit.files(kit.tmpDir)).toEqual(before)
    const exact = await kit.upload(`${API}/attach/tmp`, [
      ['refDomain', 'demo'],
      ['ext', 'y'.repeat(64 * 1024)],
      ['file', text('x'), 'b.txt'],
    ])
    expect(exact.status).toBe(200)
  })
})

describe('ZIP downloads are bounded per process', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: { zip: { concurrency: 1 } } })
  })
  afterAll(async () => kit?.cleanup())

  it('answers 503 busy with Retry-After past zip.concurrency, and frees the slot when a ZIP ends or its client goes away', async () => {
    const { default: recs = [] } = await seed(kit, 'zip', { default: ['a.txt', 'b.txt'] })
    const zip = (signal?: AbortSignal) =>
      kit.handler.fetch(
        new Request(`http://x${ASSETS}/attach/download`, {
          method: 'POST',
          body: JSON.stringify({ ids: recs.map((r) => r.id) }),
          headers: { 'content-type': 'application/json' },
          signal,
        }),
      )
    const first = await zip()
    expect(first.status).toBe(200)
    const second = await zip()
    expect(second.status).toBe(503)
    expect(second.headers.get('retry-after')).toBe('5')
    expect(await second.json()).toMatchObject({ code: 'busy', message: expect.any(String) })
    // Once the first archive is read to its end, the slot is free again.
    expect((await first.arrayBuffer()).byteLength).toBeGreaterThan(0)
    await new Promise((r) => setTimeout(r, 20))
    const third = new AbortController()
    const res = await zip(third.signal)
    expect(res.status).toBe(200)
    // A client that goes away frees it too.
    third.abort()
    await res.body?.cancel().catch(() => undefined)
    await new Promise((r) => setTimeout(r, 20))
    const fourth = await zip()
    expect(fourth.status).toBe(200)
    await fourth.arrayBuffer()
  })
})
