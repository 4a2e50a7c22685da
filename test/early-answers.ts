/** Clients of Node's own http client sending large bodies to a server that answers before reading them. */
import { Agent, request, type RequestOptions } from 'node:http'

export interface FloodOptions {
  /** Headers beside `content-type: application/json` and `content-length`. */
  headers?: Record<string, string>
  /** `false` for a new connection per request (Node then sends `Connection: close`). */
  agent?: false
  /** @default 40 */
  count?: number
  /** Requests in flight at once. @default 20 */
  concurrency?: number
  /** Body bytes of each request. @default 5 MiB */
  size?: number
}

/**
 * Sends `count` POSTs of `size` bytes each to `path`, `concurrency` at a time, each body written whole
 * at once (`req.end(buffer)`), as Node's http client does for a client that does not wait for the answer.
 * Returns how many ended in each way: `"<status> <code>"` from the JSON answer, or the client error's
 * code (`EPIPE`, `ECONNRESET`) when the connection was reset before the answer could be read.
 *
 * The kept-alive connections come from an agent of their own that lets an idle connection go after 1 s,
 * long before the server's keep-alive timeout: on a loaded machine a connection idle for several seconds
 * can otherwise be reused at the very moment the server closes it (a reset unrelated to early answers).
 */
export async function floodOfEarlyAnswers(port: number, path: string, options: FloodOptions = {}): Promise<Record<string, number>> {
  const { count = 40, concurrency = 20, size = 5 * 1024 * 1024 } = options
  const agent = options.agent === false ? false : new Agent({ keepAlive: true, timeout: 1000 })
  const body = Buffer.alloc(size, 32)
  // The outcome of one request: its answer once the whole body went out too, or the first error, even
  // one after the answer (the rest of the body failed to go out: the connection was reset).
  const one = () =>
    new Promise<string>((resolve) => {
      let answer: string | undefined
      let sent = false
      const settle = () => answer !== undefined && sent && resolve(answer)
      const init: RequestOptions = {
        host: '127.0.0.1',
        port,
        path,
        method: 'POST',
        agent,
        headers: { 'content-type': 'application/json', 'content-length': String(size), ...options.headers },
      }
      const req = request(init, (res) => {
        let text = ''
        res.setEncoding('utf8')
        res.on('data', (d) => (text += d))
        res.on('end', () => {
          let code: unknown
          try {
            code = JSON.parse(text).code
          } catch {
            code = text.slice(0, 40)
          }
          answer = `${res.statusCode} ${code}`
          settle()
        })
        res.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message))
      })
      req.on('error', (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message))
      req.on('finish', () => {
        sent = true
        settle()
      })
      req.end(body)
    })
  const seen: Record<string, number> = {}
  let next = 0
  try {
    await Promise.all(
      Array.from({ length: concurrency }, async () => {
        while (next++ < count) {
          const outcome = await one()
          seen[outcome] = (seen[outcome] ?? 0) + 1
        }
      }),
    )
  } finally {
    if (agent) agent.destroy()
  }
  return seen
}
