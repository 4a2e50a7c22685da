/**
 * The Node bridge through real `node:http` servers and raw sockets.
 */
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { makeKit, token, type Kit } from '../http/test-kit.js'
import { createNodeHandler, handleNodeRequest, toWebRequest, writeWebResponse } from './index.js'

type Listener = (req: IncomingMessage, res: ServerResponse) => void

const servers: Server[] = []
async function listen(listener: Listener): Promise<{ base: string; port: number }> {
  const server = createServer(listener)
  servers.push(server)
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
  const port = (server.address() as AddressInfo).port
  return { base: `http://127.0.0.1:${port}`, port }
}
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.closeAllConnections()
    await new Promise((r) => s.close(r))
  }
})

const wait = (ms: number) => new Promise((r) => setTimeout(r, ms))
async function until(check: () => Promise<boolean> | boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms
  while (!(await check())) {
    if (Date.now() > end) throw new Error('timed out')
    await wait(20)
  }
}
const open = (port: number) =>
  new Promise<Socket>((resolve, reject) => {
    const s = connect(port, '127.0.0.1', () => resolve(s))
    s.once('error', reject)
  })

describe('toWebRequest / writeWebResponse', () => {
  it('round-trips method, URL, headers, body, status, status text and several Set-Cookie headers', async () => {
    const { base } = await listen(
      createNodeHandler(async (request) => {
        const headers = new Headers({ 'x-echo-method': request.method, 'x-echo-url': request.url, 'x-echo-multi': request.headers.get('x-multi') ?? '' })
        headers.append('set-cookie', 'a=1; Path=/')
        headers.append('set-cookie', 'b=2; HttpOnly')
        return new Response(`got:${await request.text()}`, { status: 201, statusText: 'Made It', headers })
      }),
    )
    const res = await new Promise<IncomingMessage & { text: string }>((resolve, reject) => {
      const req = httpRequest(`${base}/p/q?x=1&y=%20`, { method: 'PUT', headers: { 'x-multi': ['one', 'two'] } }, (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (d) => (text += d))
        res.on('end', () => resolve(Object.assign(res, { text })))
      })
      req.on('error', reject)
      req.end('payload')
    })
    expect(res.statusCode).toBe(201)
    expect(res.statusMessage).toBe('Made It')
    expect(res.headers['set-cookie']).toEqual(['a=1; Path=/', 'b=2; HttpOnly'])
    expect(res.headers['x-echo-method']).toBe('PUT')
    expect(res.headers['x-echo-url']).toBe(`${base}/p/q?x=1&y=%20`)
    expect(res.headers['x-echo-multi']).toBe('one, two')
    expect(res.text).toBe('got:payload')
  })

  it('builds the URL from baseUrl, from forwarded headers only when trusted, and never from the target', async () => {
    const urls: string[] = []
    const echo = (options: Parameters<typeof createNodeHandler>[1]) =>
      listen(createNodeHandler(async (r) => (urls.push(r.url), new Response(null, { status: 204 })), options))
    const headers = { 'x-forwarded-proto': 'https', 'x-forwarded-host': 'files.example.com' }
    const plain = await echo({})
    const trusted = await echo({ trustProxy: true })
    const based = await echo({ baseUrl: 'https://cdn.example.org/ignored/path' })
    await fetch(`${plain.base}/a`, { headers })
    await fetch(`${trusted.base}/a?b=c`, { headers })
    await fetch(`${based.base}/a`, { headers })
    // A request target starting with // stays a path on our host.
    await new Promise<void>((resolve, reject) => {
      httpRequest({ host: '127.0.0.1', port: plain.port, path: '//evil.example/x', headers: { host: 'good.example' } }, (res) => {
        res.resume()
        res.on('end', resolve)
      })
        .on('error', reject)
        .end()
    })
    expect(urls).toEqual([
      `${plain.base}/a`,
      'https://files.example.com/a?b=c',
      'https://cdn.example.org/a',
      'http://good.example//evil.example/x',
    ])
  })

  it('re-encodes a body a host parser already consumed (req.body), JSON and urlencoded', async () => {
    const { base } = await listen((req, res) => {
      let raw = ''
      req.setEncoding('utf8')
      req.on('data', (d) => (raw += d))
      req.on('end', () => {
        const ct = req.headers['content-type'] ?? ''
        Object.assign(req, { _body: true, body: ct.includes('json') ? JSON.parse(raw) : Object.fromEntries(new URLSearchParams(raw)) })
        void handleNodeRequest(async (r) => new Response(`${r.headers.get('content-length')}|${await r.text()}`), req, res)
      })
    })
    const json = await fetch(base, { method: 'POST', body: JSON.stringify({ a: [1, 'é'] }), headers: { 'content-type': 'application/json' } })
    expect(await json.text()).toBe(`${Buffer.byteLength('{"a":[1,"é"]}')}|{"a":[1,"é"]}`)
    const form = await fetch(base, { method: 'POST', body: new URLSearchParams({ x: '1 2', y: 'z' }) })
    expect(await form.text()).toBe('9|x=1+2&y=z')
  })

  it('answers HEAD without a body and cancels the body stream', async () => {
    let cancelled = false
    const { base } = await listen(
      createNodeHandler(
        async () =>
          new Response(new ReadableStream({ pull: (c) => c.enqueue(new Uint8Array(10)), cancel: () => void (cancelled = true) }), {
            headers: { 'content-length': '10' },
          }),
      ),
    )
    const res = await fetch(base, { method: 'HEAD' })
    expect(res.status).toBe(200)
    expect(res.headers.get('content-length')).toBe('10')
    expect(cancelled).toBe(true)
  })

  it('respects back-pressure: a client that stops reading stops the body being pulled, and leaving cancels it', async () => {
    const chunk = new Uint8Array(256 * 1024)
    const total = 256 * 1024 * 1024
    let pulled = 0
    let cancelled = false
    let response: ServerResponse | undefined
    const { port } = await listen((req, res) => {
      response = res
      void handleNodeRequest(
        async () =>
          new Response(
            new ReadableStream<Uint8Array>({
              pull(c) {
                pulled += chunk.length
                c.enqueue(chunk)
                if (pulled >= total) c.close()
              },
              cancel() {
                cancelled = true
              },
            }),
          ),
        req,
        res,
      )
    })
    const socket = await open(port)
    let received = 0
    let stall = true
    socket.on('data', (d: Buffer) => {
      received += d.length
      // Reads the first megabytes, then stalls like a slow reader.
      if (stall && received > 4 * 1024 * 1024) socket.pause()
    })
    socket.write('GET / HTTP/1.1\r\nhost: x\r\n\r\n')
    await until(() => received > 4 * 1024 * 1024)
    await wait(300)
    const stalledAt = pulled
    await wait(300)
    // Nothing more is pulled while the client does not read, and only socket buffers' worth is ahead.
    expect(pulled).toBe(stalledAt)
    expect(pulled - received).toBeLessThan(16 * 1024 * 1024)
    expect(response!.writableLength).toBeLessThanOrEqual(response!.writableHighWaterMark + chunk.length)
    // Reading again resumes the flow.
    stall = false
    socket.resume()
    await until(() => pulled > stalledAt + 8 * 1024 * 1024)
    socket.destroy()
    await until(() => cancelled)
    expect(pulled).toBeLessThan(total)
  })
})

describe('client aborts through the attach handler', () => {
  let kit: Kit
  beforeAll(async () => {
    kit = await makeKit('sqlite')
  })
  afterAll(async () => {
    await kit?.cleanup()
  })

  it('a client that disconnects mid-upload aborts the request and leaves nothing in the temporary area', async () => {
    let done: Promise<void> | undefined
    let seen: Request | undefined
    const { port } = await listen((req, res) => {
      done = handleNodeRequest((r) => ((seen = r), kit.handler.fetch(r)), req, res)
    })
    const boundary = 'xBOUNDARYx'
    const head =
      `--${boundary}\r\nContent-Disposition: form-data; name="refDomain"\r\n\r\ndemo\r\n` +
      `--${boundary}\r\nContent-Disposition: form-data; name="file"; filename="half.bin"\r\nContent-Type: application/octet-stream\r\n\r\n`
    const fileSize = 8 * 1024 * 1024
    const socket = await open(port)
    socket.on('error', () => {})
    socket.write(
      `POST /api/storage/attach/tmp HTTP/1.1\r\nhost: x\r\nauthorization: Bearer ${await token('7')}\r\n` +
        `content-type: multipart/form-data; boundary=${boundary}\r\ncontent-length: ${Buffer.byteLength(head) + fileSize + 40}\r\n\r\n`,
    )
    socket.write(head)
    socket.write(Buffer.alloc(fileSize / 2, 7))
    // The file is being written to tmp/ when the client goes away.
    await until(async () => (await kit.files(kit.tmpDir)).length > 0)
    socket.destroy()
    await until(() => done !== undefined)
    await done
    expect(seen!.signal.aborted).toBe(true)
    await until(async () => (await kit.files(kit.tmpDir)).length === 0, 5_000)
    expect(await kit.files(kit.tmpDir)).toEqual([])
    expect(await kit.files(kit.baseDir)).toEqual([])
  })

  it('an upload through the bridge lands, and the answer comes back', async () => {
    const { base } = await listen(createNodeHandler(kit.handler.fetch))
    const fd = new FormData()
    fd.set('refDomain', 'demo')
    fd.set('file', new Blob(['bridged bytes']), 'b.txt')
    const res = await fetch(`${base}/api/storage/attach/tmp`, { method: 'POST', body: fd, headers: { authorization: `Bearer ${await token('7')}` } })
    expect(res.status).toBe(200)
    const item = (await res.json()).files[0]
    const view = await fetch(`${base}/assets/storage/attach-temp/view/demo/default/${item.name}`)
    expect(await view.text()).toBe('bridged bytes')
  })
})

describe('toWebRequest without a response', () => {
  it('aborts its signal when the request is torn down before it completed', async () => {
    let seen: Request | undefined
    const { port } = await listen((req) => {
      seen = toWebRequest(req)
    })
    const socket = await open(port)
    socket.write('POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\nabc')
    await until(() => seen !== undefined)
    socket.destroy()
    await until(() => seen!.signal.aborted)
    await expect(seen!.text()).rejects.toThrow()
  })

  it('writeWebResponse cuts the connection when the body fails after the status line', async () => {
    const { base } = await listen((_req, res) => {
      let n = 0
      void writeWebResponse(
        res,
        new Response(
          new ReadableStream({
            pull(c) {
              if (n++ === 0) c.enqueue(new TextEncoder().encode('partial'))
              else c.error(new Error('store went away'))
            },
          }),
        ),
      )
    })
    // Either the head never made it or the body is cut short: never a complete-looking answer.
    await expect(fetch(base).then((r) => r.text())).rejects.toThrow()
  })
})
