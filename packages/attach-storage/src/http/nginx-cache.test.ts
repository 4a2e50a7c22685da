/**
 * Signed views decided once: nginx asks the decision route (routes/auth-request.ts) once per signed view
 * URL and keeps its answer for at most the URL's expiry and the configured bound, sending the file itself
 * meanwhile. Real nginx, configured as docs/serving.md gives it (testing/nginx-signed.ts).
 */
import { createHash } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { UrlSigner } from '../service/signing.js'
import { type FrontServer, type NodeUpstream, serveOnNode } from '../testing/front-servers.js'
import { type Kit, makeKit, saveFile } from '../testing/handler-kit.js'
import { startSignedNginx } from '../testing/nginx-signed.js'

const ASSETS = '/assets/storage'
const API = '/api/storage'
const SIGNING = 'signing-secret-of-at-least-16-bytes'
const BOUND = 2
const sha = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')

describe('signed views through nginx, decided once per URL', () => {
  let kit: Kit
  let server: NodeUpstream
  let nginx: FrontServer
  const asked: string[] = []
  const bytes = new Uint8Array(50 * 1024).map((_, i) => (i * 13) % 251)
  const signer = new UrlSigner(SIGNING, 10 * 60_000, () => new Date())
  const decisions = () => asked.filter((p) => p.includes('/attach-decide/')).length
  const views = () => asked.filter((p) => p.includes('/attach/view/')).length
  const signed = (id: number) => `${nginx.url}${ASSETS}/attach/view/${id}?${signer.query(id)}`
  const save = async (name: string, category: string) => (await saveFile(kit, new Blob([bytes]), name, '1', category)).id as number

  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      config: {
        signing: { secret: SIGNING, ttl: '10m' },
        stores: { local: { type: 'local', serve: 'x-accel-redirect', 'serve-location': '/_attach/local/' } },
      },
    })
    server = await serveOnNode(async (request) => {
      asked.push(new URL(request.url).pathname)
      return kit.handler.fetch(request)
    })
    nginx = await startSignedNginx({
      upstreamPort: server.port,
      assetsPrefix: ASSETS,
      apiPrefix: API,
      store: { location: '/_attach/local/', baseDir: kit.baseDir },
      boundSeconds: BOUND,
    })
  })
  afterAll(async () => {
    await nginx?.stop()
    await server?.stop()
    await kit?.cleanup()
  })

  it('answers repeated views of one signed URL from nginx, asking the server once', async () => {
    const id = await save('보고서.bin', 'private')
    const url = signed(id)
    const before = { decisions: decisions(), views: views() }
    for (let i = 0; i < 10; i++) {
      const res = await fetch(url)
      expect(res.status, nginx.config).toBe(200)
      expect(sha(new Uint8Array(await res.arrayBuffer()))).toBe(sha(bytes))
      expect(res.headers.get('content-type')).toBe('application/octet-stream')
      expect(res.headers.get('content-disposition')).toBe(
        `inline; filename="___.bin"; filename*=UTF-8''${encodeURIComponent('보고서.bin')}`,
      )
      expect(res.headers.get('cache-control')).toBe('private, max-age=31536000, immutable')
      expect(res.headers.get('x-content-type-options')).toBe('nosniff')
      expect(res.headers.get('x-attach-file')).toBeNull()
    }
    expect(decisions() - before.decisions).toBe(1)
    expect(views() - before.views).toBe(0)
    // Range and conditional requests are nginx's own, as with the plain hand-off.
    const ranged = await fetch(url, { headers: { range: 'bytes=10-19' } })
    expect(ranged.status).toBe(206)
    expect(new Uint8Array(await ranged.arrayBuffer())).toEqual(bytes.subarray(10, 20))
    const etag = (await fetch(url)).headers.get('etag')!
    expect((await fetch(url, { headers: { 'if-none-match': etag } })).status).toBe(304)
    expect(decisions() - before.decisions).toBe(1)
  })

  it('refuses a tampered signature every time (403 JSON from the server, never kept as allowed)', async () => {
    const id = await save('secret.bin', 'private')
    const good = signed(id)
    expect((await fetch(good)).status).toBe(200)
    const tampered = good.replace(/sig=(.)/, (_m, c: string) => `sig=${c === 'A' ? 'B' : 'A'}`)
    const before = decisions()
    for (let i = 0; i < 3; i++) {
      const res = await fetch(tampered)
      expect(res.status).toBe(403)
      expect(await res.json()).toMatchObject({ code: 'forbidden', message: expect.any(String) })
    }
    expect(decisions() - before).toBe(3)
    // Another record's signature does not open this one.
    const other = await save('other.bin', 'private')
    const borrowed = `${nginx.url}${ASSETS}/attach/view/${other}?${signer.query(id)}`
    expect((await fetch(borrowed)).status).toBe(403)
  })

  it("keeps the server's headers for active content: a download, sandboxed", async () => {
    const id = (await saveFile(kit, new Blob(['<script>alert(1)</script>'], { type: 'text/html' }), 'page.html', '1', 'private')).id
    for (let i = 0; i < 2; i++) {
      const res = await fetch(signed(id))
      expect(res.status).toBe(200)
      expect(await res.text()).toBe('<script>alert(1)</script>')
      expect(res.headers.get('content-type')).toBe('application/octet-stream')
      expect(res.headers.get('content-disposition')).toMatch(/^attachment; filename="page.html"/)
      expect(res.headers.get('content-security-policy')).toBe("default-src 'none'; sandbox")
    }
    const head = await fetch(signed(id), { method: 'HEAD' })
    expect(head.status).toBe(200)
    expect(head.headers.get('content-length')).toBe('25')
  })

  it('answers a HEIC photo as the JPEG the view shows, never the original', async () => {
    const heic = readFileSync(fileURLToPath(new URL('../../test/fixtures/photo.heic', import.meta.url)))
    const blob = new Blob([new Uint8Array(heic)], { type: 'image/heic' })
    const id = (await saveFile(kit, blob, 'IMG_0001.HEIC', '1', 'private')).id
    for (let i = 0; i < 3; i++) {
      const res = await fetch(signed(id))
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toBe('image/jpeg')
      const body = new Uint8Array(await res.arrayBuffer())
      expect([...body.subarray(0, 3)]).toEqual([0xff, 0xd8, 0xff])
    }
  })

  it('refuses an expired URL', async () => {
    const id = await save('late.bin', 'private')
    const past = new UrlSigner(SIGNING, 60_000, () => new Date(Date.now() - 10 * 60_000))
    const res = await fetch(`${nginx.url}${ASSETS}/attach/view/${id}?${past.query(id)}`)
    expect(res.status).toBe(403)
    expect(await res.json()).toMatchObject({ code: 'forbidden' })
  })

  it('refuses a record deleted after its first view once the bound has passed', async () => {
    const id = await save('gone.bin', 'private')
    const url = signed(id)
    expect((await fetch(url)).status).toBe(200)
    const deleted = await kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id }]), user: '7' })
    expect(await deleted.json()).toEqual({ success: true, count: 1 })
    // The server refuses at once; nginx may still send it until its decision is older than the bound.
    expect((await kit.call(`${ASSETS}/attach/view/${id}?${signer.query(id)}`)).status).toBe(404)
    await new Promise((r) => setTimeout(r, (BOUND + 1.2) * 1000))
    const res = await fetch(url)
    expect(res.status).toBe(404)
    expect(await res.json()).toMatchObject({ code: 'not-found' })
  })

  it('keeps the plain hand-off for a public file, asking the server each time', async () => {
    const id = await save('open.bin', 'default')
    const before = { decisions: decisions(), views: views() }
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${nginx.url}${ASSETS}/attach/view/${id}`)
      expect(res.status).toBe(200)
      expect(res.headers.get('cache-control')).toBe('public, max-age=31536000, immutable')
      expect(sha(new Uint8Array(await res.arrayBuffer()))).toBe(sha(bytes))
    }
    expect(views() - before.views).toBe(3)
    expect(decisions() - before.decisions).toBe(0)
    // A signature on a public file is not decided by nginx: the view route answers it.
    const res = await fetch(`${nginx.url}${ASSETS}/attach/view/${id}?${signer.query(id)}`)
    expect(res.status).toBe(200)
    expect(sha(new Uint8Array(await res.arrayBuffer()))).toBe(sha(bytes))
    expect(decisions() - before.decisions).toBe(1)
    expect(views() - before.views).toBe(4)
  })

  it('sends a resized view of a signed URL to the server, and hides the decision route from outside', async () => {
    const id = await save('resize.bin', 'private')
    const before = views()
    const res = await fetch(`${signed(id)}&w=10`)
    await res.arrayBuffer()
    expect(views() - before).toBe(1)
    const outside = await fetch(`${nginx.url}${ASSETS}/attach-decide/view/${id}?${signer.query(id)}`)
    expect(outside.status).toBe(404)
    await outside.arrayBuffer()
  })

  it('answers the decision route directly: the bound, 4xx JSON for bad input', async () => {
    const id = await save('direct.bin', 'private')
    const ok = await kit.call(`${ASSETS}/attach-decide/view/${id}?${signer.query(id)}`, { headers: { 'x-attach-cache-bound': '5' } })
    expect(ok.status).toBe(200)
    expect(ok.headers.get('x-accel-expires')).toBe('5')
    expect(ok.headers.get('x-attach-file')).toMatch(/^\/_attach\/local\/demo\/\d{4}\/\d{2}\/1\/[0-9a-f-]{36}\.bin$/)
    const bad = await kit.call(`${ASSETS}/attach-decide/view/${id}?${signer.query(id)}`, { headers: { 'x-attach-cache-bound': 'soon' } })
    expect(bad.status).toBe(400)
    expect(await bad.json()).toMatchObject({ code: 'bad-request', message: expect.stringContaining('x-attach-cache-bound') })
    const unsigned = await kit.call(`${ASSETS}/attach-decide/view/${id}`)
    expect(unsigned.status).toBe(400)
    expect(await unsigned.json()).toMatchObject({ code: 'bad-request' })
  })
})
