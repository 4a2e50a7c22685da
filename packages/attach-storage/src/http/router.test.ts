import * as v from 'valibot'
import { describe, expect, it } from 'vitest'
import { AttachStorageError } from '../errors.js'
import { ASSET_ROUTES, API_ROUTES } from './handler.js'
import { defineRoute, Router, segmentsBelow, type RouteEnv } from './router.js'

const echo = (name: string) => async (input: unknown) => Response.json({ name, input })

const routes = [
  defineRoute({
    method: 'GET',
    path: 'a/:id',
    params: v.object({ id: v.pipe(v.string(), v.regex(/^\d+$/), v.transform(Number)) }),
    handle: echo('by-id'),
  }),
  defineRoute({ method: 'GET', path: 'a/:name', handle: echo('by-name') }),
  defineRoute({ method: 'GET', path: 'b/:x/:y?', handle: echo('optional') }),
  defineRoute({ method: 'GET', path: 'c/*rest', handle: echo('rest') }),
  defineRoute({ method: 'PUT', path: 'd/', handle: echo('trailing-slash') }),
  defineRoute({
    method: 'POST',
    path: 'e',
    query: v.object({ n: v.pipe(v.string(), v.regex(/^\d$/, 'must be one digit')) }),
    body: v.object({ ids: v.array(v.number(), 'must be an array of numbers') }),
    handle: echo('validated'),
  }),
]
const router = new Router(routes)

const env = (request: Request): RouteEnv => ({
  request,
  url: new URL(request.url),
  access: { user: null, request },
  storage: undefined as never,
  ctx: undefined as never,
})

async function call(method: string, path: string, init: RequestInit = {}, headAsGet = false) {
  const request = new Request(`http://x/${path}`, { method, ...init })
  const found = router.match(method, path.split('?')[0]!.split('/'), headAsGet)
  if (!found) return undefined
  return (await (await router.run(found, new URL(request.url), env(request))).json()) as {
    name: string
    input: { params: unknown; query: unknown; body: unknown }
  }
}

describe('the router', () => {
  it('parses path parameters with the route schema, and a path the schema refuses goes on to the next route', async () => {
    expect(await call('GET', 'a/42')).toMatchObject({ name: 'by-id', input: { params: { id: 42 } } })
    expect(await call('GET', 'a/x42')).toMatchObject({ name: 'by-name', input: { params: { name: 'x42' } } })
  })

  it('matches optional last segments, rest segments and trailing slashes, and nothing of another shape', async () => {
    expect(await call('GET', 'b/1')).toMatchObject({ name: 'optional', input: { params: { x: '1' } } })
    expect(await call('GET', 'b/1/2')).toMatchObject({ name: 'optional', input: { params: { x: '1', y: '2' } } })
    expect(await call('GET', 'b/1/2/3')).toBeUndefined()
    expect(await call('GET', 'c/1/2/3')).toMatchObject({ name: 'rest', input: { params: { rest: ['1', '2', '3'] } } })
    expect(await call('PUT', 'd/')).toMatchObject({ name: 'trailing-slash' })
    expect(await call('PUT', 'd')).toBeUndefined()
    expect(await call('GET', 'a')).toBeUndefined()
  })

  it('matches the method, and serves HEAD through GET routes only where asked', async () => {
    expect(await call('POST', 'a/1')).toBeUndefined()
    expect(await call('DELETE', 'a/1')).toBeUndefined()
    expect(await call('HEAD', 'a/1')).toBeUndefined()
    expect(router.match('HEAD', ['a', '1'], true)?.route).toBe(routes[0])
  })

  it('hands the handler the query and the JSON body as their schemas output them', async () => {
    const res = await call('POST', 'e?n=7&n=8&extra=1', {
      body: JSON.stringify({ ids: [1, 2], other: true }),
      headers: { 'content-type': 'application/json' },
    })
    expect(res).toEqual({ name: 'validated', input: { params: {}, query: { n: '7' }, body: { ids: [1, 2] } } })
  })

  it('answers 400 bad-request naming the field when a query or body fails its schema', async () => {
    const refused = async (path: string, body: string) => {
      try {
        await call('POST', path, { body, headers: { 'content-type': 'application/json' } })
      } catch (err) {
        expect(err).toBeInstanceOf(AttachStorageError)
        const e = err as AttachStorageError
        expect(e.status).toBe(400)
        expect(e.code).toBe('bad-request')
        return e.message
      }
      throw new Error('not refused')
    }
    expect(await refused('e?n=77', '{"ids":[]}')).toBe('query.n: must be one digit')
    expect(await refused('e?n=7', '{"ids":"x"}')).toBe('body.ids: must be an array of numbers')
    expect(await refused('e?n=7', '{"ids":[1,')).toMatch(/not valid JSON/)
  })

  it('decodes path segments below a prefix, and refuses bad percent-encoding with 400', () => {
    expect(segmentsBelow('/api/attach/a%20b', '/api')).toEqual(['attach', 'a b'])
    expect(segmentsBelow('/api', '/api')).toEqual([])
    expect(segmentsBelow('/apix/attach', '/api')).toBeUndefined()
    expect(() => segmentsBelow('/api/%E0%A4%A', '/api')).toThrow(/percent-encoding/)
  })

  it('declares every route of both groups once, each with a method and a path', () => {
    const keys = [...API_ROUTES, ...ASSET_ROUTES].map((r) => `${r.method} ${r.path}`)
    expect(new Set(keys).size).toBe(keys.length)
    expect(keys.length).toBeGreaterThanOrEqual(17)
  })
})
