/**
 * POST attach/presign on a service whose temporary store cannot presign (the local one), and what every
 * confirmed save fills in for a temporary file. The presigned flow itself runs on S3 and Azure, in
 * their packages' direct-uploads tests (attach-storage/testing expectDirectUploads).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { checkStoreDeclarations, parseAttachConfig } from '../../config/schema.js'
import { type Kit, makeKit } from '../../testing/handler-kit.js'

const API = '/api/storage'

describe('POST attach/presign without a presigning store', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: { upload: { maxFileSize: 1000 } } })
  })
  afterAll(() => kit.cleanup())

  const presign = (body: unknown, user?: string | null) =>
    kit.call(`${API}/attach/presign`, { method: 'POST', body: JSON.stringify(body), user })
  const answer = async (res: Response, status: number, code: string, message?: RegExp) => {
    expect(res.status).toBe(status)
    const body = await res.json()
    expect(body).toMatchObject({ code, message: expect.any(String) })
    if (message) expect(body.message).toMatch(message)
  }

  it('answers 400 presign-unsupported for a valid request, and leaves nothing', async () => {
    await answer(await presign({ refDomain: 'demo', fileName: 'a.txt', size: 10 }), 400, 'presign-unsupported', /attach\/tmp/)
    expect(await kit.files(kit.tmpDir)).toEqual([])
  })

  it('checks the request before the store: body, domain, category, access, size', async () => {
    await answer(await presign({ refDomain: 'demo', fileName: 'a.txt' }), 400, 'bad-request', /^body\.size: size is required/)
    await answer(
      await presign({ refDomain: 'demo', fileName: 7, size: 1 }),
      400,
      'bad-request',
      /^body\.fileName: fileName must be a string/,
    )
    await answer(await presign({ refDomain: 'nope', fileName: 'a.txt', size: 1 }), 400, 'unknown-domain')
    await answer(await presign({ refDomain: 'demo', refCategory: 'nope', fileName: 'a.txt', size: 1 }), 400, 'unknown-category')
    await answer(await presign({ refDomain: 'demo', refCategory: 'throws', fileName: 'a.txt', size: 1 }), 403, 'forbidden')
    await answer(await presign({ refDomain: 'demo', fileName: 'a.txt', size: 1001 }), 413, 'too-large')
    await answer(await presign({ refDomain: 'demo', fileName: 'a.txt', size: 1 }, null), 401, 'unauthorized')
    expect(await kit.files(kit.tmpDir)).toEqual([])
  })
})

describe('a confirmed save fills in what an entry of a temporary file omits', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite')
  })
  afterAll(() => kit.cleanup())

  it('displayName, fileSize and fileType come from the file; the client cannot set size or type', async () => {
    const names: string[] = []
    for (const name of ['notes.txt', 'other.txt']) {
      const up = await kit.upload(`${API}/attach/tmp`, [
        ['refDomain', 'demo'],
        ['file', new Blob(['some plain text']), name],
      ])
      names.push((await up.json()).files[0].name)
    }
    const res = await kit.call(`${API}/attach/demo/42`, {
      method: 'POST',
      body: JSON.stringify({
        default: [{ savedName: names[0] }, { savedName: names[1], displayName: 'shown.txt', fileSize: 1, fileType: 'text/html' }],
      }),
    })
    expect(res.status).toBe(200)
    const list = (await res.json()).attachList
    expect(list).toMatchObject([
      { displayName: 'notes.txt', fileSize: 15, fileType: 'text/plain', sort: 0 },
      { displayName: 'shown.txt', fileSize: 15, fileType: 'text/plain', sort: 1 },
    ])
  })
})

describe('presign-store', () => {
  it('is read from kebab-case and must name a declared store', () => {
    const config = parseAttachConfig({
      attach: { 'presign-store': 'cloud', 'default-store': 'cloud', stores: { cloud: { type: 's3', bucket: 'b', region: 'r' } } },
    })
    expect(config.presignStore).toBe('cloud')
    expect(() => checkStoreDeclarations({ cloud: { type: 's3' } }, { ...config, presignStore: 'nope' }, new Set())).toThrow(
      /attach\.presign-store names store "nope", which is not declared; declared stores: cloud/,
    )
  })
})
