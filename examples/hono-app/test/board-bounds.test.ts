/**
 * The reference server's /board routes are bounded like the JSON group: an attachContainer with more
 * than `save.max-entries` entries is refused (400 `too-many-entries`) before the post is written, and a
 * post's text has an upper bound.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { sign, start, type Running } from './helpers.js'

describe('reference server: bounded /board bodies', () => {
  let srv: Running
  let alice: string
  beforeAll(async () => {
    srv = await start({}, [])
    alice = await sign('1')
  })
  afterAll(async () => srv?.close())

  const api = (path: string, init: RequestInit = {}) =>
    fetch(srv.base + path, {
      ...init,
      headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/json', ...(init.headers as Record<string, string>) },
    })
  const posts = async () => (await (await api('/board')).json()) as unknown[]

  it('POST /board with more than 1,000 entries answers 400 too-many-entries, small, and writes no post', async () => {
    const before = (await posts()).length
    const entries = Array.from({ length: 1001 }, (_, i) => ({ id: i + 1 }))
    const res = await api('/board', { method: 'POST', body: JSON.stringify({ title: 'many', attachContainer: { default: entries } }) })
    expect(res.status).toBe(400)
    const text = await res.text()
    expect(text.length).toBeLessThan(300)
    expect(JSON.parse(text)).toMatchObject({ code: 'too-many-entries', message: expect.any(String) })
    expect((await posts()).length).toBe(before)
    // 1,000 in all (`_deleted` counts too) is within the bound: every entry is checked and every bad one
    // listed; the post and its attachments are one transaction, so no post is written.
    const ok = await api('/board', {
      method: 'POST',
      body: JSON.stringify({ title: 'fits', attachContainer: { _deleted: [{ id: 1 }], default: entries.slice(0, 999) } }),
    })
    expect(ok.status).toBe(500)
    const body = await ok.json()
    expect(body).toMatchObject({ code: 'attach-save-failure', failureCount: 1000 })
    expect(body.id).toBeUndefined()
    expect(body.failures.length).toBeLessThanOrEqual(100)
    expect((await posts()).length).toBe(before)
  })

  it('PUT /board/:id holds the same bound, and a post text has an upper bound', async () => {
    const post = await (await api('/board', { method: 'POST', body: JSON.stringify({ title: 'mine' }) })).json()
    const res = await api(`/board/${post.id}`, {
      method: 'PUT',
      body: JSON.stringify({
        attachContainer: { default: Array.from({ length: 600 }, () => 0), image: Array.from({ length: 401 }, () => 0) },
      }),
    })
    expect(res.status).toBe(400)
    expect((await res.json()).code).toBe('too-many-entries')
    const long = await api('/board', { method: 'POST', body: JSON.stringify({ title: 'long', body: 'y'.repeat(1024 * 1024 + 1) }) })
    expect(long.status).toBe(400)
    expect(await long.json()).toMatchObject({ code: 'bad-request', message: expect.stringMatching(/at most 1048576/) })
  })
})
