import { execFileSync } from 'node:child_process'
import { createHash } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { AttachEvents } from '../service/attach-storage.js'
import { makeKit, saveFile, token, type Kit, jpeg } from '../testing/handler-kit.js'

const API = '/api/storage'
const ASSETS = '/assets/storage'

const size = async (res: Response) => {
  const m = await sharp(Buffer.from(await res.arrayBuffer())).metadata()
  return [m.width, m.height, m.format]
}

describe('serving', () => {
  let kit: Kit
  let events: Array<[keyof AttachEvents, any]> = []
  const get = (path: string, headers: Record<string, string> = {}) =>
    kit.handler.fetch(new Request(`http://x${ASSETS}${path}`, { headers }))

  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      on: {
        uploaded: (e) => void events.push(['uploaded', e]),
        saved: (e) => void events.push(['saved', e]),
        deleted: (e) => void events.push(['deleted', e]),
      },
    })
  })
  afterAll(async () => {
    await kit?.cleanup()
  })

  describe('conditional requests and ranges', () => {
    let rec: any
    const body = 'abcdefghijklmnopqrstuvwxyz'
    beforeAll(async () => {
      rec = await saveFile(kit, new Blob([body]), 'abc.txt', '600')
    })
    it('answers 304 to If-None-Match with the strong ETag, 200 to another', async () => {
      const etag = `"${createHash('sha256').update(body).digest('hex')}"`
      const res = await get(`/attach/view/${rec.id}`, { 'if-none-match': etag })
      expect(res.status).toBe(304)
      expect(await res.text()).toBe('')
      expect((await get(`/attach/view/${rec.id}`, { 'if-none-match': '"other"' })).status).toBe(200)
      expect((await get(`/attach/view/${rec.id}`, { 'if-none-match': `W/${etag}, "x"` })).status).toBe(304)
    })
    it('answers 304 to If-Modified-Since only when the file is unchanged since then', async () => {
      const last = (await get(`/attach/view/${rec.id}`)).headers.get('last-modified')!
      expect((await get(`/attach/view/${rec.id}`, { 'if-modified-since': last })).status).toBe(304)
      const later = new Date(Date.parse(last) + 3600_000).toUTCString()
      expect((await get(`/attach/view/${rec.id}`, { 'if-modified-since': later })).status).toBe(304)
      const earlier = new Date(Date.parse(last) - 3600_000).toUTCString()
      expect((await get(`/attach/view/${rec.id}`, { 'if-modified-since': earlier })).status).toBe(200)
      expect((await get(`/attach/view/${rec.id}`, { 'if-modified-since': 'garbage' })).status).toBe(200)
    })
    it('answers ranges with 206 and exact bytes, so media can seek', async () => {
      const cases: Array<[string, string, string]> = [
        ['bytes=0-4', 'abcde', 'bytes 0-4/26'],
        ['bytes=10-', body.slice(10), 'bytes 10-25/26'],
        ['bytes=-3', 'xyz', 'bytes 23-25/26'],
        ['bytes=25-100', 'z', 'bytes 25-25/26'],
      ]
      for (const [range, expected, contentRange] of cases) {
        const res = await get(`/attach/view/${rec.id}`, { range })
        expect(res.status, range).toBe(206)
        expect(res.headers.get('content-range')).toBe(contentRange)
        expect(res.headers.get('content-length')).toBe(String(expected.length))
        expect(await res.text()).toBe(expected)
      }
    })
    it('answers 416 to an unsatisfiable range, with a JSON body', async () => {
      for (const range of ['bytes=26-', 'bytes=100-200', 'bytes=-0']) {
        const res = await get(`/attach/view/${rec.id}`, { range })
        expect(res.status, range).toBe(416)
        expect(res.headers.get('content-range')).toBe('bytes */26')
        expect((await res.json()).code).toBe('range-not-satisfiable')
      }
    })
    it('ignores a range whose If-Range does not match, and malformed ranges', async () => {
      expect((await get(`/attach/view/${rec.id}`, { range: 'bytes=0-1', 'if-range': '"stale"' })).status).toBe(200)
      expect((await get(`/attach/view/${rec.id}`, { range: 'bytes=0-1,4-5' })).status).toBe(200)
      expect((await get(`/attach/view/${rec.id}`, { range: 'items=0-1' })).status).toBe(200)
    })
    it('answers HEAD with the headers and no body', async () => {
      const res = await kit.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${rec.id}`, { method: 'HEAD' }))
      expect(res.status).toBe(200)
      expect(res.headers.get('content-length')).toBe('26')
      expect(await res.text()).toBe('')
    })
  })

  describe('resize', () => {
    let tall: any
    let small: any
    let rotated: any
    let text: any
    beforeAll(async () => {
      tall = await saveFile(kit, await jpeg(1000, 2000), 'tall.jpg', '700', 'image')
      small = await saveFile(kit, await jpeg(40, 30), 'small.jpg', '701', 'image')
      // Stored 200×100 with EXIF orientation 6 (rotate 90°): it displays as 100×200.
      rotated = await saveFile(kit, await jpeg(200, 100, 6), 'rot.jpg', '702', 'image')
      text = await saveFile(kit, new Blob(['not an image']), 't.txt', '703')
    })

    it('keeps the aspect ratio with w or h alone and fits both inside the box', async () => {
      expect(await size(await get(`/attach/view/${tall.id}?w=100`))).toEqual([100, 200, 'jpeg'])
      expect(await size(await get(`/attach/view/${tall.id}?h=100`))).toEqual([50, 100, 'jpeg'])
      // 1000×2000 into 100×100 is 50×100: never distorted, never the inverted fit.
      expect(await size(await get(`/attach/view/${tall.id}?w=100&h=100`))).toEqual([50, 100, 'jpeg'])
      expect(await size(await get('/attach/view/demo/700/image/0?w=100'))).toEqual([100, 200, 'jpeg'])
    })
    it('never upscales: a smaller original comes back as it is', async () => {
      const original = await (await get(`/attach/view/${small.id}`)).arrayBuffer()
      const res = await get(`/attach/view/${small.id}?w=800`)
      expect(Buffer.from(await res.arrayBuffer()).equals(Buffer.from(original))).toBe(true)
    })
    it('applies EXIF orientation', async () => {
      expect(await size(await get(`/attach/view/${rotated.id}?w=50`))).toEqual([50, 100, 'jpeg'])
    })
    it('returns non-images as they are', async () => {
      expect(await (await get(`/attach/view/${text.id}?w=10`)).text()).toBe('not an image')
    })
    it('converts with format= and negotiates format=auto on Accept (Vary: Accept)', async () => {
      let res = await get(`/attach/view/${tall.id}?w=60&format=webp`)
      expect(res.headers.get('content-type')).toBe('image/webp')
      expect(await size(res)).toEqual([60, 120, 'webp'])
      res = await get(`/attach/view/${tall.id}?w=60&format=auto`, { accept: 'image/avif,image/webp,*/*' })
      expect(res.headers.get('content-type')).toBe('image/avif')
      expect(res.headers.get('vary')).toBe('Accept')
      res = await get(`/attach/view/${tall.id}?w=60&format=auto`, { accept: 'image/jpeg' })
      expect(res.headers.get('content-type')).toBe('image/jpeg')
      expect(res.headers.get('vary')).toBe('Accept')
    })
    it('stores the variant beside the original, keyed by {id}/{w}x{h}, and serves it from there', async () => {
      await get(`/attach/view/${tall.id}?w=120`)
      const files = await kit.files()
      const dir = tall.savedDir.slice(1)
      expect(files).toContain(`${dir}_v/${tall.id}/120x0`)
      const etag = (await get(`/attach/view/${tall.id}?w=120`)).headers.get('etag')
      expect(etag).toContain('-120x0')
      expect((await get(`/attach/view/${tall.id}?w=120`, { 'if-none-match': etag! })).status).toBe(304)
    })
    it('runs the resizer once for ten identical concurrent first requests, never serving a partial file', async () => {
      const before = kit.storage.resizer.generated
      const all = await Promise.all(Array.from({ length: 10 }, () => get(`/attach/view/${tall.id}?w=333`)))
      const bodies = await Promise.all(all.map(async (r) => Buffer.from(await r.arrayBuffer())))
      expect(kit.storage.resizer.generated - before).toBe(1)
      for (const b of bodies) expect(b.equals(bodies[0]!)).toBe(true)
      expect((await sharp(bodies[0]!).metadata()).width).toBe(333)
    })
    it('refuses bad w and h with 400', async () => {
      for (const q of ['w=0', 'w=-1', 'w=5000', 'w=abc', 'h=1.5', 'w=', 'h=99999999999', 'format=gif&w=10']) {
        const res = await get(`/attach/view/${tall.id}?${q}`)
        expect(res.status, q).toBe(400)
        expect((await res.json()).code).toBe('bad-request')
      }
    })
    it('never resizes temporary or direct files', async () => {
      const img = await jpeg(300, 200)
      const up = await kit.upload(`${API}/attach/tmp`, [
        ['refDomain', 'demo'],
        ['refCategory', 'image'],
        ['file', img, 'x.jpg'],
      ])
      const name = (await up.json()).files[0].name
      expect(await size(await get(`/attach-temp/view/demo/image/${name}?w=10`))).toEqual([300, 200, 'jpeg'])
      const d = await kit.upload(`${API}/attach/direct`, [
        ['refDomain', 'demo'],
        ['refCategory', 'image'],
        ['files', img, 'd.jpg'],
      ])
      const url = (await d.json()).files[0].url
      const res = await kit.handler.fetch(new Request(`http://x${url}&w=10`))
      expect(await size(res)).toEqual([300, 200, 'jpeg'])
    })
    it('serves the original of a corrupt image instead of failing, and checks access first', async () => {
      // A JPEG signature followed by garbage: sniffed as JPEG, undecodable.
      const bad = new Uint8Array(4000)
      bad.set([0xff, 0xd8, 0xff, 0xe0, 0x00, 0x10, 0x4a, 0x46, 0x49, 0x46, 0x00])
      const rec = await saveFile(kit, new Blob([bad]), 'broken.jpg', '704')
      expect(rec.fileType).toBe('image/jpeg')
      const res = await get(`/attach/view/${rec.id}?w=100`)
      expect(res.status).toBe(200)
      expect((await res.arrayBuffer()).byteLength).toBe(4000)
      const priv = await saveFile(kit, await jpeg(400, 400), 'p.jpg', '705', 'private')
      expect((await get(`/attach/view/${priv.id}?w=100`)).status).toBe(403)
      const ok = await get(`/attach/view/${priv.id}?w=100&access_token=${await token('7')}`)
      expect(await size(ok)).toEqual([100, 100, 'jpeg'])
    })
    it('deletes the variants with their attachment', async () => {
      const rec = await saveFile(kit, await jpeg(500, 500), 'gone.jpg', '706', 'image')
      await get(`/attach/view/${rec.id}?w=100`)
      await get(`/attach/view/${rec.id}?w=200&format=webp`)
      const prefix = `${rec.savedDir.slice(1)}_v/${rec.id}/`
      expect((await kit.files()).filter((f) => f.startsWith(prefix))).toHaveLength(2)
      const del = await kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id: rec.id }]) })
      expect((await del.json()).count).toBe(1)
      expect((await kit.files()).filter((f) => f.startsWith(rec.savedDir.slice(1)))).toEqual([])
    })
  })

  describe('the sweep and resize variants', () => {
    it('removes the file and the variants of a record whose delete did not finish', async () => {
      let shift = 0
      const k = await makeKit('sqlite', { now: () => new Date(Date.now() + shift) })
      try {
        const rec = await saveFile(k, await jpeg(300, 300), 'v.jpg', '1', 'image')
        await k.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${rec.id}?w=100`))
        const dir = rec.savedDir.slice(1)
        expect((await k.files()).filter((f) => f.startsWith(dir))).toHaveLength(2)
        // The records go, but the process stops before the files do (a crash, a store outage).
        const { deleted, orphanBlobs } = await k.storage.repository.markDeleted([rec.id])
        expect(deleted).toHaveLength(1)
        expect(orphanBlobs).toHaveLength(1)
        expect((await k.files()).filter((f) => f.startsWith(dir))).toHaveLength(2)
        // Within tmp-ttl the sweep leaves it (it may be a file still being saved) ...
        await k.storage.sweep()
        expect((await k.files()).filter((f) => f.startsWith(dir))).toHaveLength(2)
        // ... after it, the file and its variant go.
        shift = 25 * 3600 * 1000
        expect((await k.storage.sweep()).blobs).toBe(1)
        expect((await k.files()).filter((f) => f.startsWith(dir))).toEqual([])
      } finally {
        await k.cleanup()
      }
    })
  })

  describe('image bombs', () => {
    it('serves the original when the image has more pixels than the resizer accepts', async () => {
      const k = await makeKit('sqlite', { config: { resize: { maxInputPixels: 10_000 } } })
      try {
        // Kept in a category without the image filter (which refuses a picture over the limit at upload).
        const rec = await saveFile(k, await jpeg(200, 200), 'big.jpg', '1', 'default')
        const res = await k.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${rec.id}?w=50`))
        expect(res.status).toBe(200)
        expect(await size(res)).toEqual([200, 200, 'jpeg'])
        expect(k.storage.resizer.generated).toBe(0)
      } finally {
        await k.cleanup()
      }
    })
  })

  describe('ZIP', () => {
    let ids: number[] = []
    let priv: any
    let dir: string
    beforeAll(async () => {
      dir = await mkdtemp(join(tmpdir(), 'attach-zip-'))
      ids = [
        (await saveFile(kit, new Blob(['one '.repeat(1000)]), '보고서.txt', '800')).id,
        (await saveFile(kit, new Blob(['two']), '보고서.txt', '800')).id,
        (await saveFile(kit, new Blob(['three']), '보고서.txt', '800')).id,
        (await saveFile(kit, await jpeg(20, 20), 'photo.jpg', '800', 'image')).id,
      ]
      priv = await saveFile(kit, new Blob(['secret']), 'secret.txt', '800', 'private')
    })
    afterAll(async () => {
      await rm(dir, { recursive: true, force: true })
    })
    const zip = (body: unknown, query = '') =>
      kit.handler.fetch(
        new Request(`http://x${ASSETS}/attach/download${query}`, {
          method: 'POST',
          headers: { 'content-type': 'application/json' },
          body: typeof body === 'string' ? body : JSON.stringify(body),
        }),
      )
    const inspect = async (res: Response) => {
      const file = join(dir, `${Math.random()}.zip`)
      await writeFile(file, Buffer.from(await res.arrayBuffer()))
      const script = `
import json, sys, zipfile
z = zipfile.ZipFile(sys.argv[1])
bad = z.testzip()
print(json.dumps({"bad": bad, "entries": [{"name": i.filename, "utf8": bool(i.flag_bits & 0x800), "method": i.compress_type, "size": i.file_size, "data": z.read(i).decode("utf-8", "replace")[:20]} for i in z.infolist()]}))
`
      return JSON.parse(execFileSync('python3', ['-c', script, file]).toString())
    }

    it('streams a valid archive with UTF-8 names, unique names, stored images and deflated text', async () => {
      const res = await zip({ title: '자료 모음', ids: [...ids, priv.id] })
      expect(res.status).toBe(200)
      expect(res.headers.get('content-type')).toBe('application/zip')
      expect(res.headers.get('content-disposition')).toContain(`filename*=UTF-8''${encodeURIComponent('자료 모음.zip')}`)
      const z = await inspect(res)
      expect(z.bad).toBeNull()
      // The private file is skipped (no token); duplicate names get _1, _2.
      expect(z.entries.map((e: any) => [e.name, e.utf8])).toEqual([
        ['보고서.txt', true],
        ['보고서_1.txt', true],
        ['보고서_2.txt', true],
        ['photo.jpg', true],
      ])
      expect(z.entries[0].method).toBe(8)
      expect(z.entries[3].method).toBe(0)
      expect(z.entries[1].data).toBe('two')
      expect(z.entries[0].size).toBe(4000)
    })
    it('names the archive {domain}_{category}_{yyyyMMddHHmmss}.zip without a title, keeps a given .zip', async () => {
      let res = await zip({ ids: [ids[1]] })
      expect(res.headers.get('content-disposition')).toMatch(/filename="demo_default_\d{14}\.zip"/)
      await res.arrayBuffer()
      res = await zip({ title: 'files.ZIP', ids: [ids[1]] })
      expect(res.headers.get('content-disposition')).toMatch(/filename="files\.ZIP"/)
      await res.arrayBuffer()
    })
    it('includes files the caller may access, skips missing ids, 404 when every file fails', async () => {
      const res = await zip({ ids: [priv.id, 99999999] }, `?access_token=${await token('7')}`)
      expect(res.status).toBe(200)
      expect((await inspect(res)).entries.map((e: any) => e.name)).toEqual(['secret.txt'])
      const none = await zip({ ids: [priv.id, 99999999] })
      expect(none.status).toBe(404)
      expect((await none.json()).code).toBe('not-found')
    })
    it('refuses bad ZIP requests with 400', async () => {
      const many = Array.from({ length: 501 }, (_, i) => i + 1)
      for (const body of [
        {},
        { ids: [] },
        { ids: ['1'] },
        { ids: [1.5] },
        { ids: [-1] },
        { ids: many },
        { ids: [1], title: 5 },
        '{',
        '[1,2]',
      ]) {
        const res = await zip(body)
        expect(res.status, JSON.stringify(body)).toBe(400)
        expect((await res.json()).code).toBe('bad-request')
      }
    })
  })

  describe('editor uploads', () => {
    const editor = async (kind: 'dnd' | 'modal', blob: Blob, name: string, query = '', user: string | null = '7') => {
      const fd = new FormData()
      fd.set('upload', blob, name)
      const headers: Record<string, string> = user ? { authorization: `Bearer ${await token(user)}` } : {}
      return kit.handler.fetch(new Request(`http://x${API}/ckupload/${kind}${query}`, { method: 'POST', body: fd, headers }))
    }
    it('dnd answers {uploaded: 1, fileName, url} and the url serves the image', async () => {
      const res = await editor('dnd', await jpeg(30, 20), '그림.jpg')
      const body = await res.json()
      expect(body).toEqual({
        uploaded: 1,
        fileName: '그림.jpg',
        url: expect.stringMatching(new RegExp(`^${ASSETS}/editor/image/default/\\d{4}/\\d{2}/[0-9a-f-]+\\.jpg$`)),
      })
      const img = await kit.handler.fetch(new Request(`http://x${body.url}`))
      expect(img.status).toBe(200)
      expect(img.headers.get('content-type')).toBe('image/jpeg')
    })
    it('dnd refuses a non-image through the filter chain: {uploaded: 0, error}', async () => {
      const res = await editor('dnd', new Blob(['<script>alert(1)</script>']), 'x.html')
      expect(res.status).toBe(200)
      expect(await res.json()).toEqual({ uploaded: 0, error: { message: expect.any(String) } })
    })
    it('modal answers the callback HTML with every value escaped', async () => {
      const res = await editor('modal', new Blob(['no']), '</script><script>alert(1)</script>.txt', '?CKEditorFuncNum=12')
      expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8')
      const html = await res.text()
      expect(html).toMatch(
        /^<!DOCTYPE html><html><body><script>window\.parent\.CKEDITOR\.tools\.callFunction\(12, "", ".*"\);<\/script><\/body><\/html>$/,
      )
      expect(html.match(/<script>/g)).toHaveLength(1)
      const inner = html.slice(html.indexOf('<script>') + 8, html.lastIndexOf('</script>'))
      expect(inner).not.toMatch(/[<>]/)
      expect(inner).toContain('\\u003e')
      const ok = await editor('modal', await jpeg(10, 10), 'ok.jpg', '?CKEditorFuncNum=3')
      expect(await ok.text()).toMatch(/callFunction\(3, "\/assets\/storage\/editor\/image\/default\/\d{4}\/\d{2}\/[0-9a-f-]+\.jpg", ""\)/)
    })
    it('modal refuses a CKEditorFuncNum that is not digits (400), leaving nothing', async () => {
      const before = await kit.files(kit.tmpDir)
      for (const q of ['?CKEditorFuncNum=1);alert(1', '?CKEditorFuncNum=abc', '']) {
        const res = await editor('modal', await jpeg(10, 10), 'a.jpg', q)
        expect(res.status, q).toBe(400)
        expect((await res.json()).code).toBe('bad-request')
      }
      expect(await kit.files(kit.tmpDir)).toEqual(before)
    })
    it('requires authentication and refuses traversal on the image route', async () => {
      expect((await editor('dnd', await jpeg(10, 10), 'a.jpg', '', null)).status).toBe(401)
      for (const p of [
        '/editor/image/default/2026/01/..%2F..%2Fetc%2Fpasswd',
        '/editor/image/../../etc/passwd',
        '/editor/image/default/x/y/z.jpg',
        '/editor/image/default/2026/01',
      ]) {
        const res = await get(p)
        expect([400, 404], p).toContain(res.status)
      }
    })
  })

  describe('events', () => {
    it('calls uploaded, saved and deleted once the fact is durable', async () => {
      events = []
      const rec = await saveFile(kit, new Blob(['evented']), 'e.txt', '900')
      await kit.storage.drainEvents()
      expect(events.map(([e]) => e)).toEqual(['uploaded', 'saved'])
      expect(events[0]![1]).toMatchObject({ kind: 'temporary', refDomain: 'demo', displayName: 'e.txt', size: 7 })
      expect(events[1]![1].records.map((r: any) => r.id)).toEqual([rec.id])
      await kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id: rec.id }]) })
      await kit.storage.drainEvents()
      expect(events[2]![0]).toBe('deleted')
      expect(events[2]![1].records[0].id).toBe(rec.id)
    })
    it('reports a throwing hook and never corrupts the save', async () => {
      const off = kit.storage.on('saved', () => {
        throw new Error('scanner down')
      })
      const before = kit.warnings.length
      const rec = await saveFile(kit, new Blob(['still saved']), 's.txt', '901')
      await kit.storage.drainEvents()
      off()
      expect(kit.warnings.slice(before).some((w) => w.includes('"saved" hook failed'))).toBe(true)
      expect(await (await get(`/attach/view/${rec.id}`)).text()).toBe('still saved')
    })
  })
})
