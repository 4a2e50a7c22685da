/**
 * Views by id answered at the `node:http` level before the framework (`serveViewsFirst`) answer exactly
 * what the framework answers: on each reference app (Hono, Express, Fastify) with CORS on, every request
 * kind of the fast path's own test (node/fast-views.test.ts) is sent through the framework, then again
 * with the views answered first, and status, headers (but Date) and body must be the same, the CORS
 * headers of the app's own middleware included; and the framework must not see the second round.
 */
import { mkdtemp, readdir, rm } from 'node:fs/promises'
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { serve } from '@hono/node-server'
import { SignJWT } from 'jose'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import type { Reference } from '@attach-storage/example-reference'
import { serveViewsFirst, type ViewsFirstOptions } from 'attach-storage/node'
import { type ViewKindsInput, viewKinds } from '../../../packages/attach-storage/src/testing/view-kinds.js'
import * as honoApp from '../../hono-app/src/app.js'
import * as expressApp from '../../express-app/src/app.js'
import * as fastifyApp from '../../fastify-app/src/app.js'

const SECRET = 'views-first-secret-0123456789abc'
const ORIGIN = 'https://app.example.com'
const OTHER = 'https://elsewhere.example.com'
const ASSETS = '/assets/storage'
const quiet = { info() {}, warn() {}, error() {} }
const sign = (sub: string) =>
  new SignJWT({}).setProtectedHeader({ alg: 'HS256' }).setSubject(sub).setExpirationTime('1h').sign(new TextEncoder().encode(SECRET))

/** Each app on port 0, its views through the framework (ATTACH_VIEWS_FIRST=off). */
const APPS = {
  async hono(env: Record<string, string>) {
    const ref = await honoApp.createReferenceApp(env, quiet)
    const server = serve({ fetch: ref.app.fetch, port: 0, hostname: '127.0.0.1' }) as Server
    return { ref: ref as Reference, server, stop: () => close(server) }
  },
  async express(env: Record<string, string>) {
    const ref = await expressApp.createReferenceApp(env, quiet)
    const server = createServer(ref.app).listen(0, '127.0.0.1')
    return { ref: ref as Reference, server, stop: () => close(server) }
  },
  async fastify(env: Record<string, string>) {
    const ref = await fastifyApp.createReferenceApp(env, quiet)
    await ref.app.listen({ port: 0, host: '127.0.0.1' })
    return {
      ref: ref as Reference,
      server: ref.app.server,
      stop: async () => {
        const closing = ref.app.close()
        ref.app.server.closeAllConnections()
        await closing
      },
    }
  },
}

function close(server: Server): Promise<void> {
  return new Promise((r) => {
    server.closeAllConnections()
    server.close(() => r())
  })
}

/** One answer as compared: status, headers but those of the connection, body. */
interface Answer {
  status: number
  headers: Array<[string, string]>
  body: string
}

async function answer(url: string, init: RequestInit = {}): Promise<Answer> {
  const res = await fetch(url, { ...init, redirect: 'manual' })
  const headers = [...res.headers]
    .filter(([name]) => name !== 'date' && name !== 'keep-alive' && name !== 'connection')
    // @fastify/cors joins the exposed names with ', ', the others with ','; a browser reads both alike.
    .map(([name, value]): [string, string] =>
      name === 'access-control-expose-headers'
        ? [
            name,
            value
              .split(',')
              .map((s) => s.trim())
              .join(','),
          ]
        : [name, value],
    )
  return { status: res.status, headers, body: Buffer.from(await res.arrayBuffer()).toString('base64') }
}

describe.each(Object.keys(APPS) as Array<keyof typeof APPS>)('views answered before %s', (name) => {
  let ref: Reference
  let server: Server
  let stop: () => Promise<void>
  let dataDir: string
  let base: string
  let frameworkSaw = 0
  const ids: Record<string, number> = {}
  let bearer: Record<string, string>
  let signedUrl: string

  beforeAll(async () => {
    dataDir = await mkdtemp(join(tmpdir(), `attach-views-first-${name}-`))
    ;({ ref, server, stop } = await APPS[name]({
      ATTACH_DATA_DIR: dataDir,
      ATTACH_JWT_SECRET: SECRET,
      ATTACH_CORS_ORIGINS: ORIGIN,
      ATTACH_VIEWS_FIRST: 'off',
    }))
    if (!server.listening) await new Promise((r) => server.once('listening', r))
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    // Every request the framework is handed is counted.
    const framework = server.listeners('request') as Array<(req: IncomingMessage, res: ServerResponse) => void>
    server.removeAllListeners('request')
    server.on('request', (req: IncomingMessage, res: ServerResponse) => {
      frameworkSaw++
      for (const l of framework) l.call(server, req, res)
    })
    bearer = { authorization: `Bearer ${await sign('7')}` }
    const save = async (blob: Blob, file: string, category = 'default'): Promise<number> => {
      const fd = new FormData()
      fd.set('refDomain', 'demo')
      fd.set('refCategory', category)
      fd.set('file', blob, file)
      const up = await fetch(`${base}/api/storage/attach/tmp`, { method: 'POST', body: fd, headers: bearer })
      const item = (await up.json()).files[0]
      const res = await fetch(`${base}/api/storage/attach/demo/1`, {
        method: 'POST',
        headers: { ...bearer, 'content-type': 'application/json' },
        body: JSON.stringify({ [category]: [{ savedName: item.name, displayName: file }] }),
      })
      expect(res.status).toBe(200)
      const list = (await res.json()).attachList
      return list[list.length - 1].id
    }
    ids.small = await save(new Blob(['hello world']), 'hello.txt')
    ids.large = await save(new Blob([new Uint8Array(600 * 1024).fill(7)]), 'big.bin')
    ids.html = await save(new Blob(['<html><script>alert(1)</script></html>'], { type: 'text/html' }), 'page.html')
    const png = await sharp({ create: { width: 40, height: 30, channels: 3, background: '#08f' } })
      .png()
      .toBuffer()
    ids.image = await save(new Blob([new Uint8Array(png)]), 'photo.png', 'image')
    ids.private = await save(new Blob(['secret']), 'secret.txt', 'private')
    const direct = await fetch(`${base}/api/storage/direct-url`, {
      method: 'POST',
      headers: { ...bearer, 'content-type': 'application/json' },
      body: JSON.stringify({ refDomain: 'demo', refKey: '1', refCategory: 'private' }),
    })
    signedUrl = (await direct.json()) as string
    expect(signedUrl).toMatch(new RegExp(`^${ASSETS}/attach/view/${ids.private}\\?exp=`))
  })
  afterAll(async () => {
    await stop?.()
    await ref?.close()
    if (dataDir) await rm(dataDir, { recursive: true, force: true })
  })

  /** The request kinds: the fast path's own 25, and the CORS ones. */
  async function kinds(): Promise<Array<[string, RequestInit?]>> {
    const first = await fetch(`${base}${ASSETS}/attach/view/${ids.small}`)
    const etag = first.headers.get('etag')!
    const lastModified = first.headers.get('last-modified')!
    await first.arrayBuffer()
    const own = { authorization: bearer.authorization! }
    const kinds = viewKinds({
      ids: ids as ViewKindsInput['ids'],
      etag,
      lastModified,
      owner: own,
      ownerToken: await sign('7'),
      otherToken: await sign('8'),
      signedPath: signedUrl.replace(ASSETS, ''),
    })
    // A browser script's reads, from the allowed origin and from another one.
    for (const origin of [ORIGIN, OTHER]) {
      kinds.push(
        [`/attach/view/${ids.small}`, { headers: { origin } }],
        [`/attach/view/${ids.small}`, { method: 'HEAD', headers: { origin } }],
        [`/attach/view/${ids.image}?w=20&format=auto`, { headers: { origin, accept: 'image/webp,*/*' } }],
        [`/attach/view/${ids.private}`, { headers: { origin, ...own } }],
        [`/attach/view/${ids.private}`, { headers: { origin } }],
        [signedUrl.replace(ASSETS, ''), { headers: { origin } }],
        ['/attach/view/999999', { headers: { origin } }],
      )
    }
    return kinds
  }

  /**
   * What the views answered first must answer: the framework's answer, but under Hono with `Vary: Origin`
   * as well. hono/cors adds that header once the route has answered, too late for a view written on
   * Node's response (the adapter's own fast path), so through Hono these cacheable answers never said
   * that they depend on the origin; answered first, they do, as under Express and Fastify.
   */
  const expected = (a: Answer): Answer => {
    if (name !== 'hono') return a
    const vary = a.headers.find(([n]) => n === 'vary')
    const headers: Array<[string, string]> = vary
      ? a.headers.map(([n, v]) => (n === 'vary' ? [n, `Origin, ${v}`] : [n, v]))
      : [...a.headers, ['vary', 'Origin']]
    return { ...a, headers: headers.sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0)) }
  }

  const label = (path: string, init?: RequestInit) => `${init?.method ?? 'GET'} ${path} ${JSON.stringify(init?.headers ?? {})}`

  it('answers every kind as the framework does, and the framework sees none of them', async () => {
    const cases = await kinds()
    expect(cases).toHaveLength(39)
    const before: Answer[] = []
    for (const [path, init] of cases) before.push(await answer(base + ASSETS + path, init))
    const undo = serveViewsFirst(server, ref.storage, { cors: { origins: ref.cors!.origins, exposeHeaders: ref.cors!.exposeHeaders } })
    try {
      const saw = frameworkSaw
      for (const [i, [path, init]] of cases.entries()) {
        expect(await answer(base + ASSETS + path, init), label(path, init)).toEqual(expected(before[i]!))
      }
      expect(frameworkSaw).toBe(saw)
      // Anything else still reaches the framework: a preflight, a list, a view by reference.
      const preflight = await fetch(`${base}${ASSETS}/attach/view/${ids.small}`, {
        method: 'OPTIONS',
        headers: { origin: ORIGIN, 'access-control-request-method': 'GET' },
      })
      expect([preflight.status < 300, preflight.headers.get('access-control-allow-origin')]).toEqual([true, ORIGIN])
      await preflight.arrayBuffer()
      const list = await fetch(`${base}/api/storage/attach/demo/1`, { headers: bearer })
      expect(list.status).toBe(200)
      await list.arrayBuffer()
      expect(frameworkSaw).toBe(saw + 2)
    } finally {
      undo()
    }
    // Undone, the framework answers views again.
    const saw = frameworkSaw
    await (await fetch(`${base}${ASSETS}/attach/view/${ids.small}`)).arrayBuffer()
    expect(frameworkSaw).toBe(saw + 1)
  })

  it('leaves a view with Origin to the framework when no CORS settings are given', async () => {
    const options: ViewsFirstOptions = {}
    const undo = serveViewsFirst(server, ref.storage, options)
    try {
      const saw = frameworkSaw
      const plain = await answer(`${base}${ASSETS}/attach/view/${ids.small}`)
      expect(frameworkSaw).toBe(saw)
      expect(plain.status).toBe(200)
      const cross = await fetch(`${base}${ASSETS}/attach/view/${ids.small}`, { headers: { origin: ORIGIN } })
      expect([cross.status, cross.headers.get('access-control-allow-origin'), await cross.text()]).toEqual([200, ORIGIN, 'hello world'])
      expect(frameworkSaw).toBe(saw + 1)
    } finally {
      undo()
    }
  })

  it('sends no CORS headers and serves a view with Origin itself with cors: false', async () => {
    const undo = serveViewsFirst(server, ref.storage, { cors: false })
    try {
      const saw = frameworkSaw
      const cross = await fetch(`${base}${ASSETS}/attach/view/${ids.small}`, { headers: { origin: ORIGIN } })
      expect([cross.status, cross.headers.get('access-control-allow-origin'), await cross.text()]).toEqual([200, null, 'hello world'])
      expect(frameworkSaw).toBe(saw)
    } finally {
      undo()
    }
  })
})

describe('ATTACH_VIEWS_FIRST', () => {
  it('refuses any value but on or off at start, before anything opens', async () => {
    const dataDir = await mkdtemp(join(tmpdir(), 'attach-views-first-env-'))
    try {
      await expect(
        honoApp.createReferenceApp({ ATTACH_DATA_DIR: dataDir, ATTACH_JWT_SECRET: SECRET, ATTACH_VIEWS_FIRST: 'of' }, quiet),
      ).rejects.toThrow('ATTACH_VIEWS_FIRST must be on or off, not "of"')
      expect(await readdir(dataDir)).toEqual([])
    } finally {
      await rm(dataDir, { recursive: true, force: true })
    }
  })
})
