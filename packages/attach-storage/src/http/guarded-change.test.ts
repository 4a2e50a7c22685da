/**
 * In a guarded category reading is not changing: a secure-access function that lets every signed-in
 * user read grants no change (PUT, POST delete, the confirmed save's `_deleted` and re-sort,
 * `commitAttachContainer()`); only the creator, or the domain's `mayChange` hook, may. A guarded
 * temporary file is its uploader's only, and a signed view URL may not reach past `signing.ttl`.
 */
import { createHmac } from 'node:crypto'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { bearerToken, createJwtVerifier } from '../service/auth.js'
import type { FileDescription } from '../service/types.js'
import { makeKit, SECRET, token, type Kit } from '../testing/handler-kit.js'

const API = '/api/storage'
const ASSETS = '/assets/storage'
const SIGNING = 'signing-secret-of-at-least-16-bytes'
type Rec = Record<string, any>

const verify = createJwtVerifier({ secret: SECRET })
/** A host whose secure-access function lets every signed-in user read (and nothing more). */
const everyReader = async (request: Request, _file: FileDescription) =>
  (await verify(bearerToken(request) ?? new URL(request.url).searchParams.get('access_token') ?? undefined)) !== null

async function tmp(kit: Kit, domain: string, category: string, content: string, user: string): Promise<Rec> {
  const res = await kit.upload(
    `${API}/attach/tmp`,
    [
      ['refDomain', domain],
      ['refCategory', category],
      ['file', new Blob([content], { type: 'text/plain' }), `${content}.txt`],
    ],
    user,
  )
  expect(res.status).toBe(200)
  return ((await res.json()) as { files: Rec[] }).files[0]!
}

const save = (kit: Kit, domain: string, refKey: string, bag: unknown, user: string) =>
  kit.call(`${API}/attach/${domain}/${refKey}`, { method: 'POST', body: JSON.stringify(bag), user })

/** Two records of user 7 in `{domain}/{refKey}/open` (a read-everyone guarded category). */
async function seed(kit: Kit, domain: string, refKey: string): Promise<Rec[]> {
  const a = await tmp(kit, domain, 'open', `a-${refKey}`, '7')
  const b = await tmp(kit, domain, 'open', `b-${refKey}`, '7')
  const res = await save(kit, domain, refKey, { open: [{ savedName: a.name }, { savedName: b.name }] }, '7')
  expect(res.status).toBe(200)
  return ((await res.json()) as { attachList: Rec[] }).attachList
}

/** What a change could touch: the live records of a reference, with their names and order. */
const state = async (kit: Kit, domain: string, refKey: string) =>
  (await kit.storage.repository.listByReference(domain, refKey)).map((r) => [r.id, r.displayName, r.sort])

const forbidden = async (res: Response) => {
  expect(res.status).toBe(403)
  expect(await res.json()).toMatchObject({ code: 'forbidden', message: expect.any(String) })
}

describe('in a guarded category the secure-access function alone never grants a change', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      registrar: (registry) => {
        registry.registerCategory('demo', 'open', { secureAccess: everyReader })
        // board: user 7 may change every post's attachments, user 9 those of post "granted" only.
        registry.registerDomain('board', {
          store: 'local',
          mayChange: (user, refKey) => String(user?.id) === '7' || (refKey === 'granted' && String(user?.id) === '9'),
        })
        registry.registerCategory('board', 'open', { secureAccess: everyReader })
      },
    })
  })
  afterAll(async () => kit?.cleanup())

  it('lets another signed-in user read the records (the function says yes)', async () => {
    await seed(kit, 'demo', 'read')
    const res = await kit.call(`${API}/attach/demo/read/open`, { user: '8' })
    expect(res.status).toBe(200)
    expect(((await res.json()) as { open: Rec[] }).open.length).toBe(2)
  })

  it("refuses another user's PUT (rename, re-sort) with 403 and changes nothing", async () => {
    const [a, b] = await seed(kit, 'demo', 'put')
    const before = await state(kit, 'demo', 'put')
    const body = JSON.stringify([
      { id: a!.id, displayName: 'renamed.exe', sort: 5 },
      { id: b!.id, sort: 0 },
    ])
    await forbidden(await kit.call(`${API}/attach/`, { method: 'PUT', body, user: '8' }))
    expect(await state(kit, 'demo', 'put')).toEqual(before)
    // The creator may.
    const own = await kit.call(`${API}/attach/`, { method: 'PUT', body, user: '7' })
    expect(own.status).toBe(200)
    expect(await own.json()).toEqual({ success: true, count: 2 })
    expect((await kit.storage.repository.findById(a!.id))?.displayName).toBe('renamed.exe')
  })

  it("refuses another user's POST delete with 403 and deletes nothing; the creator may", async () => {
    const [a, b] = await seed(kit, 'demo', 'del')
    const files = await kit.files()
    const body = JSON.stringify([{ id: a!.id }, { id: b!.id }])
    await forbidden(await kit.call(`${API}/attach`, { method: 'POST', body, user: '8' }))
    expect((await state(kit, 'demo', 'del')).length).toBe(2)
    expect(await kit.files()).toEqual(files)
    const own = await kit.call(`${API}/attach`, { method: 'POST', body, user: '7' })
    expect(await own.json()).toEqual({ success: true, count: 2 })
    expect(await state(kit, 'demo', 'del')).toEqual([])
  })

  it("refuses another user's _deleted and re-sort entries of a confirmed save with 403 and changes nothing", async () => {
    const [a, b] = await seed(kit, 'demo', 'bag')
    const before = await state(kit, 'demo', 'bag')
    await forbidden(await save(kit, 'demo', 'bag', { _deleted: [{ id: a!.id }] }, '8'))
    await forbidden(await save(kit, 'demo', 'bag', { open: [{ id: b!.id }, { id: a!.id }] }, '8'))
    expect(await state(kit, 'demo', 'bag')).toEqual(before)
    const own = await save(kit, 'demo', 'bag', { open: [{ id: b!.id }], _deleted: [{ id: a!.id }] }, '7')
    expect(own.status).toBe(200)
    expect((await state(kit, 'demo', 'bag')).map(([id]) => id)).toEqual([b!.id])
  })

  it("refuses another user's commitAttachContainer that deletes or re-sorts, and lets the creator", async () => {
    const [a, b] = await seed(kit, 'demo', 'host')
    const before = await state(kit, 'demo', 'host')
    const as = async (user: string) => new Request('http://x/board', { headers: { authorization: `Bearer ${await token(user)}` } })
    const commit = async (user: string, attachContainer: Rec) =>
      kit.storage.commitAttachContainer({ attachContainer, refKey: 'host', user: { id: Number(user) }, request: await as(user) })
    await expect(commit('8', { refDomain: 'demo', _deleted: [{ id: a!.id }] })).rejects.toMatchObject({ code: 'forbidden', status: 403 })
    await expect(commit('8', { refDomain: 'demo', open: [{ id: b!.id }, { id: a!.id }] })).rejects.toMatchObject({
      code: 'forbidden',
      status: 403,
    })
    expect(await state(kit, 'demo', 'host')).toEqual(before)
    await commit('7', { refDomain: 'demo', open: [{ id: b!.id }, { id: a!.id }] })
    expect((await state(kit, 'demo', 'host')).map(([id]) => id)).toEqual([b!.id, a!.id])
  })

  it("lets the domain's mayChange hook grant the change to another user, for the references it names only", async () => {
    const [a, b] = await seed(kit, 'board', 'granted')
    const [c] = await seed(kit, 'board', 'other')
    // User 9 is no creator; the hook grants board/granted to it.
    const put = await kit.call(`${API}/attach/`, {
      method: 'PUT',
      body: JSON.stringify([{ id: a!.id, displayName: 'by 9.txt' }]),
      user: '9',
    })
    expect(put.status).toBe(200)
    expect((await kit.storage.repository.findById(a!.id))?.displayName).toBe('by 9.txt')
    const del = await kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id: b!.id }]), user: '9' })
    expect(await del.json()).toEqual({ success: true, count: 1 })
    // Not for another reference, nor for another user.
    await forbidden(await kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id: c!.id }]), user: '9' }))
    await forbidden(await kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id: a!.id }]), user: '8' }))
    expect((await state(kit, 'board', 'granted')).map(([id]) => id)).toEqual([a!.id])
    expect((await state(kit, 'board', 'other')).length).toBe(2)
  })

  it('still needs the secure-access function: the creator without a token in the request may not change', async () => {
    const [a] = await seed(kit, 'demo', 'no-read')
    await expect(
      kit.storage.commitAttachContainer({
        attachContainer: { refDomain: 'demo', _deleted: [{ id: a!.id }] },
        refKey: 'no-read',
        user: { id: 7 },
      }),
    ).rejects.toMatchObject({ code: 'forbidden' })
    expect((await state(kit, 'demo', 'no-read')).length).toBe(2)
  })
})

describe('a temporary file of a guarded category is readable by its uploader only', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      registrar: (registry) => {
        registry.registerCategory('demo', 'open', { secureAccess: everyReader })
      },
    })
  })
  afterAll(async () => kit?.cleanup())

  const view = async (name: string, category: string, user: string | null) =>
    kit.handler.fetch(
      new Request(`http://x${ASSETS}/attach-temp/view/demo/${category}/${name}`, {
        headers: user === null ? {} : { authorization: `Bearer ${await token(user)}` },
      }),
    )

  it("answers another signed-in user 403, and the uploader the file's bytes", async () => {
    const f = await tmp(kit, 'demo', 'open', 'only-mine', '7')
    const other = await view(f.name, 'open', '8')
    expect(other.status).toBe(403)
    expect(await other.json()).toMatchObject({ code: 'forbidden' })
    expect((await view(f.name, 'open', null)).status).toBe(403)
    const mine = await view(f.name, 'open', '7')
    expect(mine.status).toBe(200)
    expect(await mine.text()).toBe('only-mine')
    // The token may come in the access_token query parameter (an <img src> carries no header).
    const byQuery = `http://x${ASSETS}/attach-temp/view/demo/open/${f.name}?access_token=`
    expect((await kit.handler.fetch(new Request(byQuery + (await token('8'))))).status).toBe(403)
    expect((await kit.handler.fetch(new Request(byQuery + (await token('7'))))).status).toBe(200)
  })

  it('leaves the temporary files of an unguarded category as they were (anyone who knows the name)', async () => {
    const f = await tmp(kit, 'demo', 'default', 'open-to-all', '7')
    expect((await view(f.name, 'default', null)).status).toBe(200)
  })
})

describe('signed view URLs reach at most signing.ttl ahead', () => {
  let kit: Kit
  const now = Date.parse('2026-11-27T10:00:00Z')
  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      config: { signing: { secret: SIGNING, ttl: '10m' } },
      now: () => new Date(now),
      registrar: (registry) => {
        registry.registerCategory('demo', 'open', { secureAccess: everyReader })
      },
    })
  })
  afterAll(async () => kit?.cleanup())

  const signed = (id: number, exp: number) =>
    `exp=${exp}&sig=${createHmac('sha256', SIGNING).update(`attach-view:v1:${id}:${exp}`).digest('base64url')}`

  it('refuses a well-signed URL whose expiry lies past signing.ttl (exp=9999999999) with 403, and takes the one it hands out', async () => {
    const [a] = await seed(kit, 'demo', 'signed')
    const handed = a!.url as string
    expect(handed).toMatch(/[?&]exp=\d+&sig=/)
    expect((await kit.handler.fetch(new Request(`http://x${handed}`))).status).toBe(200)
    const far = await kit.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${a!.id}?${signed(a!.id, 9999999999)}`))
    expect(far.status).toBe(403)
    expect(await far.json()).toMatchObject({ code: 'forbidden' })
    // Just past the ttl and the minute it is rounded up to, plus the allowed skew: refused; within: taken.
    const s = now / 1000
    expect(
      (await kit.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${a!.id}?${signed(a!.id, s + 600 + 60 + 61)}`))).status,
    ).toBe(403)
    expect((await kit.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${a!.id}?${signed(a!.id, s + 600 + 60)}`))).status).toBe(200)
  })
})
