import { createHash, randomBytes } from 'node:crypto'
import { mkdtemp, readdir, rm, utimes } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { LocalStore } from '../../stores/local-store.js'
import type { Store } from '../../stores/store.js'
import { makeKit, png, type Kit } from '../../testing/handler-kit.js'

const TUS = '/api/storage/attach/tus'
const b64 = (s: string) => Buffer.from(s).toString('base64')
const metadata = (m: Record<string, string>) =>
  Object.entries(m)
    .map(([k, val]) => `${k} ${b64(val)}`)
    .join(',')

/** A store of its own type over a directory, without `localPath`: the part-object path of every remote store. */
function partsStore(dir: string): Store {
  const local = new LocalStore('remote-tmp', { baseDir: dir })
  return {
    name: 'remote-tmp',
    type: 'parts',
    put: (k, b, o) => local.put(k, b, o),
    get: (k, r) => local.get(k, r),
    stat: (k) => local.stat(k),
    exists: (k) => local.exists(k),
    move: (a, b) => local.move(a, b),
    copy: (a, b) => local.copy(a, b),
    delete: (k) => local.delete(k),
    list: (p) => local.list(p),
    close: () => local.close(),
  }
}

async function create(
  kit: Kit,
  length: number | undefined,
  meta: Record<string, string>,
  init: { user?: string; headers?: Record<string, string>; body?: Uint8Array } = {},
) {
  const headers: Record<string, string> = { 'tus-resumable': '1.0.0', 'upload-metadata': metadata(meta), ...init.headers }
  if (length === undefined) headers['upload-defer-length'] = '1'
  else headers['upload-length'] = String(length)
  if (init.body) headers['content-type'] = 'application/offset+octet-stream'
  return kit.call(TUS, { method: 'POST', headers, body: init.body && new Uint8Array(init.body), user: init.user })
}

function patch(
  kit: Kit,
  location: string,
  offset: number,
  body: Uint8Array,
  init: { user?: string; headers?: Record<string, string> } = {},
) {
  return kit.call(location, {
    method: 'PATCH',
    headers: {
      'tus-resumable': '1.0.0',
      'content-type': 'application/offset+octet-stream',
      'upload-offset': String(offset),
      ...init.headers,
    },
    body: new Uint8Array(body),
    user: init.user,
  })
}

const head = (kit: Kit, location: string, user?: string) =>
  kit.call(location, { method: 'HEAD', headers: { 'tus-resumable': '1.0.0' }, user })

for (const variant of ['local append', 'part objects'] as const) {
  describe(`tus resumable uploads (${variant})`, () => {
    let kit: Kit
    let remoteDir: string
    beforeAll(async () => {
      remoteDir = await mkdtemp(join(tmpdir(), 'attach-tus-'))
      kit = await makeKit('sqlite', {
        ...(variant === 'part objects' ? { stores: { remote: partsStore(remoteDir) } } : {}),
        config: {
          upload: { maxFileSize: 1024 * 1024 },
          resumable: { enabled: true, partSize: 64 * 1024 },
          ...(variant === 'part objects' ? { tmpStore: 'remote' } : {}),
        },
      })
    })
    afterAll(async () => {
      await kit.cleanup()
      await rm(remoteDir, { recursive: true, force: true })
    })
    const tmpFiles = async () => (variant === 'part objects' ? kit.files(remoteDir) : kit.files(kit.tmpDir))

    it('uploads in chunks, resumes from HEAD, ends as a temporary file the confirmed save accepts', async () => {
      const bytes = randomBytes(300 * 1024)
      const res = await create(kit, bytes.length, { filename: 'report.bin', refDomain: 'demo' })
      expect(res.status).toBe(201)
      expect(res.headers.get('tus-resumable')).toBe('1.0.0')
      expect(res.headers.get('upload-expires')).toBeTruthy()
      const location = res.headers.get('location')!
      const name = location.split('/').pop()!
      expect(name).toMatch(/^[0-9a-f-]{36}\.bin$/)
      const first = await patch(kit, location, 0, bytes.subarray(0, 100 * 1024))
      expect(first.status).toBe(204)
      expect(first.headers.get('upload-offset')).toBe(String(100 * 1024))
      const h = await head(kit, location)
      expect(h.status).toBe(200)
      expect(h.headers.get('upload-offset')).toBe(String(100 * 1024))
      expect(h.headers.get('upload-length')).toBe(String(bytes.length))
      expect(h.headers.get('cache-control')).toBe('no-store')
      const last = await patch(kit, location, 100 * 1024, bytes.subarray(100 * 1024))
      expect(last.status).toBe(204)
      expect(last.headers.get('upload-offset')).toBe(String(bytes.length))
      expect(await tmpFiles()).toEqual([`_tmp/${name}`, `_tmp/${name}.meta.json`])
      // Once complete, HEAD answers the whole length.
      expect((await head(kit, location)).headers.get('upload-offset')).toBe(String(bytes.length))
      const saved = await kit.call('/api/storage/attach/demo/900', {
        method: 'POST',
        body: JSON.stringify({ default: [{ savedName: name }] }),
      })
      expect(saved.status).toBe(200)
      const rec = (await saved.json()).attachList[0]
      expect(rec.displayName).toBe('report.bin')
      expect(rec.fileSize).toBe(bytes.length)
      const view = await kit.call(`/assets/storage/attach/view/${rec.id}`)
      expect(
        createHash('sha256')
          .update(Buffer.from(await view.arrayBuffer()))
          .digest('hex'),
      ).toBe(createHash('sha256').update(bytes).digest('hex'))
      expect(await tmpFiles()).toEqual([])
    })

    it('creation-with-upload, then commitAttachContainer accepts the name', async () => {
      const bytes = randomBytes(1000)
      const res = await create(kit, bytes.length, { filename: 'a.txt', refDomain: 'demo', refCategory: 'default' }, { body: bytes })
      expect(res.status).toBe(201)
      expect(res.headers.get('upload-offset')).toBe('1000')
      const name = res.headers.get('location')!.split('/').pop()!
      const views = await kit.storage.commitAttachContainer({
        refKey: 901,
        attachContainer: { refDomain: 'demo', default: [{ savedName: name }] },
        user: { id: '7' },
      })
      expect(views[0]!.fileSize).toBe(1000)
      expect(views[0]!.displayName).toBe('a.txt')
    })

    it('runs the category filters at completion: a refusal answers 400 {code, message} and leaves nothing', async () => {
      const bytes = Buffer.from('not an image at all')
      const res = await create(kit, bytes.length, { filename: 'x.png', refDomain: 'demo', refCategory: 'image' })
      const location = res.headers.get('location')!
      const last = await patch(kit, location, 0, bytes)
      expect(last.status).toBe(400)
      expect(await last.json()).toMatchObject({ code: 'type' })
      expect(await tmpFiles()).toEqual([])
      expect((await head(kit, location)).status).toBe(404)
      const image = new Uint8Array(await (await png()).arrayBuffer())
      const ok = await create(kit, image.length, { filename: 'y.png', refDomain: 'demo', refCategory: 'image' }, { body: image })
      expect(ok.status).toBe(201)
      await kit.call(ok.headers.get('location')!, { method: 'DELETE', headers: { 'tus-resumable': '1.0.0' } })
    })

    it('refuses bad input', async () => {
      // Upload-Length over the limit: 413 at creation.
      const big = await create(kit, 1024 * 1024 + 1, { filename: 'big.bin', refDomain: 'demo' })
      expect(big.status).toBe(413)
      expect(await big.json()).toMatchObject({ code: 'too-large' })
      // Unknown domain, missing metadata, missing Tus-Resumable.
      expect((await create(kit, 10, { filename: 'a', refDomain: 'nope' })).status).toBe(400)
      expect((await create(kit, 10, { filename: 'a' })).status).toBe(400)
      expect((await kit.call(TUS, { method: 'POST', headers: { 'upload-length': '1' } })).status).toBe(412)
      const res = await create(kit, 100, { filename: 'a.bin', refDomain: 'demo' })
      const location = res.headers.get('location')!
      // Wrong offset: 409; wrong content type: 415.
      const c = await patch(kit, location, 5, new Uint8Array(5))
      expect(c.status).toBe(409)
      expect(await c.json()).toMatchObject({ code: 'conflict' })
      const t = await patch(kit, location, 0, new Uint8Array(5), { headers: { 'content-type': 'application/octet-stream' } })
      expect(t.status).toBe(415)
      expect(await t.json()).toMatchObject({ code: 'unsupported-media-type' })
      // Another user's upload: 403 on PATCH, HEAD and DELETE.
      expect((await patch(kit, location, 0, new Uint8Array(5), { user: '8' })).status).toBe(403)
      expect((await head(kit, location, '8')).status).toBe(403)
      expect((await kit.call(location, { method: 'DELETE', headers: { 'tus-resumable': '1.0.0' }, user: '8' })).status).toBe(403)
      // Unknown upload: 404; without a token: 401.
      expect((await head(kit, `${TUS}/00000000-0000-4000-8000-000000000000.bin`)).status).toBe(404)
      expect((await kit.call(location, { method: 'HEAD', user: null, headers: { 'tus-resumable': '1.0.0' } })).status).toBe(401)
      // A lying chunk (past Upload-Length): 413, nothing left.
      const lie = await patch(kit, location, 0, new Uint8Array(101))
      expect(lie.status).toBe(413)
      expect((await head(kit, location)).status).toBe(404)
      expect(await tmpFiles()).toEqual([])
    })

    it('takes PATCH and DELETE as POST with X-HTTP-Method-Override', async () => {
      const res = await create(kit, 4, { filename: 'o.txt', refDomain: 'demo' })
      const location = res.headers.get('location')!
      const over = (method: string, headers: Record<string, string>, body?: Uint8Array) =>
        kit.call(location, {
          method: 'POST',
          headers: { 'tus-resumable': '1.0.0', 'x-http-method-override': method, ...headers },
          body: body && new Uint8Array(body),
        })
      const p = await over('PATCH', { 'content-type': 'application/offset+octet-stream', 'upload-offset': '0' }, new Uint8Array([1, 2]))
      expect([p.status, p.headers.get('upload-offset')]).toEqual([204, '2'])
      expect((await over('GET', {})).status).toBe(404)
      expect((await over('DELETE', {})).status).toBe(204)
      expect((await head(kit, location)).status).toBe(404)
    })

    it('deferred length: bytes past the size limit answer 413 and leave nothing', async () => {
      const res = await create(kit, undefined, { filename: 'd.bin', refDomain: 'demo' })
      expect(res.status).toBe(201)
      const location = res.headers.get('location')!
      expect((await head(kit, location)).headers.get('upload-defer-length')).toBe('1')
      const ok = await patch(kit, location, 0, new Uint8Array(512 * 1024))
      expect(ok.status).toBe(204)
      // Without Content-Length (a stream), the limit is found while the bytes arrive.
      const stream = new ReadableStream<Uint8Array>({
        start(c) {
          for (let i = 0; i < 9; i++) c.enqueue(new Uint8Array(64 * 1024))
          c.close()
        },
      })
      const over = await kit.call(location, {
        method: 'PATCH',
        headers: { 'tus-resumable': '1.0.0', 'content-type': 'application/offset+octet-stream', 'upload-offset': String(512 * 1024) },
        body: stream,
        duplex: 'half',
      } as RequestInit)
      expect(over.status).toBe(413)
      expect((await head(kit, location)).status).toBe(404)
      expect(await tmpFiles()).toEqual([])
      // A deferred upload completes once a PATCH names its length.
      const d = await create(kit, undefined, { filename: 'e.bin', refDomain: 'demo' })
      const loc = d.headers.get('location')!
      const done = await patch(kit, loc, 0, new Uint8Array(10), { headers: { 'upload-length': '10' } })
      expect(done.status).toBe(204)
      const n = loc.split('/').pop()!
      expect(await tmpFiles()).toEqual([`_tmp/${n}`, `_tmp/${n}.meta.json`])
      await kit.call(loc, { method: 'DELETE', headers: { 'tus-resumable': '1.0.0' } })
      expect(await tmpFiles()).toEqual([])
    })

    it('keeps what a dropped PATCH delivered (whole parts on a remote store) and resumes from there', async () => {
      const bytes = randomBytes(300 * 1024)
      const res = await create(kit, bytes.length, { filename: 'cut.bin', refDomain: 'demo' })
      const location = res.headers.get('location')!
      const sent = 3 * 64 * 1024 + 10 * 1024
      let i = 0
      const body = new ReadableStream<Uint8Array>({
        pull(c) {
          if (i >= sent) {
            c.error(new Error('connection reset'))
            return
          }
          const n = Math.min(16 * 1024, sent - i)
          c.enqueue(new Uint8Array(bytes.subarray(i, i + n)))
          i += n
        },
      })
      const cut = await kit.call(location, {
        method: 'PATCH',
        headers: { 'tus-resumable': '1.0.0', 'content-type': 'application/offset+octet-stream', 'upload-offset': '0' },
        body,
        duplex: 'half',
      } as RequestInit)
      expect(cut.status).toBeGreaterThanOrEqual(400)
      const offset = Number((await head(kit, location)).headers.get('upload-offset'))
      if (variant === 'part objects') expect(offset).toBe(3 * 64 * 1024)
      else {
        expect(offset).toBeGreaterThanOrEqual(3 * 64 * 1024)
        expect(offset).toBeLessThanOrEqual(sent)
      }
      const rest = await patch(kit, location, offset, bytes.subarray(offset))
      expect(rest.status).toBe(204)
      const name = location.split('/').pop()!
      const views = await kit.storage.commitAttachContainer({
        refKey: 902,
        attachContainer: { refDomain: 'demo', default: [{ savedName: name }] },
        user: { id: '7' },
      })
      const view = await kit.call(`/assets/storage/attach/view/${views[0]!.id}`)
      expect(Buffer.from(await view.arrayBuffer()).equals(bytes)).toBe(true)
    })

    it('checksum: keeps a PATCH only whole and with the digest of Upload-Checksum (460 otherwise), refuses unknown algorithms', async () => {
      const options = await kit.call(TUS, { method: 'OPTIONS' })
      expect(options.headers.get('tus-extension')).toContain('checksum')
      expect(options.headers.get('tus-checksum-algorithm')).toBe('sha1,sha256,md5')
      const bytes = randomBytes(200 * 1024)
      const digest = (algorithm: string, b: Uint8Array) => `${algorithm} ${createHash(algorithm).update(b).digest('base64')}`
      const first = bytes.subarray(0, 150 * 1024)
      // The digest of the first part, with creation-with-upload.
      const res = await create(
        kit,
        bytes.length,
        { filename: 'summed.bin', refDomain: 'demo' },
        {
          body: first,
          headers: { 'upload-checksum': digest('sha256', first) },
        },
      )
      expect(res.status).toBe(201)
      expect(res.headers.get('upload-offset')).toBe(String(first.length))
      const location = res.headers.get('location')!
      const rest = bytes.subarray(first.length)
      // A digest of other bytes: 460, nothing of them kept, the offset where it was.
      const wrong = await patch(kit, location, first.length, rest, { headers: { 'upload-checksum': digest('sha1', first) } })
      expect(wrong.status).toBe(460)
      expect(await wrong.json()).toMatchObject({ code: 'checksum-mismatch' })
      expect((await head(kit, location)).headers.get('upload-offset')).toBe(String(first.length))
      // A dropped PATCH with a checksum keeps nothing either.
      let i = 0
      const dropping = new ReadableStream<Uint8Array>({
        pull(c) {
          if (i >= 20 * 1024) return c.error(new Error('connection reset'))
          c.enqueue(new Uint8Array(rest.subarray(i, i + 10 * 1024)))
          i += 10 * 1024
        },
      })
      const cut = await kit.call(location, {
        method: 'PATCH',
        headers: {
          'tus-resumable': '1.0.0',
          'content-type': 'application/offset+octet-stream',
          'upload-offset': String(first.length),
          'upload-checksum': digest('md5', rest),
        },
        body: dropping,
        duplex: 'half',
      } as RequestInit)
      expect(cut.status).toBeGreaterThanOrEqual(400)
      expect((await head(kit, location)).headers.get('upload-offset')).toBe(String(first.length))
      // Unknown and malformed: 400, before any byte is kept.
      for (const value of ['crc32 AAAA', 'sha256', 'sha256 not base64!']) {
        const bad = await patch(kit, location, first.length, rest, { headers: { 'upload-checksum': value } })
        expect([value, bad.status, (await bad.json()).code]).toEqual([value, 400, 'bad-request'])
      }
      // The right digest: kept, and the upload completes with the right bytes.
      const ok = await patch(kit, location, first.length, rest, { headers: { 'upload-checksum': digest('md5', rest) } })
      expect(ok.status).toBe(204)
      const name = location.split('/').pop()!
      const [saved] = await kit.storage.commitAttachContainer({
        refKey: 903,
        attachContainer: { refDomain: 'demo', default: [{ savedName: name }] },
        user: { id: '7' },
      })
      const view = await kit.call(`/assets/storage/attach/view/${saved!.id}`)
      expect(Buffer.from(await view.arrayBuffer()).equals(bytes)).toBe(true)
    })

    it('termination removes an unfinished upload; the sweep removes expired ones', async () => {
      const a = await create(kit, 100, { filename: 'a.bin', refDomain: 'demo' })
      const la = a.headers.get('location')!
      await patch(kit, la, 0, new Uint8Array(10))
      const del = await kit.call(la, { method: 'DELETE', headers: { 'tus-resumable': '1.0.0' } })
      expect(del.status).toBe(204)
      expect((await head(kit, la)).status).toBe(404)
      expect(await tmpFiles()).toEqual([])
      const b = await create(kit, 100, { filename: 'b.bin', refDomain: 'demo' })
      const lb = b.headers.get('location')!
      await patch(kit, lb, 0, new Uint8Array(10))
      const root = variant === 'part objects' ? remoteDir : kit.tmpDir
      const old = new Date(Date.now() - 48 * 3600 * 1000)
      const dir = join(root, '_tus', lb.split('/').pop()!)
      for (const f of await readdir(dir)) await utimes(join(dir, f), old, old)
      expect((await kit.storage.sweep()).resumableUploads).toBe(0) // created now: not expired by its info
      // An upload created more than tmp-ttl ago is refused, then swept.
      const info = JSON.parse(await (await import('node:fs/promises')).readFile(join(dir, 'info.json'), 'utf8'))
      info.createdDt = old.toISOString()
      await (await import('node:fs/promises')).writeFile(join(dir, 'info.json'), JSON.stringify(info))
      await utimes(join(dir, 'info.json'), old, old)
      expect((await head(kit, lb)).status).toBe(404)
      expect((await kit.storage.sweep()).resumableUploads).toBe(1)
      expect(await tmpFiles()).toEqual([])
    })
  })
}

describe('tus resumable uploads, switched off', () => {
  it('answers 404 on every tus route while resumable.enabled is false', async () => {
    const kit = await makeKit('sqlite')
    try {
      const res = await create(kit, 10, { filename: 'a.txt', refDomain: 'demo' })
      expect(res.status).toBe(404)
      expect((await head(kit, `${TUS}/00000000-0000-4000-8000-000000000000.bin`)).status).toBe(404)
    } finally {
      await kit.cleanup()
    }
  })
})
