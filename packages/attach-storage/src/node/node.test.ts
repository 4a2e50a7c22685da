/**
 * The Node bridge through real `node:http` servers and raw sockets.
 */
import { createHash } from 'node:crypto'
import { createServer, request as httpRequest, type IncomingMessage, type Server, type ServerResponse } from 'node:http'
import { connect, type AddressInfo, type Socket } from 'node:net'
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest'
import { nodeRequestBodyOf } from '../http/node-body.js'
import { makeKit, token, type Kit } from '../testing/handler-kit.js'
import { floodOfEarlyAnswers } from '../../../../test/early-answers.js'
import { AttachStorageError, tooLarge } from '../errors.js'
import {
  DRAIN_IDLE_MS,
  DRAIN_LIMIT,
  answerClientError,
  deferContinue,
  createNodeHandler,
  frameworkError,
  handleNodeRequest,
  toWebRequest,
  writeWebResponse,
} from './index.js'

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
        const headers = new Headers({
          'x-echo-method': request.method,
          'x-echo-url': request.url,
          'x-echo-multi': request.headers.get('x-multi') ?? '',
        })
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
      listen(
        createNodeHandler(async (r) => {
          urls.push(r.url)
          return new Response(null, { status: 204 })
        }, options),
      )
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
    const json = await fetch(base, {
      method: 'POST',
      body: JSON.stringify({ a: [1, 'é'] }),
      headers: { 'content-type': 'application/json' },
    })
    expect(await json.text()).toBe(`${Buffer.byteLength('{"a":[1,"é"]}')}|{"a":[1,"é"]}`)
    const form = await fetch(base, { method: 'POST', body: new URLSearchParams({ x: '1 2', y: 'z' }) })
    expect(await form.text()).toBe('9|x=1+2&y=z')
  })

  it('answers HEAD without a body and cancels the body stream', async () => {
    let cancelled = false
    const { base } = await listen(
      createNodeHandler(
        async () =>
          new Response(
            new ReadableStream({
              pull: (c) => c.enqueue(new Uint8Array(10)),
              cancel: () => {
                cancelled = true
              },
            }),
            {
              headers: { 'content-length': '10' },
            },
          ),
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
      done = handleNodeRequest(
        (r) => {
          seen = r
          return kit.handler.fetch(r)
        },
        req,
        res,
      )
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
    const res = await fetch(`${base}/api/storage/attach/tmp`, {
      method: 'POST',
      body: fd,
      headers: { authorization: `Bearer ${await token('7')}` },
    })
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

describe("the request body as Node's own stream", () => {
  const big = Buffer.alloc(3 * 1024 * 1024 + 17, 7)
  const post = (base: string, body: Buffer) =>
    fetch(base, { method: 'POST', body: new Uint8Array(body) }).then(async (r) => [r.status, await r.text()])

  it('is offered once, while nothing of the Web body was read, with every byte; the Web body then fails', async () => {
    const { base } = await listen(
      createNodeHandler(async (request) => {
        const node = nodeRequestBodyOf(request)
        if (!node) return new Response('no stream', { status: 500 })
        const again = nodeRequestBodyOf(request)
        let size = 0
        const hash = createHash('sha256')
        for await (const chunk of node) {
          size += (chunk as Buffer).length
          hash.update(chunk as Buffer)
        }
        const web = await request.text().then(
          () => 'read',
          () => 'failed',
        )
        return new Response(`${size} ${hash.digest('hex')} ${again === undefined} ${web}`)
      }),
    )
    expect(await post(base, big)).toEqual([200, `${big.length} ${createHash('sha256').update(big).digest('hex')} true failed`])
  })

  it('is not offered once the Web body was started, which then reads to the end', async () => {
    const { base } = await listen(
      createNodeHandler(async (request) => {
        const reader = request.body!.getReader()
        const first = await reader.read()
        let size = first.value?.byteLength ?? 0
        const node = nodeRequestBodyOf(request)
        for (;;) {
          const { done, value } = await reader.read()
          if (done) break
          size += value.byteLength
        }
        return new Response(`${size} ${node === undefined}`)
      }),
    )
    expect(await post(base, big)).toEqual([200, `${big.length} true`])
  })

  it('is not offered for a body a host parser already read, nor for GET', async () => {
    const seen: unknown[] = []
    const { base } = await listen((req, res) => {
      const parsed = req.method === 'POST'
      if (parsed) {
        ;(req as { body?: unknown }).body = { a: 1 }
        req.resume()
        req.on('end', () => {
          seen.push(nodeRequestBodyOf(toWebRequest(req, res)))
          res.end('ok')
        })
      } else {
        seen.push(nodeRequestBodyOf(toWebRequest(req, res)))
        res.end('ok')
      }
    })
    await fetch(base)
    await fetch(base, { method: 'POST', body: '{"a":1}', headers: { 'content-type': 'application/json' } })
    expect(seen).toEqual([undefined, undefined])
  })
})

/** Everything the server sends on one raw connection until it closes (or `ms` passes), and whether it closed. */
async function exchange(port: number, parts: Array<string | Buffer>, ms = 10_000): Promise<{ text: string; closed: boolean }> {
  const socket = await open(port)
  let text = ''
  let closed = false
  socket.on('data', (d) => (text += d.toString('latin1')))
  socket.on('error', () => {})
  socket.on('close', () => (closed = true))
  for (const part of parts) socket.write(part)
  await until(() => closed || (text.match(/HTTP\/1\.1 [2-5]\d\d/g) ?? []).length >= 2, ms).catch(() => undefined)
  socket.destroy()
  return { text, closed }
}
const statuses = (text: string) => [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1]))

describe('an answer sent before the request body was read', () => {
  // A handler that refuses before reading, the way an authentication check does.
  const refuse = async () => new AttachStorageError('unauthorized', 'no', { status: 401 }).toResponse()
  const next = 'GET /next HTTP/1.1\r\nhost: x\r\n\r\n'
  const post = (size: number) => [
    `POST /p HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: ${size}\r\n\r\n`,
    Buffer.alloc(size, 32),
  ]

  it('discards a large unread rest (5 MiB) and keeps the connection for the next request, without Connection: close', async () => {
    const { port } = await listen(createNodeHandler(refuse))
    const { text, closed } = await exchange(port, [...post(5 * 1024 * 1024), next])
    expect(statuses(text)).toEqual([401, 401])
    expect(text).not.toMatch(/\r\nconnection: close\r\n/i)
    expect(closed).toBe(false)
  })

  it('drains a small unread rest and keeps the connection for the next request', async () => {
    const { port } = await listen(createNodeHandler(refuse))
    const { text, closed } = await exchange(port, [...post(1000), next])
    expect(statuses(text)).toEqual([401, 401])
    expect(closed).toBe(false)
  })

  it("40 clients of Node's http client sending 5 MiB each all read the early 413, none a reset", async () => {
    const { port } = await listen(createNodeHandler(async () => tooLarge('JSON bodies are limited to 2097152 bytes').toResponse()))
    expect(await floodOfEarlyAnswers(port, '/p')).toEqual({ '413 too-large': 40 })
  })

  it('lingers after an answer that closes the connection (the client sent Connection: close): the body is read, then closed', async () => {
    const { port } = await listen(createNodeHandler(refuse))
    expect(await floodOfEarlyAnswers(port, '/p', { agent: false })).toEqual({ '401 unauthorized': 40 })
    const { text, closed } = await exchange(port, [
      String(post(2 * 1024 * 1024)[0]).replace('\r\n\r\n', '\r\nconnection: close\r\n\r\n'),
      post(2 * 1024 * 1024)[1]!,
    ])
    expect([statuses(text), closed]).toEqual([[401], true])
  })

  it(`cuts a client that keeps sending past ${DRAIN_LIMIT / 1024 / 1024} MiB after the answer (no unbounded read)`, async () => {
    const { port } = await listen(createNodeHandler(refuse))
    const socket = await open(port)
    let text = ''
    let closed = false
    let sent = 0
    socket.on('data', (d) => (text += d.toString('latin1')))
    socket.on('error', () => {})
    socket.on('close', () => (closed = true))
    socket.write('POST /p HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n')
    const chunk = Buffer.concat([Buffer.from(`${(1024 * 1024).toString(16)}\r\n`), Buffer.alloc(1024 * 1024, 32), Buffer.from('\r\n')])
    // A chunked body that never ends, sent as fast as the server takes it.
    while (!closed && sent < 4 * DRAIN_LIMIT) {
      sent += 1024 * 1024
      if (!socket.write(chunk))
        await new Promise<void>((r) => {
          const go = () => {
            socket.off('drain', go).off('close', go)
            r()
          }
          socket.on('drain', go).on('close', go)
        })
    }
    await until(() => closed)
    expect(statuses(text)).toEqual([401])
    expect(sent).toBeGreaterThanOrEqual(DRAIN_LIMIT)
    expect(sent).toBeLessThan(2 * DRAIN_LIMIT)
  })

  it(`cuts a client that stops sending half-way after ${DRAIN_IDLE_MS / 1000} s without a byte, instead of waiting for it`, async () => {
    const { port } = await listen(createNodeHandler(refuse))
    const [head] = post(1000)
    const started = Date.now()
    const { text, closed } = await exchange(port, [head!, 'x'.repeat(10)], DRAIN_IDLE_MS + 5000)
    expect([statuses(text), closed]).toEqual([[401], true])
    expect(Date.now() - started).toBeGreaterThanOrEqual(DRAIN_IDLE_MS - 100)
    expect(Date.now() - started).toBeLessThan(DRAIN_IDLE_MS + 4000)
  })

  it('fails a Web body read after the answer went out, rather than leaving its reader waiting', async () => {
    let late: Promise<unknown> | undefined
    const { port } = await listen(
      createNodeHandler(async (request) => {
        setTimeout(
          () =>
            (late = request.text().then(
              () => 'read',
              () => 'failed',
            )),
          50,
        )
        return new Response('early', { status: 403 })
      }),
    )
    await exchange(port, post(600 * 1024), 1000)
    await until(() => late !== undefined)
    expect(await late).toBe('failed')
  })
})

describe('Expect: 100-continue on a server given deferContinue', () => {
  // Authenticates on the headers first, as the JSON group does, then reads the body.
  const handler = createNodeHandler(async (request) => {
    if (request.headers.get('authorization') !== 'Bearer good')
      return new AttachStorageError('unauthorized', 'no', { status: 401 }).toResponse()
    return new Response(`got:${await request.text()}`)
  })
  const ask = async (port: number, auth: string) => {
    const socket = await open(port)
    let text = ''
    let closed = false
    socket.on('error', () => {})
    socket.on('close', () => (closed = true))
    socket.on('data', (d) => {
      text += d.toString('latin1')
      if (text.startsWith('HTTP/1.1 100 ') && !text.includes('got:')) socket.write('hello')
    })
    socket.write(`POST /p HTTP/1.1\r\nhost: x\r\nauthorization: ${auth}\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n`)
    await until(() => closed || /HTTP\/1\.1 [2-5]\d\d[\s\S]*\r\n\r\n.+/.test(text))
    await wait(50)
    socket.destroy()
    return { statuses: statuses(text), closed, echoed: text.includes('got:hello') }
  }

  it('answers a bad token 401 without 100 (and closes), a good one 100, then reads the body', async () => {
    const server = createServer(handler)
    servers.push(deferContinue(server))
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    const port = (server.address() as AddressInfo).port
    expect(await ask(port, 'Bearer bad')).toEqual({ statuses: [401], closed: true, echoed: false })
    expect(await ask(port, 'Bearer good')).toEqual({ statuses: [100, 200], closed: false, echoed: true })
  })
})

describe('refusals outside the handlers', () => {
  it('answers TRACE (which a Web Request cannot carry) and WebDAV methods 404 JSON, without calling the handler', async () => {
    let called = 0
    const { port } = await listen(
      createNodeHandler(async () => {
        called++
        return new Response('ok')
      }),
    )
    for (const method of ['TRACE', 'PROPFIND', 'M-SEARCH']) {
      const { text } = await exchange(port, [`${method} /x HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`])
      expect([method, statuses(text), JSON.parse(text.slice(text.indexOf('{'), text.lastIndexOf('}') + 1))]).toEqual([
        method,
        [404],
        { code: 'not-found', message: 'No such route' },
      ])
    }
    expect(called).toBe(0)
  })

  it("answerClientError answers what Node's parser refuses as JSON {code, message} and closes", async () => {
    const server = createServer(createNodeHandler(async () => new Response('ok'))).on('clientError', answerClientError)
    servers.push(server)
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r))
    const port = (server.address() as AddressInfo).port
    const cases: Array<[string, number, string]> = [
      ['POST /p HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\ncontent-length: 3\r\n\r\n{}', 400, 'bad-request'],
      ['POST /p HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n', 400, 'bad-request'],
      [`GET /p HTTP/1.1\r\nhost: x\r\nx-big: ${'a'.repeat(20_000)}\r\n\r\n`, 431, 'headers-too-large'],
    ]
    for (const [bytes, status, code] of cases) {
      const { text, closed } = await exchange(port, [bytes])
      expect([statuses(text), closed, JSON.parse(text.slice(text.indexOf('{'))).code]).toEqual([[status], true, code])
    }
  })

  it('frameworkError maps a framework refusal to a stable code, and anything else to internal-error', () => {
    const of = (err: unknown) => {
      const e = frameworkError(err)
      return [e.status, e.code, e.message]
    }
    expect(of(Object.assign(new Error('x'), { status: 400, type: 'entity.parse.failed' }))).toEqual([
      400,
      'bad-request',
      'The body is not valid JSON',
    ])
    expect(of(Object.assign(new Error('x'), { statusCode: 400, code: 'FST_ERR_CTP_INVALID_JSON_BODY' }))).toEqual([
      400,
      'bad-request',
      'The body is not valid JSON',
    ])
    expect(of(Object.assign(new Error('x'), { statusCode: 413, code: 'FST_ERR_CTP_BODY_TOO_LARGE' }))).toEqual([
      413,
      'too-large',
      'The request body is too large',
    ])
    expect(of(Object.assign(new Error('x'), { statusCode: 415 }))).toEqual([
      415,
      'unsupported-media-type',
      'The content type is not supported',
    ])
    expect(of(Object.assign(new URIError('x'), { status: 400 }))).toEqual([400, 'bad-request', 'The path is not valid percent-encoding'])
    expect(of(Object.assign(new Error('x'), { statusCode: 404 }))).toEqual([404, 'not-found', 'No such route'])
    expect(of(new Error('boom'))).toEqual([500, 'internal-error', 'An internal error occurred'])
    expect(of(Object.assign(new Error('x'), { statusCode: 503 }))).toEqual([500, 'internal-error', 'An internal error occurred'])
    const own = new AttachStorageError('too-large', 'mine', { status: 413 })
    expect(frameworkError(own)).toBe(own)
  })
})
