/**
 * Display names lose the invisible characters that change how a name reads (the bidirectional marks,
 * embeddings, overrides and isolates, the line and paragraph separators) and C1 controls, on every entry
 * point: multipart upload (temporary, direct, editor), PUT, tus metadata, presign, the host's commit and
 * ZIP titles; the download's Content-Disposition shows the clean name.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { cleanDisplayName } from '../service/names.js'
import { type Kit, makeKit, png } from '../testing/handler-kit.js'

const API = '/api/storage'
const ASSETS = '/assets/storage'
/** `invoiceexe.pdf` on screen, an .exe in fact. */
const SPOOF = 'invoice\u202Efdp.exe'
/** One of each other kind: U+061C, U+200E, U+200F, U+202A-U+202D, U+2066-U+2069, U+2028, U+2029, C1. */
const HIDDEN = 'a\u061Cb\u200E\u200Fc\u202A\u202B\u202C\u202Dd\u2066\u2067\u2068\u2069e\u2028\u2029f\u0080\u0085\u009F.txt'

describe('display names lose invisible direction and separator characters and C1 controls', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: { resumable: { enabled: true } } })
  })
  afterAll(() => kit.cleanup())

  const tmpUpload = async (name: string, blob: Blob = new Blob(['hello'])) => {
    const res = await kit.upload(`${API}/attach/tmp`, [
      ['refDomain', 'demo'],
      ['file', blob, name],
    ])
    expect(res.status).toBe(200)
    return (await res.json()).files[0]
  }
  const save = async (refKey: string, bag: unknown) => {
    const res = await kit.call(`${API}/attach/demo/${refKey}`, { method: 'POST', body: JSON.stringify(bag) })
    expect(res.status).toBe(200)
    return (await res.json()).attachList
  }

  it('names.ts removes them, and keeps what reads the same (other scripts, emoji joiners)', () => {
    expect(cleanDisplayName(SPOOF)).toBe('invoicefdp.exe')
    expect(cleanDisplayName(HIDDEN)).toBe('abcdef.txt')
    expect(cleanDisplayName('\u202E\u2028')).toBe('file')
    expect(cleanDisplayName('보고서 \u0627\u0644\u0645.pdf')).toBe('보고서 \u0627\u0644\u0645.pdf')
    expect(cleanDisplayName('👩\u200D💻.png')).toBe('👩\u200D💻.png')
  })

  it('multipart temporary upload, the confirmed save, and the download Content-Disposition', async () => {
    const item = await tmpUpload(SPOOF)
    expect(item.displayName).toBe('invoicefdp.exe')
    const [rec] = await save('names-1', { default: [{ savedName: item.name }] })
    expect(rec.displayName).toBe('invoicefdp.exe')
    const res = await kit.call(`${ASSETS}/attach/download/${rec.id}`)
    expect(res.status).toBe(200)
    const disposition = res.headers.get('content-disposition')!
    expect(disposition).toBe(`attachment; filename="invoicefdp.exe"; filename*=UTF-8''invoicefdp.exe`)
    expect(disposition).not.toContain('%E2%80%AE')
  })

  it('a name given in the confirmed save entry', async () => {
    const item = await tmpUpload('plain.txt')
    const [rec] = await save('names-2', { default: [{ savedName: item.name, displayName: HIDDEN }] })
    expect(rec.displayName).toBe('abcdef.txt')
  })

  it('direct upload and the editor upload', async () => {
    const direct = await kit.upload(`${API}/attach/direct`, [
      ['refDomain', 'demo'],
      ['files', new Blob(['x']), SPOOF],
    ])
    expect((await direct.json()).files[0].displayName).toBe('invoicefdp.exe')
    const editor = await kit.upload(`${API}/ckupload/dnd`, [['upload', await png(), `pic\u202Egnp.exe`]])
    expect(await editor.json()).toMatchObject({ uploaded: 1, fileName: 'picgnp.exe' })
  })

  it('PUT', async () => {
    const item = await tmpUpload('before.txt')
    const [rec] = await save('names-3', { default: [{ savedName: item.name }] })
    const put = await kit.call(`${API}/attach/`, { method: 'PUT', body: JSON.stringify([{ id: rec.id, displayName: SPOOF }]) })
    expect(await put.json()).toEqual({ success: true, count: 1 })
    const after = (await (await kit.call(`${API}/attach/demo/names-3/default`)).json()).default
    expect(after[0].displayName).toBe('invoicefdp.exe')
    // A name of nothing but such characters is no name.
    const empty = await kit.call(`${API}/attach/`, { method: 'PUT', body: JSON.stringify([{ id: rec.id, displayName: '\u202E\u2029' }]) })
    expect(empty.status).toBe(400)
  })

  it('tus metadata', async () => {
    const b64 = (s: string) => Buffer.from(s).toString('base64')
    const res = await kit.call(`${API}/attach/tus`, {
      method: 'POST',
      headers: {
        'tus-resumable': '1.0.0',
        'upload-length': '5',
        'upload-metadata': `filename ${b64(SPOOF)},refDomain ${b64('demo')}`,
        'content-type': 'application/offset+octet-stream',
      },
      body: new TextEncoder().encode('hello'),
    })
    expect(res.status).toBe(201)
    const name = res.headers.get('location')!.split('/').pop()!
    const [rec] = await save('names-4', { default: [{ savedName: name }] })
    expect(rec.displayName).toBe('invoicefdp.exe')
  })

  it('presign: a file name of nothing but such characters is refused before the store is asked', async () => {
    const res = await kit.call(`${API}/attach/presign`, {
      method: 'POST',
      body: JSON.stringify({ refDomain: 'demo', fileName: '\u202E\u2066\u0085', size: 5 }),
    })
    expect(res.status).toBe(400)
    expect(await res.json()).toMatchObject({ code: 'bad-request', message: expect.stringMatching(/fileName/) })
  })

  it("the host's commitAttachContainer()", async () => {
    const item = await tmpUpload('host.txt')
    const list = await kit.storage.commitAttachContainer({
      refDomain: 'demo',
      refKey: 'names-5',
      attachContainer: { default: [{ savedName: item.name, displayName: SPOOF }] } as never,
      user: { id: 7 },
    })
    expect(list[0]!.displayName).toBe('invoicefdp.exe')
  })

  it('ZIP titles', async () => {
    const item = await tmpUpload('z.txt')
    const [rec] = await save('names-6', { default: [{ savedName: item.name }] })
    const res = await kit.handler.fetch(
      new Request(`http://x${ASSETS}/attach/download`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ title: `report\u202Efdp\u2028`, ids: [rec.id] }),
      }),
    )
    expect(res.status).toBe(200)
    await res.arrayBuffer()
    expect(res.headers.get('content-disposition')).toBe(`attachment; filename="reportfdp.zip"; filename*=UTF-8''reportfdp.zip`)
  })
})
