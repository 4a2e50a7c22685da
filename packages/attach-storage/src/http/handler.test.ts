import { createHash } from 'node:crypto'
import { readFile, stat, utimes } from 'node:fs/promises'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS } from '../../../../test/databases.js'
import { createAttachStorage } from '../service/attach-storage.js'
import { makeKit, png, token, type Kit } from '../testing/handler-kit.js'

const API = '/api/storage'
const ASSETS = '/assets/storage'
const text = (s: string, type = 'text/plain') => new Blob([s], { type })

async function tmpUpload(kit: Kit, blob: Blob, name: string, extra: Array<[string, string]> = [], user?: string) {
  const res = await kit.upload(`${API}/attach/tmp`, [['refDomain', 'demo'], ...extra, ['file', blob, name]], user)
  expect(res.status).toBe(200)
  const body = (await res.json()) as { files: Array<Record<string, any>> }
  return body.files[0]!
}

async function save(kit: Kit, refKey: string, bag: unknown, user?: string) {
  return kit.call(`${API}/attach/demo/${refKey}`, { method: 'POST', body: JSON.stringify(bag), user })
}

for (const dialect of DIALECTS) {
  describe(`JSON and binary groups on ${dialect}`, () => {
    let kit: Kit
    beforeAll(async () => {
      kit = await makeKit(dialect)
    })
    afterAll(async () => {
      await kit?.cleanup()
    })

    describe('authentication', () => {
      const routes: Array<[string, string]> = [
        ['GET', '/config'],
        ['POST', '/attach/tmp'],
        ['POST', '/attach/direct'],
        ['POST', '/attach/demo/1'],
        ['GET', '/attach/demo/1'],
        ['GET', '/attach/demo/1/default/_count'],
        ['GET', '/attach?refDomain=demo&refKeyList=1'],
        ['PUT', '/attach/'],
        ['POST', '/attach'],
        ['POST', '/direct-url'],
      ]
      it('answers 401 with a JSON body on every JSON route without a token', async () => {
        for (const [method, path] of routes) {
          const res = await kit.call(API + path, { method, user: null })
          expect(res.status, `${method} ${path}`).toBe(401)
          expect(await res.json()).toMatchObject({ code: 'unauthorized', message: expect.any(String) })
        }
      })
      it('answers 401 to malformed, expired and wrongly signed tokens', async () => {
        const bad = [
          'Bearer not-a-jwt',
          'Bearer a.b.c',
          `Bearer ${await token('7', { exp: Math.floor(Date.now() / 1000) - 3600 })}`,
          `Bearer ${await token('7', { secret: 'another-secret-of-16-bytes!' })}`,
          `Basic ${Buffer.from('u:p').toString('base64')}`,
          await token('7'), // no "Bearer"
        ]
        for (const authorization of bad) {
          const res = await kit.call(`${API}/config`, { user: null, headers: { authorization } })
          expect(res.status, authorization).toBe(401)
          expect((await res.json()).code).toBe('unauthorized')
        }
      })
      it('accepts a valid token', async () => {
        const res = await kit.call(`${API}/config`)
        expect(res.status).toBe(200)
        expect(await res.json()).toEqual({
          cdnUrl: null,
          domains: {
            demo: { store: 'local', categories: ['default', 'image', 'private', 'throws'] },
            board: { store: 'local', categories: ['default', 'image'] },
            editor: { store: 'local', categories: ['default'] },
          },
        })
      })
    })

    describe('temporary upload', () => {
      it('keeps the file in the temporary area and answers the result item, type from content', async () => {
        // The client claims a PNG; the bytes are text.
        const item = await tmpUpload(kit, text('hello world', 'image/png'), 'hello.png')
        expect(item).toEqual({
          name: expect.stringMatching(/^[0-9a-f-]{36}\.png$/),
          displayName: 'hello.png',
          size: 11,
          type: 'text/plain',
          url: null,
          thumbnailUrl: null,
          deleteUrl: null,
          deleteType: 'DELETE',
        })
        expect(await kit.files(kit.tmpDir)).toContain(`_tmp/${item.name}`)
        expect(await kit.files()).toEqual([])
      })
      it('takes several files as repeated fileMap parts, under resultKey', async () => {
        const res = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['resultKey', 'uploaded'],
          ['useTempFileExtension', 'false'],
          ['fileMap', text('a'), 'a.txt'],
          ['fileMap', text('bb'), 'b.csv'],
        ])
        expect(res.status).toBe(200)
        const body = await res.json()
        expect(Object.keys(body)).toEqual(['uploaded'])
        expect(body.uploaded.map((f: any) => [f.displayName, f.size])).toEqual([
          ['a.txt', 1],
          ['b.csv', 2],
        ])
        expect(body.uploaded[1].name).toMatch(/\.csv$/)
        expect(body.uploaded[1].type).toBe('text/csv')
      })
      it('rejects a file over the size filter with error code size (200), and removes it', async () => {
        const before = await kit.files(kit.tmpDir)
        const res = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['filters', JSON.stringify({ size: { maxSize: '10KB' } })],
          ['fileMap', new Blob([new Uint8Array(20 * 1024)]), 'big.bin'],
          ['fileMap', new Blob([new Uint8Array(5 * 1024)]), 'small.bin'],
        ])
        expect(res.status).toBe(200)
        const { files } = await res.json()
        expect(files[0]).toEqual({ displayName: 'big.bin', size: 20480, error: { code: 'size', message: expect.any(String) } })
        expect(files[1].name).toBeDefined()
        const after = await kit.files(kit.tmpDir)
        expect(after.length - before.length).toBe(2) // the accepted file and its metadata only
      })
      it('reads a bare maxSize as megabytes', async () => {
        const res = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['filters', JSON.stringify({ size: { maxSize: 1 } })],
          ['file', new Blob([new Uint8Array(1024 * 1024 + 1)]), 'a.bin'],
        ])
        expect((await res.json()).files[0].error.code).toBe('size')
      })
      it('applies the dimension filter to images and lets non-images pass', async () => {
        const res = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['filters', JSON.stringify({ dimension: { maxWidth: 10, minHeight: 2 } })],
          ['fileMap', await png(20, 5), 'wide.png'],
          ['fileMap', await png(8, 5), 'ok.png'],
          ['fileMap', text('not an image'), 'n.txt'],
        ])
        const { files } = await res.json()
        expect(files[0].error.code).toBe('dimension')
        expect(files[1].type).toBe('image/png')
        expect(files[2].type).toBe('text/plain')
      })
      it('ignores an unregistered filter key with a logged warning', async () => {
        const res = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['filters', JSON.stringify({ virusScan: { strict: true } })],
          ['file', text('x'), 'x.txt'],
        ])
        expect((await res.json()).files[0].name).toBeDefined()
        expect(kit.warnings.some((w) => w.includes('virusScan'))).toBe(true)
      })
      it('judges the image category by content, not by name (error code type)', async () => {
        const res = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['refCategory', 'image'],
          ['fileMap', text('<svg xmlns="http://www.w3.org/2000/svg"></svg>', 'image/svg+xml'), 'x.svg'],
          ['fileMap', text('just text'), 'fake.png'],
          ['fileMap', await png(), 'real.dat'],
          // A GIF signature with nothing behind it is no image.
          ['fileMap', text('GIF89a but not really'), 'fake.gif'],
        ])
        const { files } = await res.json()
        expect(files[0].error.code).toBe('type')
        expect(files[1].error.code).toBe('type')
        expect(files[2].type).toBe('image/png')
        expect(files[3].error).toEqual({ code: 'type', message: expect.stringContaining('not an image') })
      })
      it('answers 400 no-file without a file, leaving nothing', async () => {
        const before = await kit.files(kit.tmpDir)
        for (const parts of [
          [['refDomain', 'demo']],
          [
            ['refDomain', 'demo'],
            ['other', text('x'), 'x.txt'],
          ],
        ] as any) {
          const res = await kit.upload(`${API}/attach/tmp`, parts)
          expect(res.status).toBe(400)
          expect(await res.json()).toMatchObject({ code: 'no-file' })
        }
        const res = await kit.call(`${API}/attach/tmp`, { method: 'POST', body: '{}' })
        expect(res.status).toBe(400)
        expect((await res.json()).code).toBe('no-file')
        expect(await kit.files(kit.tmpDir)).toEqual(before)
      })
      it('answers 400 unknown-domain / unknown-category, never creating them, leaving nothing', async () => {
        const before = await kit.files(kit.tmpDir)
        let res = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'nope'],
          ['file', text('x'), 'x.txt'],
        ])
        expect(res.status).toBe(400)
        expect(await res.json()).toMatchObject({ code: 'unknown-domain' })
        res = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['refCategory', 'nope'],
          ['file', text('x'), 'x.txt'],
        ])
        expect(res.status).toBe(400)
        expect(await res.json()).toMatchObject({ code: 'unknown-category' })
        res = await kit.upload(`${API}/attach/tmp`, [['file', text('x'), 'x.txt']])
        expect(res.status).toBe(400)
        expect(await kit.files(kit.tmpDir)).toEqual(before)
        expect(Object.keys((await (await kit.call(`${API}/config`)).json()).domains)).toEqual(['demo', 'board', 'editor'])
      })
      it('answers 400 to filters that are not a JSON object', async () => {
        for (const f of ['{not json', '[1,2]', '"size"', JSON.stringify({ size: 5 })]) {
          const res = await kit.upload(`${API}/attach/tmp`, [
            ['refDomain', 'demo'],
            ['filters', f],
            ['file', text('x'), 'x.txt'],
          ])
          expect(res.status, f).toBe(400)
          expect((await res.json()).code).toBe('bad-request')
        }
      })
      it('strips paths from client file names', async () => {
        const item = await tmpUpload(kit, text('x'), '../../etc/passwd')
        expect(item.displayName).toBe('passwd')
        expect(item.name).toMatch(/^[0-9a-f-]{36}$/)
      })
    })

    describe('confirmed save', () => {
      it('moves files to {base}/{domain}/{yyyy}/{MM}/{refKey}/, sort = array index, values from the bytes', async () => {
        const a = await tmpUpload(kit, text('first file'), 'a.txt')
        const b = await tmpUpload(kit, await png(), '사진.png')
        const res = await save(kit, '100', {
          refDomain: 'demo',
          default: [
            { savedName: a.name, displayName: 'a.txt', fileSize: 999999, fileType: 'application/evil', ext: 'note' },
            { savedName: b.name, displayName: '사진.png', fileSize: 1, fileType: 'text/html' },
          ],
        })
        expect(res.status).toBe(200)
        const body = await res.json()
        expect(body.success).toBe(true)
        const [ra, rb] = body.attachList
        const now = new Date()
        const yyyy = String(now.getUTCFullYear())
        const MM = String(now.getUTCMonth() + 1).padStart(2, '0')
        expect(ra).toMatchObject({
          refDomain: 'demo',
          refKey: '100',
          refCategory: 'default',
          displayName: 'a.txt',
          savedName: a.name,
          savedDir: `/demo/${yyyy}/${MM}/100/`,
          fileType: 'text/plain',
          fileSize: 10,
          ext: 'note',
          sort: 0,
          createdBy: 7,
          url: `${ASSETS}/attach/view/demo/100/default/0`,
        })
        expect(ra.createdDt).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/)
        expect(rb).toMatchObject({
          sort: 1,
          fileType: 'image/png',
          displayName: '사진.png',
          url: `${ASSETS}/attach/view/demo/100/default/1`,
        })
        expect(ra).not.toHaveProperty('sha256')
        const onDisk = await readFile(join(kit.baseDir, 'demo', yyyy, MM, '100', a.name), 'utf8')
        expect(onDisk).toBe('first file')
        expect(await kit.files(kit.tmpDir)).not.toContain(`_tmp/${a.name}`)
        const rec = await kit.storage.repository.findById(ra.id)
        expect(rec!.sha256).toBe(createHash('sha256').update('first file').digest('hex'))
      })

      it('reorders by id entries without touching files or names', async () => {
        const a = await tmpUpload(kit, text('A'), 'a.txt')
        const b = await tmpUpload(kit, text('B'), 'b.txt')
        const first = (await (await save(kit, '101', { default: [{ savedName: a.name }, { savedName: b.name }] })).json()).attachList
        const c = await tmpUpload(kit, text('C'), 'c.txt')
        // A new file at index 0, then the old two swapped.
        const res = await save(kit, '101', { default: [{ savedName: c.name }, { id: first[1].id }, { id: first[0].id }] })
        expect(res.status).toBe(200)
        const list = (await res.json()).attachList
        expect(list.map((r: any) => [r.displayName, r.sort, r.savedName])).toEqual([
          ['c.txt', 0, c.name],
          ['b.txt', 1, b.name],
          ['a.txt', 2, a.name],
        ])
        const v = await kit.handler.fetch(new Request(`http://x${ASSETS}/attach/view/demo/101/default/0`))
        expect(await v.text()).toBe('C')
      })

      it('reuses a stored file by savedDir (a new record, no copy) and deletes it with its last record', async () => {
        const a = await tmpUpload(kit, text('shared bytes'), 's.txt')
        const [orig] = (await (await save(kit, '102', { default: [{ savedName: a.name }] })).json()).attachList
        const filesBefore = await kit.files()
        const res = await save(kit, '103', { default: [{ savedName: orig.savedName, savedDir: orig.savedDir, displayName: 'copy.txt' }] })
        expect(res.status).toBe(200)
        const [copy] = (await res.json()).attachList
        expect(copy).toMatchObject({ refKey: '103', savedDir: orig.savedDir, savedName: orig.savedName, displayName: 'copy.txt' })
        expect(copy.id).not.toBe(orig.id)
        expect(await kit.files()).toEqual(filesBefore)
        // Deleting the original keeps the file for the copy.
        let del = await save(kit, '102', { _deleted: [{ id: orig.id }] })
        expect(del.status).toBe(200)
        expect(await kit.files()).toEqual(filesBefore)
        const v = await kit.handler.fetch(new Request(`http://x${ASSETS}/attach/view/${copy.id}`))
        expect(await v.text()).toBe('shared bytes')
        del = await kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id: copy.id }]) })
        expect(await del.json()).toEqual({ success: true, count: 1 })
        expect((await kit.files()).length).toBe(filesBefore.length - 1)
      })

      it('lets only those who may see a guarded file reuse it by savedDir', async () => {
        const up = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['refCategory', 'private'],
          ['file', text('guarded'), 'g.txt'],
        ])
        const name = (await up.json()).files[0].name
        const [orig] = (await (await save(kit, '110', { private: [{ savedName: name }] })).json()).attachList
        const entry = { savedName: orig.savedName, savedDir: orig.savedDir, displayName: 'again.txt' }
        const other = await save(kit, '111', { private: [entry] }, '8')
        expect(other.status).toBe(500)
        expect((await other.json()).failures[0].reason).toMatch(/may not be reused/)
        const mine = await save(kit, '111', { private: [entry] })
        expect(mine.status).toBe(200)
        expect((await mine.json()).attachList[0]).toMatchObject({ savedName: orig.savedName, refKey: '111' })
      })

      it('reports a partial failure (500 attach-save-failure), keeps the successes, completes on resend', async () => {
        const good = await tmpUpload(kit, text('good'), 'good.txt')
        const later = await tmpUpload(kit, text('later'), 'later.txt')
        // Make `later` unavailable for the first attempt by hiding its file.
        const { rename } = await import('node:fs/promises')
        const hidden = join(kit.tmpDir, '_tmp', later.name)
        await rename(hidden, `${hidden}.away`)
        const bag = {
          default: [
            { savedName: good.name, displayName: 'good.txt' },
            { savedName: later.name, displayName: 'later.txt' },
            { savedName: '../../../etc/passwd', displayName: 'evil' },
            { displayName: 'neither' },
          ],
          _deleted: [{ id: 99999999 }],
        }
        const res = await save(kit, '104', bag)
        expect(res.status).toBe(500)
        const body = await res.json()
        expect(body).toMatchObject({ success: false, code: 'attach-save-failure', message: expect.any(String) })
        expect(body.failures).toEqual([
          { code: 'not-found', refCategory: '_deleted', index: 0, displayName: '', reason: expect.any(String) },
          { code: 'not-found', refCategory: 'default', index: 1, displayName: 'later.txt', reason: expect.stringContaining('temporary') },
          { code: 'bad-request', refCategory: 'default', index: 2, displayName: 'evil', reason: expect.any(String) },
          { code: 'bad-request', refCategory: 'default', index: 3, displayName: 'neither', reason: expect.any(String) },
        ])
        const saved = (await (await kit.call(`${API}/attach/demo/104/default`)).json()).default
        expect(saved.map((r: any) => r.displayName)).toEqual(['good.txt'])
        await rename(`${hidden}.away`, hidden)
        const retry = await save(kit, '104', { default: [{ savedName: later.name, displayName: 'later.txt' }] })
        expect(retry.status).toBe(200)
        const after = (await (await kit.call(`${API}/attach/demo/104/default`)).json()).default
        expect(after.map((r: any) => r.displayName).sort()).toEqual(['good.txt', 'later.txt'])
      })

      it('never reads or writes outside the storage areas for hostile savedName / savedDir', async () => {
        const hostile = [
          '../../../../etc/passwd',
          '..%2F..%2Fetc%2Fpasswd',
          '/etc/passwd',
          '..\\..\\x',
          'a\u0000.txt',
          '_tmp/x',
          '00000000-0000-0000-0000-000000000000.meta.json',
        ]
        const res = await save(kit, '105', { default: hostile.map((savedName) => ({ savedName, displayName: 'x' })) })
        expect(res.status).toBe(500)
        expect((await res.json()).failures).toHaveLength(hostile.length)
        const res2 = await save(kit, '105', {
          default: [
            { savedName: 'passwd', savedDir: '/../../etc/' },
            { savedName: '00000000-0000-0000-0000-000000000000.txt', savedDir: '/demo/2020/01/../../' },
          ],
        })
        expect((await res2.json()).failures).toHaveLength(2)
        expect(await (await kit.call(`${API}/attach/demo/105/default/_count`)).json()).toBe(0)
      })

      it('answers 400 to malformed JSON, a non-object bag, unknown categories and a foreign refDomain', async () => {
        const cases: Array<[string, string, string]> = [
          ['/attach/demo/106', '{"default": [', 'bad-request'],
          ['/attach/demo/106', '[]', 'bad-request'],
          ['/attach/demo/106', JSON.stringify({ nope: [] }), 'unknown-category'],
          ['/attach/demo/106', JSON.stringify({ default: {} }), 'bad-request'],
          ['/attach/demo/106', JSON.stringify({ refDomain: 'board', default: [] }), 'bad-request'],
          ['/attach/nope/106', JSON.stringify({ default: [] }), 'unknown-domain'],
          ['/attach/demo/a%2Fb', JSON.stringify({ default: [] }), 'bad-request'],
        ]
        for (const [path, body, code] of cases) {
          const res = await kit.call(API + path, { method: 'POST', body })
          expect(res.status, `${path} ${body}`).toBe(400)
          expect((await res.json()).code, body).toBe(code)
        }
      })

      it('re-runs the target category filters when a file moves to another category', async () => {
        const t = await tmpUpload(kit, text('plain text'), 'x.png')
        const res = await save(kit, '107', { image: [{ savedName: t.name }] })
        expect(res.status).toBe(500)
        expect((await res.json()).failures[0].reason).toMatch(/type/)
      })
    })

    describe('commitAttachContainer()', () => {
      it('places files by the entity date, the month taken in the business time zone', async () => {
        const seoul = await makeKit(dialect, { config: { timeZone: 'Asia/Seoul' } })
        try {
          for (const [k, tz] of [
            [kit, 'UTC'],
            [seoul, 'Asia/Seoul'],
          ] as const) {
            const t = await tmpUpload(k, text('entity file'), 'e.txt', [], '9')
            // 2024-01-31T20:00Z is still January in UTC, already February 1st in Seoul (UTC+9).
            const list = await k.storage.commitAttachContainer({
              refKey: 200,
              attachContainer: { refDomain: 'demo', default: [{ savedName: t.name, displayName: 'e.txt' }] },
              entity: { createdDt: '2024-01-31T20:00:00.000Z' },
              user: { id: 9 },
            })
            expect(list[0]!.savedDir, tz).toBe(tz === 'UTC' ? '/demo/2024/01/200/' : '/demo/2024/02/200/')
            expect(list[0]!.createdBy).toBe(9)
            expect(await k.files()).toContain(`demo/${tz === 'UTC' ? '2024/01' : '2024/02'}/200/${t.name}`)
          }
          // No entity date: the current month.
          const t = await tmpUpload(kit, text('now'), 'n.txt', [], '9')
          const list = await kit.storage.commitAttachContainer({
            refKey: 202,
            attachContainer: { refDomain: 'demo', default: [{ savedName: t.name }] },
            entity: { createdDt: null },
            user: { id: 9 },
          })
          const now = new Date()
          expect(list[0]!.savedDir).toBe(`/demo/${now.getUTCFullYear()}/${String(now.getUTCMonth() + 1).padStart(2, '0')}/202/`)
        } finally {
          await seoul.cleanup()
        }
      })

      it('throws the partial failure to the caller', async () => {
        await expect(
          kit.storage.commitAttachContainer({
            refKey: 201,
            attachContainer: { refDomain: 'demo', default: [{ savedName: 'missing' }] },
            user: { id: 9 },
          }),
        ).rejects.toMatchObject({ code: 'attach-save-failure', status: 500, details: { failures: [expect.any(Object)] } })
      })

      it('refuses an unknown domain and an invalid entity date', async () => {
        await expect(
          kit.storage.commitAttachContainer({ refKey: 1, attachContainer: { refDomain: 'nope' }, user: null }),
        ).rejects.toMatchObject({ code: 'unknown-domain', status: 400 })
        await expect(
          kit.storage.commitAttachContainer({
            refKey: 1,
            attachContainer: { refDomain: 'demo', default: [] },
            entity: { createdDt: 'yesterday' },
            user: null,
          }),
        ).rejects.toMatchObject({ code: 'bad-request' })
      })
    })

    describe('direct upload', () => {
      it('stores several files at /{domain}/{yyyy}/{MM}/_/{category}/ and answers working urls', async () => {
        const res = await kit.upload(`${API}/attach/direct`, [
          ['refDomain', 'demo'],
          ['refCategory', 'image'],
          ['useFileExtension', 'true'],
          ['files', await png(), 'one.png'],
          ['files', await png(2, 2), 'two.png'],
        ])
        expect(res.status).toBe(200)
        const { files } = await res.json()
        expect(files).toHaveLength(2)
        const now = new Date()
        const dir = `/demo/${now.getUTCFullYear()}/${String(now.getUTCMonth() + 1).padStart(2, '0')}/_/image/`
        expect(files[0]).toEqual({
          name: expect.stringMatching(/\.png$/),
          savedDir: dir,
          url: `${ASSETS}/attach-direct/view/demo/image?path=${encodeURIComponent(dir + files[0].name)}`,
          displayName: 'one.png',
          size: expect.any(Number),
          type: 'image/png',
        })
        const view = await kit.handler.fetch(new Request(`http://x${files[1].url}`))
        expect(view.status).toBe(200)
        expect(view.headers.get('content-type')).toBe('image/png')
        expect((await view.arrayBuffer()).byteLength).toBe(files[1].size)
      })
    })

    describe('lookups', () => {
      let ids: number[] = []
      beforeAll(async () => {
        const parts = [
          ['one', 'ko'],
          ['two', 'en'],
          ['three', 'en'],
        ]
        const bag: Record<string, unknown[]> = { default: [], image: [] }
        for (const [content, ext] of parts) {
          const t = await tmpUpload(kit, text(content!), `${content}.txt`)
          bag.default!.push({ savedName: t.name, displayName: `${content}.txt`, ext, fmetaValue: content === 'three' ? 'm3' : null })
        }
        const img = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['refCategory', 'image'],
          ['file', await png(), 'p.png'],
        ])
        bag.image!.push({ savedName: (await img.json()).files[0].name })
        const res = await save(kit, '300', bag)
        ids = (await res.json()).attachList.map((r: any) => r.id)
        // Another reference, which no lookup of 300 may count.
        const o = await tmpUpload(kit, text('other'), 'o.txt')
        await save(kit, '301', { default: [{ savedName: o.name }] })
      })

      it('answers an AttachBag ordered by sort, every category present', async () => {
        const bag = await (await kit.call(`${API}/attach/demo/300`)).json()
        expect(Object.keys(bag)).toEqual(['refDomain', 'default', 'image', 'private', 'throws'])
        expect(bag.default.map((r: any) => r.displayName)).toEqual(['one.txt', 'two.txt', 'three.txt'])
        expect(bag.default.map((r: any) => r.url)).toEqual([0, 1, 2].map((i) => `${ASSETS}/attach/view/demo/300/default/${i}`))
        expect(bag.image).toHaveLength(1)
        expect(bag.private).toEqual([])
      })
      it('filters by ext, extAlt (priority, else the first) and fmetaValue', async () => {
        const get = async (q: string) =>
          (await (await kit.call(`${API}/attach/demo/300/default?${q}`)).json()).default.map((r: any) => r.displayName)
        expect(await get('ext=en')).toEqual(['two.txt', 'three.txt'])
        expect(await get('extAlt=fr:ko:en')).toEqual(['one.txt'])
        expect(await get('extAlt=fr:de')).toEqual(['one.txt'])
        expect(await get('fmetaValue=m3')).toEqual(['three.txt'])
      })
      it('counts only its own reference', async () => {
        expect(await (await kit.call(`${API}/attach/demo/300/default/_count`)).json()).toBe(3)
        expect(await (await kit.call(`${API}/attach/demo/301/default/_count`)).json()).toBe(1)
        expect(await (await kit.call(`${API}/attach/demo/999/default/_count`)).json()).toBe(0)
        const res = await kit.call(`${API}/attach/demo/300/nope/_count`)
        expect(res.status).toBe(400)
        expect((await res.json()).code).toBe('unknown-category')
      })
      it('lists several references ordered by refKey, refCategory, sort', async () => {
        const res = await kit.call(`${API}/attach?refDomain=demo&refKeyList=301,300&refCategoryList=default,image`)
        const rows = await res.json()
        expect(rows.map((r: any) => [r.refKey, r.refCategory, r.sort])).toEqual([
          ['300', 'default', 0],
          ['300', 'default', 1],
          ['300', 'default', 2],
          ['300', 'image', 0],
          ['301', 'default', 0],
        ])
        const bad = await kit.call(`${API}/attach?refKeyList=1`)
        expect(bad.status).toBe(400)
      })
      it('answers direct-url, 404 when out of range or empty', async () => {
        let res = await kit.call(`${API}/direct-url`, {
          method: 'POST',
          body: JSON.stringify({ refDomain: 'demo', refCategory: 'default', refKey: '300', index: 1, createdDt: 'ignored' }),
        })
        expect(res.status).toBe(200)
        expect(await res.json()).toBe(`${ASSETS}/attach/view/${ids[1]}`)
        for (const body of [
          { refDomain: 'demo', refCategory: 'default', refKey: '300', index: 3 },
          { refDomain: 'demo', refCategory: 'default', refKey: '999', index: 0 },
        ]) {
          res = await kit.call(`${API}/direct-url`, { method: 'POST', body: JSON.stringify(body) })
          expect(res.status).toBe(404)
          expect((await res.json()).code).toBe('not-found')
        }
      })
      it('updates metadata of own records only, never immutable fields', async () => {
        const id = ids[0]!
        let res = await kit.call(`${API}/attach/`, {
          method: 'PUT',
          body: JSON.stringify([
            {
              id,
              displayName: 'renamed.txt',
              ext: 'x',
              savedName: 'evil',
              savedDir: '/etc/',
              fileSize: 1,
              fileType: 'text/html',
              createdBy: 1,
              createdDt: '2000-01-01T00:00:00.000Z',
            },
          ]),
        })
        expect(await res.json()).toEqual({ success: true, count: 1 })
        const r = await kit.storage.repository.findById(id)
        expect(r).toMatchObject({ displayName: 'renamed.txt', ext: 'x', fileSize: 3, fileType: 'text/plain', createdBy: 7 })
        expect(r!.savedDir).toMatch(/^\/demo\/\d{4}\/\d{2}\/300\/$/)
        // Another user: 403, nothing changed.
        res = await kit.call(`${API}/attach/`, { method: 'PUT', body: JSON.stringify([{ id, displayName: 'hacked' }]), user: '8' })
        expect(res.status).toBe(403)
        expect((await res.json()).code).toBe('forbidden')
        expect((await kit.storage.repository.findById(id))!.displayName).toBe('renamed.txt')
        // Malformed bodies.
        for (const body of ['{', '{}', '[{"id":"x"}]', '[{"id":1.5}]']) {
          res = await kit.call(`${API}/attach/`, { method: 'PUT', body })
          expect(res.status, body).toBe(400)
        }
      })
      it("refuses to delete another user's records (403, nothing deleted)", async () => {
        const res = await kit.call(`${API}/attach`, { method: 'POST', body: JSON.stringify([{ id: ids[0] }, { id: ids[1] }]), user: '8' })
        expect(res.status).toBe(403)
        expect((await res.json()).code).toBe('forbidden')
        expect(await (await kit.call(`${API}/attach/demo/300/default/_count`)).json()).toBe(3)
      })
      it('answers 400 to an unknown domain or category and to an unsafe refKey', async () => {
        expect((await kit.call(`${API}/attach/nope/1`)).status).toBe(400)
        expect((await (await kit.call(`${API}/attach/demo/1/nope`)).json()).code).toBe('unknown-category')
        expect((await kit.call(`${API}/attach/demo/${encodeURIComponent('../x')}`)).status).toBe(400)
      })
    })

    describe('views and downloads', () => {
      let pub: any
      let priv: any
      beforeAll(async () => {
        const t = await tmpUpload(kit, text('public bytes'), '보고서 résumé.txt')
        pub = (await (await save(kit, '400', { default: [{ savedName: t.name, displayName: '보고서 résumé.txt' }] })).json()).attachList[0]
        const p = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['refCategory', 'private'],
          ['file', text('secret bytes'), 's.txt'],
        ])
        const pn = (await p.json()).files[0].name
        priv = (await (await save(kit, '400', { private: [{ savedName: pn }] })).json()).attachList[0]
      })
      const get = (path: string, headers: Record<string, string> = {}) =>
        kit.handler.fetch(new Request(`http://x${ASSETS}${path}`, { headers }))

      it('views by id and by reference with type, length, validators and nosniff', async () => {
        for (const path of [`/attach/view/${pub.id}`, '/attach/view/demo/400/default', '/attach/view/demo/400/default/0']) {
          const res = await get(path)
          expect(res.status, path).toBe(200)
          expect(res.headers.get('content-type')).toBe('text/plain')
          expect(res.headers.get('content-length')).toBe('12')
          expect(res.headers.get('x-content-type-options')).toBe('nosniff')
          expect(res.headers.get('etag')).toBe(`"${createHash('sha256').update('public bytes').digest('hex')}"`)
          // A by-id address names one file forever; a by-reference one names a slot, validated by ETag alone.
          if (path === `/attach/view/${pub.id}`) expect(res.headers.get('last-modified')).toBeTruthy()
          else expect(res.headers.get('last-modified')).toBeNull()
          expect(res.headers.get('content-disposition')).toMatch(/^inline;/)
          expect(await res.text()).toBe('public bytes')
        }
      })
      it('downloads under the display name (RFC 6266 with filename*)', async () => {
        const res = await get(`/attach/download/${pub.id}`)
        expect(res.headers.get('content-disposition')).toBe(
          `attachment; filename="___ resume.txt"; filename*=UTF-8''${encodeURIComponent('보고서 résumé.txt')}`,
        )
      })
      it('guards the private category on every path: 403 without token or for another user, 200 for the creator', async () => {
        const paths = [`/attach/view/${priv.id}`, '/attach/view/demo/400/private/0', `/attach/download/${priv.id}`]
        for (const path of paths) {
          let res = await get(path)
          expect(res.status, path).toBe(403)
          expect(await res.json()).toMatchObject({ code: 'forbidden' })
          res = await get(`${path}?access_token=${await token('8')}`)
          expect(res.status).toBe(403)
          res = await get(`${path}?access_token=${await token('7')}`)
          expect(res.status).toBe(200)
          expect(await res.text()).toBe('secret bytes')
          res = await get(path, { authorization: `Bearer ${await token('7')}` })
          expect(res.status).toBe(200)
          expect(res.headers.get('cache-control')).toMatch(/^private/)
        }
      })
      it('counts a throwing secure-access function as a refusal (403 JSON)', async () => {
        const t = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['refCategory', 'throws'],
          ['file', text('x'), 'x.txt'],
        ])
        const name = (await t.json()).files[0].name
        const res = await get(`/attach-temp/view/demo/throws/${name}`)
        expect(res.status).toBe(403)
        expect((await res.json()).code).toBe('forbidden')
      })
      it('previews temporary files with the synthetic description, only in their own category', async () => {
        const t = await kit.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['refCategory', 'private'],
          ['file', text('tmp secret'), 't.txt'],
        ])
        const name = (await t.json()).files[0].name
        expect((await get(`/attach-temp/view/demo/private/${name}`)).status).toBe(403)
        // A guarded temporary file is its uploader's (user 7) only.
        expect((await get(`/attach-temp/view/demo/private/${name}?access_token=${await token('123')}`)).status).toBe(403)
        // A token no header can carry (above U+00FF, a line break, a NUL) is no one's: 403, never a 500.
        for (const bad of ['%E6%87%A6', `${await token('7')}%0A`, 'a%00b', '%F0%9F%98%80']) {
          const res = await get(`/attach-temp/view/demo/private/${name}?access_token=${bad}`)
          expect(res.status).toBe(403)
          expect((await res.json()).code).toBe('forbidden')
        }
        const ok = await get(`/attach-temp/view/demo/private/${name}?access_token=${await token('7')}`)
        expect(ok.status).toBe(200)
        expect(await ok.text()).toBe('tmp secret')
        // The same file through a lax category is not found.
        expect((await get(`/attach-temp/view/demo/default/${name}`)).status).toBe(404)
      })
      it('answers 404 with a JSON body for missing files, never an empty 200', async () => {
        for (const path of [
          '/attach/view/99999999',
          '/attach/view/demo/400/default/5',
          '/attach/view/demo/999/default',
          '/attach-temp/view/demo/default/00000000-0000-0000-0000-000000000000.txt',
          '/attach-direct/view/demo/default?path=/demo/2020/01/_/default/00000000-0000-0000-0000-000000000000.txt',
          '/nope',
          '/attach/frobnicate/1',
        ]) {
          const res = await get(path)
          expect(res.status, path).toBe(404)
          expect(await res.json()).toMatchObject({ code: 'not-found', message: expect.any(String) })
        }
      })
      it('refuses traversal in savedName and path, never serving a byte from outside', async () => {
        const attempts = [
          '/attach-temp/view/demo/default/..%2F..%2F..%2Fetc%2Fpasswd',
          '/attach-temp/view/demo/default/%2e%2e%2f%2e%2e%2fetc%2fpasswd',
          '/attach-temp/view/demo/default/..%252F..%252Fetc%252Fpasswd',
          '/attach-temp/view/demo/default/..%5C..%5Cetc%5Cpasswd',
          '/attach-temp/view/demo/default/x%00.txt',
          '/attach-direct/view/demo/default?path=../../../../etc/passwd',
          '/attach-direct/view/demo/default?path=%2Fetc%2Fpasswd',
          '/attach-direct/view/demo/default?path=/demo/2020/01/_/default/../../../../../etc/passwd',
          '/attach-direct/view/demo/default?path=/board/2020/01/_/default/00000000-0000-0000-0000-000000000000.txt',
          '/attach-direct/view/demo/default?path=%252e%252e%252fetc%252fpasswd',
          '/attach-direct/view/demo/default?path=..%5C..%5Cwindows',
          '/attach-direct/view/demo/default?path=/demo/2020/01/_/default/a%00.txt',
        ]
        for (const path of attempts) {
          const res = await get(path)
          expect([400, 404], path).toContain(res.status)
          const body = await res.text()
          expect(body, path).not.toMatch(/root:/)
          expect(JSON.parse(body).code).toBeTruthy()
        }
      })
      it('sends active content (HTML, SVG) as a download even on view', async () => {
        const t = await tmpUpload(kit, text('<html><script>alert(1)</script></html>', 'text/html'), 'x.html')
        const r = (await (await save(kit, '401', { default: [{ savedName: t.name }] })).json()).attachList[0]
        expect(r.fileType).toBe('text/html')
        const res = await get(`/attach/view/${r.id}`)
        expect(res.headers.get('content-type')).toBe('application/octet-stream')
        expect(res.headers.get('content-disposition')).toMatch(/^attachment;/)
        expect(res.headers.get('x-content-type-options')).toBe('nosniff')
      })
    })

    describe('limits', () => {
      let small: Kit
      beforeAll(async () => {
        small = await makeKit(dialect, { config: { upload: { maxFileSize: 64 * 1024, maxFiles: 3 } } })
      })
      afterAll(async () => {
        await small?.cleanup()
      })
      it('cuts an oversized file off with 413 and leaves nothing behind', async () => {
        const res = await small.upload(`${API}/attach/tmp`, [
          ['refDomain', 'demo'],
          ['fileMap', new Blob([new Uint8Array(1000)]), 'ok.bin'],
          ['fileMap', new Blob([new Uint8Array(200 * 1024)]), 'big.bin'],
        ])
        expect(res.status).toBe(413)
        expect(await res.json()).toMatchObject({ code: 'too-large' })
        expect(await small.files(small.tmpDir)).toEqual([])
      })
      it('answers 413 from Content-Length alone, before reading', async () => {
        const res = await small.handler.fetch(
          new Request(`http://x${API}/attach/tmp`, {
            method: 'POST',
            headers: {
              authorization: `Bearer ${await token('7')}`,
              'content-type': 'multipart/form-data; boundary=x',
              'content-length': String(10 * 1024 * 1024),
            },
            body: 'x',
          }),
        )
        expect(res.status).toBe(413)
        expect((await res.json()).code).toBe('too-large')
      })
      it('answers 413 to too many files and leaves nothing', async () => {
        const parts: Array<[string, string | Blob, string?]> = [['refDomain', 'demo']]
        for (let i = 0; i < 5; i++) parts.push(['fileMap', text(`f${i}`), `f${i}.txt`])
        const res = await small.upload(`${API}/attach/tmp`, parts)
        expect(res.status).toBe(413)
        expect(await small.files(small.tmpDir)).toEqual([])
      })
      it('answers 400 to a malformed multipart body and leaves nothing', async () => {
        const res = await small.handler.fetch(
          new Request(`http://x${API}/attach/tmp`, {
            method: 'POST',
            headers: { authorization: `Bearer ${await token('7')}`, 'content-type': 'multipart/form-data; boundary=abc' },
            body: '--abc\r\nContent-Disposition: form-data; name="file"; filename="a.txt"\r\n\r\nunterminated',
          }),
        )
        expect(res.status).toBe(400)
        expect((await res.json()).code).toBeTruthy()
        expect(await small.files(small.tmpDir)).toEqual([])
      })
      it('answers 413 to a JSON body over the limit', async () => {
        const res = await small.call(`${API}/attach/demo/1`, {
          method: 'POST',
          body: JSON.stringify({ default: [], pad: 'x'.repeat(3 * 1024 * 1024) }),
        })
        expect(res.status).toBe(413)
      })
    })

    describe('temporary-file sweep', () => {
      it('removes expired temporary files and keeps fresh ones', async () => {
        const old = await tmpUpload(kit, text('old'), 'old.txt')
        const fresh = await tmpUpload(kit, text('fresh'), 'fresh.txt')
        const past = new Date(Date.now() - 25 * 3600 * 1000)
        await utimes(join(kit.tmpDir, '_tmp', old.name), past, past)
        await utimes(join(kit.tmpDir, '_tmp', `${old.name}.meta.json`), past, past)
        const result = await kit.storage.sweep()
        expect(result.temporaryFiles).toBeGreaterThanOrEqual(1)
        const left = await kit.files(kit.tmpDir)
        expect(left).not.toContain(`_tmp/${old.name}`)
        expect(left).not.toContain(`_tmp/${old.name}.meta.json`)
        expect(left).toContain(`_tmp/${fresh.name}`)
        await expect(stat(join(kit.tmpDir, '_tmp', fresh.name))).resolves.toBeTruthy()
        // The expired file can no longer be saved; the fresh one can.
        const res = await save(kit, '500', { default: [{ savedName: old.name }, { savedName: fresh.name }] })
        expect(res.status).toBe(500)
        expect((await res.json()).failures.map((f: any) => f.index)).toEqual([0])
      })
    })
  })
}

describe('secret handling', () => {
  it('never verifies with a short secret', async () => {
    await expect(createAttachStorage({ jwt: { secret: 'short' } })).rejects.toMatchObject({ code: 'config-invalid' })
  })
})
