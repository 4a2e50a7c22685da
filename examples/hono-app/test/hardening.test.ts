/**
 * The reference server's own rules of issue "Authorization on every path": only a board post's author
 * changes its attachments, board bodies are bounded, private files get signed view URLs.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { sign, start, type Running } from './helpers.js'

describe('reference server: ownership of board attachments, bounded bodies, signed view URLs', () => {
  let srv: Running
  let alice: string
  let bob: string
  const logged: string[] = []
  beforeAll(async () => {
    srv = await start({ ATTACH_SIGNING_SECRET: 'reference-signing-secret-0123456789' }, logged)
    alice = await sign('1')
    bob = await sign('2')
  })
  afterAll(async () => srv?.close())

  const api = (path: string, init: RequestInit & { token?: string | null } = {}) => {
    const { token, ...rest } = init
    const headers = new Headers(rest.headers)
    if (token !== null) headers.set('authorization', `Bearer ${token ?? alice}`)
    if (typeof rest.body === 'string' && !headers.has('content-type')) headers.set('content-type', 'application/json')
    return fetch(srv.base + path, { ...rest, headers })
  }
  const tmpUpload = async (content: string, name: string, token: string, refDomain = 'board', refCategory = 'default') => {
    const fd = new FormData()
    fd.set('refDomain', refDomain)
    fd.set('refCategory', refCategory)
    fd.set('file', new Blob([content]), name)
    const res = await api('/api/storage/attach/tmp', { method: 'POST', body: fd, token })
    expect(res.status).toBe(200)
    return (await res.json()).files[0] as { name: string }
  }

  it("lets only a board post's author change its attachments; a refKey with no post is refused", async () => {
    const post = await (await api('/board', { method: 'POST', body: JSON.stringify({ title: "alice's post" }) })).json()
    const bobs = await tmpUpload('from bob', 'bob.txt', bob)
    const res = await api(`/api/storage/attach/board/${post.id}`, {
      method: 'POST',
      token: bob,
      body: JSON.stringify({ refDomain: 'board', default: [{ savedName: bobs.name }] }),
    })
    expect(res.status).toBe(403)
    expect(await res.json()).toMatchObject({ code: 'forbidden', message: expect.any(String) })
    const bag = await (await api(`/board/${post.id}`)).json()
    expect(bag.attachContainer.default).toEqual([])
    const noPost = await api('/api/storage/attach/board/987654', {
      method: 'POST',
      token: bob,
      body: JSON.stringify({ refDomain: 'board', default: [{ savedName: bobs.name }] }),
    })
    expect(noPost.status).toBe(403)
    // The author may.
    const alices = await tmpUpload('from alice', 'alice.txt', alice)
    const ok = await api(`/api/storage/attach/board/${post.id}`, {
      method: 'POST',
      body: JSON.stringify({ refDomain: 'board', default: [{ savedName: alices.name }] }),
    })
    expect(ok.status).toBe(200)
    // Domain demo has no hook and stays open to any signed-in user.
    const open = await api('/api/storage/attach/demo/anything', {
      method: 'POST',
      token: bob,
      body: JSON.stringify({ refDomain: 'demo', default: [{ savedName: (await tmpUpload('x', 'x.txt', bob, 'demo')).name }] }),
    })
    expect(open.status).toBe(200)
  })

  it('refuses a board body over 2 MiB with 413 before reading it, and one just under is read', async () => {
    const big = JSON.stringify({ title: 'big', body: 'x'.repeat(2 * 1024 * 1024) })
    const res = await api('/board', { method: 'POST', body: big })
    expect(res.status).toBe(413)
    expect(await res.json()).toMatchObject({ code: 'too-large', message: expect.any(String) })
    // Without a Content-Length (chunked), the count stops it too.
    const chunks = new ReadableStream<Uint8Array>({
      start(c) {
        for (let i = 0; i < 5; i++) c.enqueue(new TextEncoder().encode(' '.repeat(1024 * 1024)))
        c.close()
      },
    })
    const chunked = await fetch(`${srv.base}/board`, {
      method: 'POST',
      body: chunks,
      headers: { authorization: `Bearer ${alice}`, 'content-type': 'application/json' },
      duplex: 'half',
    } as RequestInit)
    expect(chunked.status).toBe(413)
    expect((await chunked.json()).code).toBe('too-large')
    const fits = await api('/board', { method: 'POST', body: JSON.stringify({ title: 'fits', body: 'y'.repeat(1024 * 1024) }) })
    expect(fits.status).toBe(201)
  })

  it("gives a private file's creator a signed url that opens without a token, and nobody else anything", async () => {
    const f = await tmpUpload('private bytes', 'p.txt', alice, 'demo', 'private')
    const saved = await api('/api/storage/attach/demo/signed', {
      method: 'POST',
      body: JSON.stringify({ refDomain: 'demo', private: [{ savedName: f.name }] }),
    })
    expect(saved.status).toBe(200)
    const mine = await (await api('/api/storage/attach/demo/signed/private')).json()
    const url = mine.private[0].url as string
    expect(url).toMatch(/\?exp=\d+&sig=/)
    const view = await fetch(srv.base + url)
    expect(view.status).toBe(200)
    expect(await view.text()).toBe('private bytes')
    expect((await fetch(srv.base + url.split('?')[0])).status).toBe(403)
    const bobs = await (await api('/api/storage/attach/demo/signed/private', { token: bob })).json()
    expect(bobs.private).toEqual([])
    expect(logged.some((l) => l.includes('ATTACH_SIGNING_SECRET is not set'))).toBe(false)
  })
})

describe('reference server without ATTACH_SIGNING_SECRET', () => {
  it('derives the signing secret from the JWT secret, says so, and still signs', async () => {
    const logged: string[] = []
    const srv = await start({}, logged)
    try {
      expect(logged.some((l) => l.includes('ATTACH_SIGNING_SECRET is not set'))).toBe(true)
      const alice = await sign('1')
      const fd = new FormData()
      fd.set('refDomain', 'demo')
      fd.set('refCategory', 'private')
      fd.set('file', new Blob(['p']), 'p.txt')
      const auth = { authorization: `Bearer ${alice}` }
      const up = await (await fetch(`${srv.base}/api/storage/attach/tmp`, { method: 'POST', body: fd, headers: auth })).json()
      const saved = await fetch(`${srv.base}/api/storage/attach/demo/k`, {
        method: 'POST',
        headers: { ...auth, 'content-type': 'application/json' },
        body: JSON.stringify({ private: [{ savedName: up.files[0].name }] }),
      })
      const url = (await saved.json()).attachList[0].url as string
      expect(url).toMatch(/\?exp=\d+&sig=/)
      expect((await fetch(srv.base + url)).status).toBe(200)
    } finally {
      await srv.close()
    }
  })
})
