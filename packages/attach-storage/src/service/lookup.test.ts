/**
 * `storage.lookup()` in-process: the options form, the deprecated positional form, and what the caller's
 * request changes (records of a guarded category only for a caller its secure-access function lets in).
 * Type tests of the same API: api-types.test.ts.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Kit, makeKit, saveFile, token } from '../testing/handler-kit.js'
import { accessOf } from './types.js'

describe('storage.lookup()', () => {
  let kit: Kit
  let owner: Request
  let stranger: Request
  beforeAll(async () => {
    kit = await makeKit('sqlite')
    const text = (s: string) => new Blob([s], { type: 'text/plain' })
    await saveFile(kit, text('open'), 'open.txt', 'k1', 'default')
    await saveFile(kit, text('{"a":1}'), 'data.json', 'k1', 'default')
    await saveFile(kit, text('secret'), 'secret.txt', 'k1', 'private')
    const as = async (user: string) => new Request('http://host/post/k1', { headers: { authorization: `Bearer ${await token(user)}` } })
    owner = await as('7')
    stranger = await as('8')
  })
  afterAll(() => kit?.cleanup())

  const names = (list: unknown) => (list as Array<{ displayName: string }>).map((r) => r.displayName)

  it('options form: every category, guarded records only for a caller the category lets in', async () => {
    const mine = await kit.storage.lookup('demo', 'k1', { request: owner })
    expect(Object.keys(mine)).toEqual(['refDomain', 'default', 'image', 'private', 'throws'])
    expect(mine.refDomain).toBe('demo')
    expect(names(mine.default)).toEqual(['open.txt', 'data.json'])
    expect(names(mine.private)).toEqual(['secret.txt'])
    expect(mine.private?.[0]?.url).toEqual(expect.any(String))
    // Another user, and no request at all: the guarded record is left out, the category stays.
    expect((await kit.storage.lookup('demo', 'k1', { request: stranger })).private).toEqual([])
    const anonymous = await kit.storage.lookup('demo', 'k1')
    expect(anonymous.private).toEqual([])
    expect(names(anonymous.default)).toEqual(['open.txt', 'data.json'])
    // An access context works as the request does.
    expect(names((await kit.storage.lookup('demo', 'k1', { request: accessOf({ id: 7 }, owner) })).private)).toEqual(['secret.txt'])
  })

  it('options form: one category, after its filters', async () => {
    // The records have no `ext` set: `ext` matches none, `extAlt` falls back to the first.
    const one = await kit.storage.lookup('demo', 'k1', { category: 'default', filters: { extAlt: 'webp:png' }, request: owner })
    expect(Object.keys(one)).toEqual(['refDomain', 'default'])
    expect(names(one.default)).toEqual(['open.txt'])
    expect((await kit.storage.lookup('demo', 'k1', { filters: { ext: 'txt' } })).default).toEqual([])
    expect(names((await kit.storage.lookup('demo', 'k1', { category: 'private', request: owner })).private)).toEqual(['secret.txt'])
  })

  it('the deprecated positional form answers the same', async () => {
    expect(await kit.storage.lookup('demo', 'k1', undefined, {}, owner)).toEqual(await kit.storage.lookup('demo', 'k1', { request: owner }))
    const one = await kit.storage.lookup('demo', 'k1', 'default', { extAlt: 'webp:png' })
    expect(Object.keys(one)).toEqual(['refDomain', 'default'])
    expect(names(one.default)).toEqual(['open.txt'])
    expect((await kit.storage.lookup('demo', 'k1', 'private')).private).toEqual([])
  })

  it('refuses an unknown option (a typo would drop the guard or the filter) with 400', async () => {
    const typo = kit.storage.lookup('demo', 'k1', { req: owner } as never)
    await expect(typo).rejects.toMatchObject({
      status: 400,
      code: 'bad-request',
      message: expect.stringMatching(/Unknown lookup option "req"/),
    })
    await expect(kit.storage.lookup('demo', 'k1', { categroy: 'default' } as never)).rejects.toMatchObject({ status: 400 })
  })

  it('count() takes the request the same way', async () => {
    const ref = { refDomain: 'demo', refKey: 'k1', refCategory: 'private' }
    expect(await kit.storage.count(ref, owner)).toBe(1)
    expect(await kit.storage.count(ref, accessOf(null, owner))).toBe(1)
    expect(await kit.storage.count(ref, stranger)).toBe(0)
    expect(await kit.storage.count(ref)).toBe(0)
  })

  it('directUrl() takes the request the same way: a guarded file only for a caller the category lets in', async () => {
    const at = { refDomain: 'demo', refKey: 'k1', refCategory: 'private', index: 0 }
    expect(await kit.storage.directUrl(at, owner)).toMatch(/\/attach\/view\/\d+/)
    await expect(kit.storage.directUrl(at, stranger)).rejects.toMatchObject({ status: 403, code: 'forbidden' })
    await expect(kit.storage.directUrl(at)).rejects.toMatchObject({ status: 403, code: 'forbidden' })
  })
})
