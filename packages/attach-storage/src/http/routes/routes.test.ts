/**
 * Every route's edge: each bad path, query and body a route's schema refuses answers its status with a
 * JSON `{code, message}` naming the field, does no work, and leaves nothing behind.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Kit, makeKit, saveFile } from '../../testing/handler-kit.js'

const API = '/api/storage'
const ASSETS = '/assets/storage'

describe('route schemas refuse bad input at the edge', () => {
  let kit: Kit
  let id: number

  beforeAll(async () => {
    kit = await makeKit('sqlite')
    id = (await saveFile(kit, new Blob(['hello']), 'a.txt', '1')).id
  })
  afterAll(() => kit.cleanup())

  const refused = async (res: Response, status: number, code: string, message?: RegExp) => {
    expect(res.status).toBe(status)
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    const body = await res.json()
    expect(body).toMatchObject({ code, message: expect.any(String) })
    if (message) expect(body.message).toMatch(message)
  }

  it('JSON bodies: the failing field is named', async () => {
    const cases: Array<[string, string, string, RegExp]> = [
      ['POST', '/attach', '{"id":1}', /^body: The body must be an array of attachment records/],
      ['POST', '/attach', '[{"id":0}]', /^body\.0\.id: must be a positive integer/],
      ['POST', '/attach', '[{"id":"1"}]', /^body\.0\.id: must be a positive integer/],
      ['PUT', '/attach/', `[{"id":${1},"displayName":""}]`, /^body\.0\.displayName: displayName must be a non-empty string/],
      ['PUT', '/attach/', `[{"id":1,"displayName":"\\u0001\\u0002"}]`, /displayName must be a non-empty string/],
      ['PUT', '/attach/', '[{"id":1,"sort":-1}]', /^body\.0\.sort: sort must be a non-negative integer/],
      ['PUT', '/attach/', '[{"id":1,"sort":1.5}]', /sort must be a non-negative integer/],
      ['POST', '/direct-url', '[]', /^body: The body must be a JSON object/],
      ['POST', '/direct-url', '{}', /^body\.refDomain: refDomain is required/],
      ['POST', '/direct-url', '{"refKey":"1"}', /^body\.refDomain: refDomain is required/],
      ['POST', '/direct-url', '{"refDomain":"demo","refKey":"1","index":-1}', /^body\.index: index must be a non-negative integer/],
      ['POST', '/direct-url', '{"refDomain":"demo","refKey":{}}', /^body\.refKey:/],
      ['POST', '/attach/demo/1', '[]', /^body: must be a JSON object/],
      ['POST', '/attach/demo/1', '{"default":{}}', /^body\.default: must be an array of file entries/],
      ['POST', '/attach/demo/1', '{"_deleted":{"id":1}}', /^body\._deleted: must be an array of \{id\}/],
      ['POST', '/attach/demo/1', '{"refDomain":7}', /^body\.refDomain: must be a string/],
    ]
    for (const [method, path, body, message] of cases) {
      await refused(await kit.call(API + path, { method, body }), 400, 'bad-request', message)
    }
    // Nothing was changed by any of them.
    const bag = await (await kit.call(`${API}/attach/demo/1/default`)).json()
    expect(bag.default).toHaveLength(1)
    expect(bag.default[0]).toMatchObject({ id, displayName: 'a.txt', sort: 0 })
  })

  it('queries: the failing parameter is named', async () => {
    await refused(await kit.call(`${API}/attach?refKeyList=1`), 400, 'bad-request', /^query\.refDomain: refDomain is required/)
    await refused(await kit.call(`${API}/attach?refDomain=demo`), 400, 'bad-request', /^query\.refKeyList: refKeyList is required/)
    await refused(await kit.call(`${API}/attach?refDomain=demo&refKeyList=,,`), 400, 'bad-request', /refKeyList is required/)
    const many = Array.from({ length: 1001 }, (_, i) => i).join(',')
    await refused(await kit.call(`${API}/attach?refDomain=demo&refKeyList=${many}`), 400, 'bad-request', /at most 1000 keys/)
    for (const q of ['w=0', 'w=4097', 'w=abc', 'h=-1', 'w=10&format=gif']) {
      await refused(await kit.call(`${ASSETS}/attach/view/${id}?${q}`), 400, 'bad-request', /^query\.(w|h|format): /)
      await refused(await kit.call(`${ASSETS}/attach/view/demo/1/default?${q}`), 400, 'bad-request', /^query\.(w|h|format): /)
    }
    await refused(
      await kit.call(`${API}/ckupload/modal?CKEditorFuncNum=1);alert(1`, { method: 'POST' }),
      400,
      'bad-request',
      /CKEditorFuncNum must be digits/,
    )
  })

  it('paths: a segment of another shape is no route (404), a bad index a 400', async () => {
    for (const path of [
      `${ASSETS}/attach/show/${id}`,
      `${ASSETS}/attach/view/${'9'.repeat(16)}`,
      `${ASSETS}/attach/view/demo/1`,
      `${ASSETS}/editor/image/default/2026/1/x.png`,
      `${ASSETS}/editor/image/default/26/01/x.png`,
      `${ASSETS}/editor/image/default/2026/01/x.png/more`,
      `${API}/attach/demo/1/default/_total`,
      `${API}/attach/demo//default`,
      `${API}/ckupload/other`,
    ]) {
      await refused(await kit.call(path, { method: 'GET' }), 404, 'not-found')
    }
    await refused(await kit.call(`${ASSETS}/attach/view/demo/1/default/x`), 400, 'bad-request', /^idx: must be a non-negative integer/)
    await refused(await kit.call(`${ASSETS}/attach/view/%E0%A4%A`), 400, 'bad-request', /percent-encoding/)
  })

  it('the ZIP body: title and ids checked before any file is opened', async () => {
    const zip = (body: string) => kit.call(`${ASSETS}/attach/download`, { method: 'POST', body })
    await refused(await zip('[1]'), 400, 'bad-request', /^body: The body must be a JSON object \{title, ids\}/)
    await refused(await zip('{"ids":"1"}'), 400, 'bad-request', /^body\.ids: ids must be a non-empty array of attachment ids/)
    await refused(await zip('{"ids":[]}'), 400, 'bad-request', /ids must be a non-empty array/)
    await refused(await zip('{"ids":[1.5]}'), 400, 'bad-request', /^body\.ids\.0: ids must be positive integers/)
    await refused(
      await zip(`{"ids":[${id}],"title":"${'t'.repeat(201)}"}`),
      400,
      'bad-request',
      /^body\.title: title must be a string of at most 200/,
    )
    await refused(await zip(`{"ids":[${id}],"title":5}`), 400, 'bad-request', /^body\.title:/)
    const ok = await zip(`{"ids":[${id}],"title":null}`)
    expect(ok.status).toBe(200)
    await ok.arrayBuffer()
  })

  it('upload fields: a bad one refuses the request and removes every file it carried', async () => {
    const before = await kit.files(kit.tmpDir)
    const cases: Array<[Array<[string, string | Blob, string?]>, RegExp]> = [
      [[['file', new Blob(['x']), 'a.txt']], /^fields\.refDomain: refDomain is required/],
      [
        [
          ['refDomain', ''],
          ['file', new Blob(['x']), 'a.txt'],
        ],
        /refDomain is required/,
      ],
      [
        [
          ['refDomain', 'demo'],
          ['filters', '[1]'],
          ['file', new Blob(['x']), 'a.txt'],
        ],
        /^fields\.filters: filters must be a JSON object/,
      ],
      [
        [
          ['refDomain', 'demo'],
          ['filters', '{'],
          ['file', new Blob(['x']), 'a.txt'],
        ],
        /filters must be a JSON object/,
      ],
    ]
    for (const path of ['/attach/tmp', '/attach/direct']) {
      for (const [parts, message] of cases) await refused(await kit.upload(API + path, parts), 400, 'bad-request', message)
      await refused(await kit.upload(API + path, [['refDomain', 'demo']]), 400, 'no-file')
    }
    expect(await kit.files(kit.tmpDir)).toEqual(before)
  })
})
