/**
 * `serveViewsFirst` in isolation: the CORS headers it writes for each kind of settings, and its refusal
 * of a server no framework listens on yet. Its answers against each framework's are compared in
 * examples/adapters-test/test/views-first.test.ts.
 */
import { createServer } from 'node:http'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { type Kit, makeKit } from '../testing/handler-kit.js'
import { corsWriter, serveViewsFirst } from './views-first.js'

describe('the CORS headers of views answered first', () => {
  it('echoes an allowed origin, says the answer varies by it, and allows no other', () => {
    const write = corsWriter({ origins: ['https://a.example', 'https://b.example'], exposeHeaders: ['ETag', 'Content-Range'] })
    expect(write('https://b.example')).toEqual([
      ['access-control-allow-origin', 'https://b.example'],
      ['vary', 'Origin'],
      ['access-control-expose-headers', 'ETag,Content-Range'],
    ])
    expect(write('https://evil.example')).toEqual([
      ['vary', 'Origin'],
      ['access-control-expose-headers', 'ETag,Content-Range'],
    ])
    expect(write(undefined)).toEqual([
      ['vary', 'Origin'],
      ['access-control-expose-headers', 'ETag,Content-Range'],
    ])
    // Origins compare exactly, as the framework middleware compare them.
    expect(write('https://A.example')).toEqual([
      ['vary', 'Origin'],
      ['access-control-expose-headers', 'ETag,Content-Range'],
    ])
    expect(write('null')).toEqual([
      ['vary', 'Origin'],
      ['access-control-expose-headers', 'ETag,Content-Range'],
    ])
  })

  it('answers * for any origin, and echoes the origin when credentials are allowed', () => {
    expect(corsWriter({ origins: '*' })('https://a.example')).toEqual([['access-control-allow-origin', '*']])
    expect(corsWriter({ origins: '*' })(undefined)).toEqual([['access-control-allow-origin', '*']])
    const withCredentials = corsWriter({ origins: '*', credentials: true })
    expect(withCredentials('https://a.example')).toEqual([
      ['access-control-allow-origin', 'https://a.example'],
      ['access-control-allow-credentials', 'true'],
      ['vary', 'Origin'],
    ])
    expect(withCredentials(undefined)).toEqual([['vary', 'Origin']])
    expect(corsWriter({ origins: ['https://a.example'], credentials: true })('https://a.example')).toEqual([
      ['access-control-allow-origin', 'https://a.example'],
      ['access-control-allow-credentials', 'true'],
      ['vary', 'Origin'],
    ])
  })
})

describe('serveViewsFirst', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite')
  })
  afterAll(async () => {
    await kit?.cleanup()
  })

  it('refuses a server no framework listens on yet, and changes nothing', () => {
    const server = createServer()
    expect(() => serveViewsFirst(server, kit.storage)).toThrow(/no request listener yet/)
    expect(server.listenerCount('request')).toBe(0)
  })

  it('puts the framework back as it was when undone', () => {
    const framework = () => {}
    const server = createServer(framework)
    const undo = serveViewsFirst(server, kit.storage)
    expect(server.listeners('request')).not.toContain(framework)
    undo()
    expect(server.listeners('request')).toEqual([framework])
  })
})
