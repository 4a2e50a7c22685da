/** The OpenAPI document: valid by Redocly's validator, served without authentication, leaking no setting. */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { openApiDocument } from './openapi.js'
import { answerChecker, redoclyProblems } from './openapi-check.js'
import { type Kit, makeKit, SECRET } from '../testing/handler-kit.js'

describe('the OpenAPI document', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite', {
      config: { cdnUrl: 'https://cdn.example.test/files/', signing: { secret: 'signing-secret-of-at-least-16-bytes' } },
    })
  })
  afterAll(() => kit.cleanup())

  it('has no error by @redocly/openapi-core (recommended rules)', async () => {
    const problems = await redoclyProblems(openApiDocument())
    expect(problems.filter((p) => p.severity === 'error')).toEqual([])
  })

  it('is answered at GET {api-prefix}/openapi.json without authentication, and names no secret or setting', async () => {
    const res = await kit.call('/api/storage/openapi.json', { user: null })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-type')).toMatch(/^application\/json/)
    const text = await res.text()
    const doc = JSON.parse(text)
    expect(doc.openapi).toBe('3.1.0')
    for (const secret of [SECRET, 'signing-secret-of-at-least-16-bytes', 'cdn.example.test', kit.dir]) expect(text).not.toContain(secret)
    // The JSON group needs the Bearer JWT; the binary group and the document do not.
    expect(doc.components.securitySchemes.bearerAuth).toMatchObject({ type: 'http', scheme: 'bearer', bearerFormat: 'JWT' })
    expect(doc.paths['/api/storage/config'].get.security).toEqual([{ bearerAuth: [] }])
    expect(doc.paths['/assets/storage/attach/{action}/{id}'].get.security).toEqual([])
    expect(doc.paths['/api/storage/openapi.json'].get.security).toEqual([])
    const head = await kit.call('/api/storage/openapi.json', { method: 'HEAD', user: null })
    expect(head.status).toBe(200)
    // Other methods are not the document's: the JSON group's authentication answers them.
    expect((await kit.call('/api/storage/openapi.json', { method: 'POST', body: '{}', user: null })).status).toBe(401)
  })

  it('describes every route: path parameters, queries, JSON and multipart bodies, JSON and binary answers', () => {
    const doc = openApiDocument() as any
    const p = doc.paths
    expect(p['/api/storage/attach/tmp'].post.requestBody.content['multipart/form-data'].schema.properties.file).toBeDefined()
    expect(p['/api/storage/attach/{refDomain}/{refKey}'].post.requestBody.content['application/json'].schema.type).toBe('object')
    expect(p['/api/storage/attach/{refDomain}/{refKey}'].get.responses['200'].content['application/json'].schema).toBeDefined()
    expect(
      p['/api/storage/attach/{refDomain}/{refKey}/{refCategory}/_count'].get.responses['200'].content['application/json'].schema,
    ).toEqual({
      type: 'number',
    })
    expect(p['/api/storage/attach'].get.parameters.map((x: any) => x.name)).toEqual(
      expect.arrayContaining(['refDomain', 'refKeyList', 'refCategoryList', 'currentPage', 'sortBy', 'q']),
    )
    expect(p['/api/storage/attach/presign'].post.requestBody.content['application/json'].schema.required).toEqual(
      expect.arrayContaining(['refDomain', 'fileName', 'size']),
    )
    const view = p['/assets/storage/attach/{action}/{id}']
    expect(view.get.parameters.find((x: any) => x.name === 'action').schema.enum).toEqual(['view', 'download'])
    expect(view.get.responses['200'].headers['content-disposition']).toBeDefined()
    expect(view.get.responses['206']).toBeDefined()
    expect(view.head).toBeDefined()
    expect(p['/assets/storage/attach/download'].post.responses['200'].content['application/zip']).toBeDefined()
    expect(p['/api/storage/attach/'].put).toBeDefined()
    for (const [name, path] of Object.entries<any>(p)) {
      if (name.endsWith('/openapi.json')) continue
      for (const [method, op] of Object.entries<any>(path)) {
        if (method !== 'head')
          expect(op.responses['4XX'].content['application/json'].schema).toEqual({ $ref: '#/components/schemas/Error' })
      }
    }
  })

  it('follows the configured prefixes', () => {
    const doc = openApiDocument({ apiPrefix: '/files/api', assetsPrefix: '/files/bin' }) as any
    expect(Object.keys(doc.paths)).toContain('/files/api/config')
    expect(Object.keys(doc.paths)).toContain('/files/bin/attach/{action}/{id}')
  })

  it('the answer checker refuses an answer its schema refuses', () => {
    const checker = answerChecker(openApiDocument())
    expect(() => checker.check('GET', '/api/storage/attach/demo/1/default/_count', 200, 3)).not.toThrow()
    expect(() => checker.check('GET', '/api/storage/attach/demo/1/default/_count', 200, '3')).toThrow(/refuses/)
    expect(() => checker.check('GET', '/api/storage/config', 400, { code: 'bad-request', message: 'x' })).not.toThrow()
    expect(() => checker.check('GET', '/api/storage/config', 400, { message: 'x' })).toThrow(/refuses/)
    expect(() => checker.check('GET', '/api/storage/attach/demo/1', 200, { refDomain: 'demo', default: [{ id: 1 }] })).toThrow(/refuses/)
  })
})
