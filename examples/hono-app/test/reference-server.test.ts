/**
 * The reference server of the contract, through a real listening HTTP server, on SQLite and PostgreSQL.
 */
import { spawn } from 'node:child_process'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { pgDatabase, sign, start, walk, type Running } from './helpers.js'

const here = dirname(fileURLToPath(import.meta.url))

for (const dialect of ['sqlite', 'postgres'] as const) {
  describe(`reference server on ${dialect}`, () => {
    let srv: Running
    let drop: (() => Promise<void>) | undefined
    let alice: string
    let bob: string
    beforeAll(async () => {
      const env: Record<string, string> = { ATTACH_CORS_ORIGINS: 'https://app.example.com' }
      if (dialect === 'postgres') {
        const d = await pgDatabase()
        env.ATTACH_DATABASE_URL = d.url
        drop = d.drop
      }
      srv = await start(env)
      alice = await sign('1')
      bob = await sign('2')
    })
    afterAll(async () => {
      await srv?.close()
      await drop?.()
    })

    const api = (path: string, init: RequestInit & { token?: string | null } = {}) => {
      const { token, ...rest } = init
      const headers = new Headers(rest.headers)
      if (token !== null) headers.set('authorization', `Bearer ${token ?? alice}`)
      if (typeof rest.body === 'string') headers.set('content-type', 'application/json')
      return fetch(srv.base + path, { ...rest, headers })
    }
    const tmpUpload = async (blob: Blob, name: string, refDomain = 'board', refCategory = 'default', token?: string) => {
      const fd = new FormData()
      fd.set('refDomain', refDomain)
      fd.set('refCategory', refCategory)
      fd.set('file', blob, name)
      const res = await api('/api/storage/attach/tmp', { method: 'POST', body: fd, token })
      expect(res.status).toBe(200)
      return (await res.json()).files[0]
    }

    it('saves a board post and its attachments in one request, then answers it with its AttachBag', async () => {
      const photo = await sharp({ create: { width: 40, height: 30, channels: 3, background: '#08f' } })
        .jpeg()
        .toBuffer()
      const img = await tmpUpload(new Blob([new Uint8Array(photo)]), '사진.jpg', 'board', 'image')
      const doc = await tmpUpload(new Blob(['minutes of the meeting']), 'minutes.txt')
      const res = await api('/board', {
        method: 'POST',
        body: JSON.stringify({
          title: 'First post',
          body: 'hello',
          attachContainer: {
            refDomain: 'board',
            default: [{ savedName: doc.name, displayName: 'minutes.txt', fileSize: doc.size, fileType: doc.type }],
            image: [{ savedName: img.name, displayName: '사진.jpg' }],
          },
        }),
      })
      expect(res.status).toBe(201)
      const post = await res.json()
      expect(post).toMatchObject({ id: expect.any(Number), title: 'First post', createdBy: 1, createdDt: expect.stringMatching(/Z$/) })
      expect(post.attachContainer.default[0]).toMatchObject({ displayName: 'minutes.txt', refKey: String(post.id), sort: 0 })
      const got = await (await api(`/board/${post.id}`)).json()
      expect(got.attachContainer.image[0]).toMatchObject({ fileType: 'image/jpeg', displayName: '사진.jpg' })
      const month = post.createdDt.slice(0, 7).replace('-', '/')
      expect(got.attachContainer.image[0].savedDir).toBe(`/board/${month}/${post.id}/`)
      // Every url answered works, without authentication (the binary group).
      const view = await fetch(srv.base + got.attachContainer.image[0].url)
      expect(view.status).toBe(200)
      expect(view.headers.get('content-type')).toBe('image/jpeg')
      expect(Buffer.from(await view.arrayBuffer()).equals(photo)).toBe(true)
      const dl = await fetch(srv.base + got.attachContainer.default[0].url.replace('/view/', '/download/'))
      expect(dl.headers.get('content-disposition')).toMatch(/^attachment; filename="minutes.txt"/)
      expect(await dl.text()).toBe('minutes of the meeting')
    })

    it('makes the board image thumbnail in the background (pg-boss on PostgreSQL) and serves it with ?variant=thumb', async () => {
      const photo = await sharp({ create: { width: 800, height: 600, channels: 3, background: '#f80' } })
        .png()
        .toBuffer()
      const img = await tmpUpload(new Blob([new Uint8Array(photo)]), 'wide.png', 'board', 'image')
      const res = await api('/board', {
        method: 'POST',
        body: JSON.stringify({
          title: 'Thumb',
          attachContainer: { refDomain: 'board', image: [{ savedName: img.name, displayName: 'wide.png' }] },
        }),
      })
      expect(res.status).toBe(201)
      const post = await res.json()
      let item: { id: number; variants?: Record<string, string> } | undefined
      for (const end = Date.now() + 60_000; Date.now() < end; await new Promise((r) => setTimeout(r, 200))) {
        item = (await (await api(`/api/storage/attach/board/${post.id}/image`)).json()).image[0]
        if (item?.variants?.thumb) break
      }
      expect(item?.variants?.thumb).toBe(`/assets/storage/attach/view/${item!.id}?variant=thumb`)
      const thumb = await fetch(srv.base + item!.variants!.thumb)
      expect(thumb.status).toBe(200)
      expect(thumb.headers.get('content-type')).toBe('image/webp')
      const meta = await sharp(Buffer.from(await thumb.arrayBuffer())).metadata()
      expect([meta.format, meta.width, meta.height]).toEqual(['webp', 320, 240])
      const unknown = await fetch(`${srv.base}/assets/storage/attach/view/${item!.id}?variant=huge`)
      expect(unknown.status).toBe(400)
      expect((await unknown.json()).code).toBe('unknown-variant')
    })

    it('a board save whose commit fails creates no post, and its temporary files can be committed by a later request', async () => {
      const count = async () => ((await (await api('/board')).json()) as unknown[]).length
      const before = await count()
      const kept = await tmpUpload(new Blob(['kept for the retry']), 'kept.txt')
      const res = await api('/board', {
        method: 'POST',
        body: JSON.stringify({
          title: 'Second',
          attachContainer: {
            refDomain: 'board',
            default: [
              { savedName: kept.name, displayName: 'kept.txt' },
              { savedName: 'gone.txt', displayName: 'gone.txt' },
            ],
          },
        }),
      })
      expect(res.status).toBe(500)
      const body = await res.json()
      expect(body).toMatchObject({
        code: 'attach-save-failure',
        failureCount: 1,
        failures: [{ refCategory: 'default', index: 1, displayName: 'gone.txt' }],
      })
      expect(body.id).toBeUndefined()
      expect(await count()).toBe(before)
      // The same temporary file, committed by the next request.
      const retry = await api('/board', {
        method: 'POST',
        body: JSON.stringify({ title: 'Second', attachContainer: { refDomain: 'board', default: [{ savedName: kept.name }] } }),
      })
      expect(retry.status).toBe(201)
      const post = await retry.json()
      expect(post.attachContainer.default.map((r: { savedName: string }) => r.savedName)).toEqual([kept.name])
      expect(await count()).toBe(before + 1)
      // A failed PUT changes neither the post nor its attachments.
      const put = await api(`/board/${post.id}`, {
        method: 'PUT',
        body: JSON.stringify({ title: 'Changed', attachContainer: { default: [{ savedName: 'gone.txt' }] } }),
      })
      expect(put.status).toBe(500)
      const got = await (await api(`/board/${post.id}`)).json()
      expect(got.title).toBe('Second')
      expect(got.attachContainer.default).toHaveLength(1)
    })

    it('refuses bad board input with 4xx JSON bodies', async () => {
      const cases: Array<[RequestInit & { token?: string | null }, string, number, string]> = [
        [{ method: 'POST', body: '{}', token: null }, '/board', 401, 'unauthorized'],
        [{ method: 'POST', body: '{"title":' }, '/board', 400, 'bad-request'],
        [{ method: 'POST', body: JSON.stringify({ title: '' }) }, '/board', 400, 'bad-request'],
        [{ method: 'POST', body: JSON.stringify({ title: 'x', attachContainer: { refDomain: 'demo' } }) }, '/board', 400, 'bad-request'],
        [
          { method: 'POST', body: JSON.stringify({ title: 'x', attachContainer: { refDomain: 'board', nope: [] } }) },
          '/board',
          400,
          'unknown-category',
        ],
        [{}, '/board/abc', 400, 'bad-request'],
        [{}, '/board/999999', 404, 'not-found'],
        [{ token: null }, '/board/1', 401, 'unauthorized'],
        [{}, '/nowhere', 404, 'not-found'],
      ]
      for (const [init, path, status, code] of cases) {
        const res = await api(path, init)
        expect(res.status, `${init.method ?? 'GET'} ${path} ${String(init.body)}`).toBe(status)
        expect((await res.json()).code).toBe(code)
      }
    })

    it('lists board posts by the list and pagination convention', async () => {
      for (let i = 0; i < 5; i++) {
        const res = await api('/board', { method: 'POST', body: JSON.stringify({ title: `list post ${i}` }) })
        expect(res.status).toBe(201)
      }
      // No paging: every row, no paging headers, newest first (fallback id desc).
      let res = await api('/board')
      let rows = await res.json()
      expect(res.headers.get('x-app-total-count')).toBeNull()
      expect(rows.map((r: any) => r.id)).toEqual([...rows.map((r: any) => r.id)].sort((a: number, b: number) => b - a))
      const total = rows.length
      // Page 2 of 2 per page: headers and the running positionIdx across pages.
      res = await api('/board?_usePaging=true&currentPage=2&dataPerPage=2')
      rows = await res.json()
      expect(res.headers.get('x-app-total-count')).toBe(String(total))
      expect(res.headers.get('x-app-page')).toBe('2')
      expect(res.headers.get('x-app-data-count')).toBe('2')
      expect(rows.map((r: any) => r.positionIdx)).toEqual([3, 4])
      res = await api('/board?_usePaging=true&skipCount=true&dataPerPage=2')
      expect(res.headers.get('x-app-total-count')).toBeNull()
      // q on the whitelist; an unknown field or op is dropped, never an error.
      const q = encodeURIComponent(
        JSON.stringify({
          conds: [
            { field: 'title', op: 'like', val: 'list post' },
            { field: 'body', op: 'eq', val: 'x' },
            { field: 'id', op: 'like', val: 1 },
          ],
        }),
      )
      rows = await (await api(`/board?q=${q}&sortBy=title:asc,nope:desc`)).json()
      expect(rows.map((r: any) => r.title)).toEqual(['list post 0', 'list post 1', 'list post 2', 'list post 3', 'list post 4'])
      // Bad input: 400 with a JSON body.
      for (const bad of ['q=%7Bnot', `q=${encodeURIComponent('{"conds":5}')}`, 'currentPage=0', 'currentPage=abc', 'dataPerPage=-1']) {
        res = await api(`/board?_usePaging=true&${bad}`)
        expect(res.status, bad).toBe(400)
        expect((await res.json()).code).toBe('bad-request')
      }
      expect((await api('/board', { token: null })).status).toBe(401)
      // SQL-looking text is bound or dropped, never run.
      const evil = encodeURIComponent(
        JSON.stringify({
          conds: [
            { field: 'title; DROP TABLE board; --', op: 'eq', val: 1 },
            { field: 'title', op: 'eq', val: "' OR 1=1 --" },
          ],
        }),
      )
      expect(await (await api(`/board?q=${evil}&sortBy=${encodeURIComponent('id; DROP TABLE board')}:asc`)).json()).toEqual([])
      expect((await (await api('/board')).json()).length).toBe(total)
    })

    it('pages the conditional attachment list and keeps each url index within its reference', async () => {
      for (const key of ['31', '32']) {
        const bag: Record<string, unknown[]> = { default: [] }
        for (const n of ['a', 'b', 'c']) {
          const t = await tmpUpload(new Blob([n]), `${key}-${n}.txt`, 'demo')
          bag.default!.push({ savedName: t.name, displayName: `${key}-${n}.txt` })
        }
        expect((await api(`/api/storage/attach/demo/${key}`, { method: 'POST', body: JSON.stringify(bag) })).status).toBe(200)
      }
      const res = await api(
        '/api/storage/attach?refDomain=demo&refKeyList=32,31&refCategoryList=default&_usePaging=true&currentPage=2&dataPerPage=2',
      )
      expect(res.headers.get('x-app-total-count')).toBe('6')
      const rows = await res.json()
      expect(rows.map((r: any) => [r.refKey, r.displayName, r.url])).toEqual([
        ['31', '31-c.txt', '/assets/storage/attach/view/demo/31/default/2'],
        ['32', '32-a.txt', '/assets/storage/attach/view/demo/32/default/0'],
      ])
      expect(await (await fetch(srv.base + rows[0].url)).text()).toBe('c')
    })

    it('guards the private category with the token in the header or access_token, and the creator', async () => {
      const t = await tmpUpload(new Blob(['private bytes']), 'p.txt', 'demo', 'private')
      // Temporary preview: only the uploader's token (header or access_token).
      const tmpUrl = `/assets/storage/attach-temp/view/demo/private/${t.name}`
      expect((await fetch(srv.base + tmpUrl)).status).toBe(403)
      expect((await fetch(`${srv.base}${tmpUrl}?access_token=${bob}`)).status).toBe(403)
      expect((await fetch(`${srv.base}${tmpUrl}?access_token=${alice}`)).status).toBe(200)
      const saved = await api('/api/storage/attach/demo/77', { method: 'POST', body: JSON.stringify({ private: [{ savedName: t.name }] }) })
      const rec = (await saved.json()).attachList[0]
      const url = `${srv.base}/assets/storage/attach/view/${rec.id}`
      const denied = await fetch(url)
      expect(denied.status).toBe(403)
      expect(await denied.json()).toMatchObject({ code: 'forbidden' })
      expect((await fetch(`${url}?access_token=${bob}`)).status).toBe(403)
      expect((await fetch(url, { headers: { authorization: `Bearer ${bob}` } })).status).toBe(403)
      const ok = await fetch(`${url}?access_token=${alice}`)
      expect(ok.status).toBe(200)
      expect(await ok.text()).toBe('private bytes')
      expect((await fetch(url, { headers: { authorization: `Bearer ${alice}` } })).status).toBe(200)
    })

    it('answers CORS preflights without authentication for the configured origin', async () => {
      const res = await fetch(`${srv.base}/api/storage/attach/tmp`, {
        method: 'OPTIONS',
        headers: {
          origin: 'https://app.example.com',
          'access-control-request-method': 'POST',
          'access-control-request-headers': 'authorization,content-type',
        },
      })
      expect(res.status).toBeLessThan(300)
      expect(res.headers.get('access-control-allow-origin')).toBe('https://app.example.com')
      expect(res.headers.get('access-control-allow-headers')?.toLowerCase()).toContain('authorization')
      expect(res.headers.get('access-control-allow-methods')).toContain('PUT')
      const other = await fetch(`${srv.base}/api/storage/config`, {
        headers: { origin: 'https://evil.example.com', authorization: `Bearer ${alice}` },
      })
      expect(other.headers.get('access-control-allow-origin')).toBeNull()
    })

    it('streams a large upload over a real connection', async () => {
      const size = 48 * 1024 * 1024
      const chunk = new Uint8Array(1024 * 1024).map((_, i) => i % 251)
      const parts = Array.from({ length: size / chunk.length }, () => chunk)
      const item = await tmpUpload(new Blob(parts), 'big.bin', 'demo')
      expect(item.size).toBe(size)
      const view = await fetch(`${srv.base}/assets/storage/attach-temp/view/demo/default/${item.name}`)
      expect(view.headers.get('content-length')).toBe(String(size))
      let got = 0
      for await (const c of view.body as any) got += c.length
      expect(got).toBe(size)
    })
  })
}

describe('limits and start-up through the real server', () => {
  it('cuts an upload over ATTACH_MAX_FILE_SIZE off with 413 and leaves nothing in tmp/', async () => {
    const srv = await start({ ATTACH_MAX_FILE_SIZE: String(1024 * 1024) })
    try {
      const fd = new FormData()
      fd.set('refDomain', 'demo')
      fd.set('file', new Blob([new Uint8Array(3 * 1024 * 1024)]), 'big.bin')
      const res = await fetch(`${srv.base}/api/storage/attach/tmp`, {
        method: 'POST',
        body: fd,
        headers: { authorization: `Bearer ${await sign('1')}` },
      })
      expect(res.status).toBe(413)
      expect(await res.json()).toMatchObject({ code: 'too-large' })
      expect(await walk(join(srv.dataDir, 'tmp'))).toEqual([])
      expect(await walk(join(srv.dataDir, 'files'))).toEqual([])
    } finally {
      await srv.close()
    }
  })

  it('npm start: prints the listening line, serves, and stops cleanly', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'attach-start-'))
    const child = spawn(process.execPath, ['--conditions=@attach-storage/source', '--import', 'tsx', 'src/server.ts'], {
      cwd: join(here, '..'),
      env: { ...process.env, PORT: '0', ATTACH_DATA_DIR: dataDir },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    try {
      const line = await new Promise<string>((resolve, reject) => {
        let out = ''
        child.stdout.on('data', (d) => {
          out += d
          const m = /listening on http:\/\/127\.0\.0\.1:(\d+)/.exec(out)
          if (m) resolve(m[0])
        })
        child.on('exit', (code) => reject(new Error(`exited ${code}: ${out}`)))
        setTimeout(() => reject(new Error(`no listening line: ${out}`)), 30_000)
      })
      const port = /:(\d+)$/.exec(line)![1]
      const res = await fetch(`http://127.0.0.1:${port}/api/storage/config`)
      expect(res.status).toBe(401)
    } finally {
      child.kill('SIGTERM')
      await new Promise((r) => child.once('exit', r))
      await rm(dataDir, { recursive: true, force: true })
    }
  })

  /** Starts the server with ATTACH_CONFIG holding `yaml`; answers its exit code and stderr once it exits. */
  const startWithConfig = async (yaml: string): Promise<{ code: unknown; err: string }> => {
    const dataDir = await mkdtemp(join(tmpdir(), 'attach-config-'))
    const cfg = join(dataDir, 'attach.yaml')
    await writeFile(cfg, yaml)
    const child = spawn(process.execPath, ['--conditions=@attach-storage/source', '--import', 'tsx', 'src/server.ts'], {
      cwd: join(here, '..'),
      env: { ...process.env, PORT: '0', ATTACH_DATA_DIR: dataDir, ATTACH_CONFIG: cfg },
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let err = ''
    child.stderr.on('data', (d) => (err += d))
    const code = await new Promise((r) => child.once('exit', r))
    await rm(dataDir, { recursive: true, force: true })
    return { code, err }
  }

  it('refuses to start on a bad ATTACH_CONFIG, naming the problem', async () => {
    const { code, err } = await startWithConfig('attach:\n  default-store: nas\n  stores:\n    disk:\n      type: local\n')
    expect(code).toBe(1)
    expect(err).toMatch(/names store "nas", which is not declared; declared stores: disk/)
  })

  it('refuses to start on a mistyped setting in ATTACH_CONFIG: exit 1 and one line naming it', async () => {
    const { code, err } = await startWithConfig('attach:\n  tmp-tll: 1h\n')
    expect(code).toBe(1)
    expect(err.trim().split('\n')).toEqual([
      'attach-storage reference server failed to start: unknown setting attach.tmp-tll; did you mean tmp-ttl?',
    ])
  })
})
