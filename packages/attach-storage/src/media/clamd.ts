/**
 * A small client of ClamAV's clamd: `zINSTREAM` over TCP or a Unix socket. The file is sent as chunks of
 * at most `chunkSize` bytes, each after its 4-byte big-endian length, then a zero length; clamd answers
 * one line ending in a NUL: `stream: OK`, `stream: <signature> FOUND`, or `... ERROR`. Writes wait for the
 * socket to drain, so memory stays at one chunk whatever the file's size.
 */
import { connect, type Socket } from 'node:net'

/** Why a scan gave no verdict. */
export type ClamdFailure =
  /** The socket could not be opened (refused, no such file, or the connect timeout passed). */
  | 'unreachable'
  /** No answer (nor progress) within the reply timeout. */
  | 'timeout'
  /** The connection closed before clamd answered. */
  | 'closed'
  /** An answer that is none of clamd's. */
  | 'garbage'
  /** clamd's `INSTREAM size limit exceeded`: the file is over its `StreamMaxLength`. */
  | 'size-limit'
  /** clamd's own `... ERROR` answer. */
  | 'error'

/** A scan that gave no verdict: `failure` says why; the message never names the address. */
export class ClamdError extends Error {
  readonly failure: ClamdFailure
  constructor(failure: ClamdFailure, message: string, options?: { cause?: unknown }) {
    super(message, options)
    this.name = 'ClamdError'
    this.failure = failure
  }
}

/** What clamd found: nothing, or the name of the signature that matched. */
export type ClamdVerdict = { infected: false } | { infected: true; signature: string }

/** Where clamd listens and how long to wait for it. */
export interface ClamdOptions {
  /** `tcp://host:port` or `unix:/path/to/clamd.ctl`. */
  address: string
  /** @default 5000 */
  connectTimeoutMs?: number
  /** Longest silence while sending, and the longest wait for the answer once the file is sent. @default 60000 */
  replyTimeoutMs?: number
  /** Largest chunk sent at once (clamd's own buffer is tens of KiB). @default 65536 */
  chunkSize?: number
}

/** The longest answer read; clamd's are one short line. */
const MAX_REPLY = 4096

/** `tcp://host:port` as `{host, port}`, `unix:/path` as `{path}`; throws a plain Error for anything else. */
export function parseClamdAddress(address: string): { host: string; port: number } | { path: string } {
  if (address.startsWith('unix:')) {
    const path = address.slice('unix:'.length).replace(/^\/\/(?=\/)/, '')
    if (!path.startsWith('/')) throw new Error(`"${address}" must be unix:/absolute/path`)
    return { path }
  }
  const m = /^tcp:\/\/(\[[0-9a-fA-F:.]+\]|[^:/\s[\]]+):(\d{1,5})\/?$/.exec(address)
  const port = Number(m?.[2])
  if (!m || port < 1 || port > 65535) throw new Error(`"${address}" must be tcp://host:port or unix:/path`)
  return { host: m[1]!.replace(/^\[|\]$/g, ''), port }
}

/** Reads clamd's answer to `zINSTREAM`. */
export function parseClamdReply(text: string): ClamdVerdict {
  const line = text.replace(/\0$/, '').trim()
  if (line === 'stream: OK') return { infected: false }
  const found = /^stream: (\S(?:.*\S)?) FOUND$/.exec(line)
  if (found) return { infected: true, signature: found[1]! }
  if (/^INSTREAM size limit exceeded/.test(line)) {
    throw new ClamdError('size-limit', 'the file is larger than clamd accepts (its StreamMaxLength)')
  }
  if (/ ERROR$/.test(line)) throw new ClamdError('error', `clamd failed to scan: ${clip(line)}`)
  throw new ClamdError('garbage', `clamd answered something that is not a scan result: ${JSON.stringify(clip(line))}`)
}

const clip = (s: string) => (s.length > 120 ? `${s.slice(0, 120)}...` : s)

/** Opens the socket, or fails with `unreachable` (refused, missing, or slower than `timeoutMs`). */
function open(address: string, timeoutMs: number): Promise<Socket> {
  const target = parseClamdAddress(address)
  return new Promise((resolve, reject) => {
    const socket = 'path' in target ? connect({ path: target.path }) : connect({ host: target.host, port: target.port })
    const timer = setTimeout(() => {
      socket.destroy()
      reject(new ClamdError('unreachable', `clamd could not be reached within ${timeoutMs} ms`))
    }, timeoutMs)
    socket.once('connect', () => {
      clearTimeout(timer)
      socket.removeAllListeners('error')
      resolve(socket)
    })
    socket.once('error', (err) => {
      clearTimeout(timer)
      reject(
        new ClamdError('unreachable', `clamd could not be reached (${(err as NodeJS.ErrnoException).code ?? err.message})`, { cause: err }),
      )
    })
  })
}

/**
 * Streams `source` to clamd and answers its verdict; a {@link ClamdError} when there is none. An error of
 * `source` itself is thrown as it is. clamd may answer before the end (its size limit): sending stops.
 */
export async function clamdScan(source: AsyncIterable<Uint8Array> | Iterable<Uint8Array>, options: ClamdOptions): Promise<ClamdVerdict> {
  const chunkSize = Math.max(1024, Math.min(options.chunkSize ?? 65536, 1 << 20))
  const replyTimeout = options.replyTimeoutMs ?? 60_000
  const socket = await open(options.address, options.connectTimeoutMs ?? 5000)
  const received: Buffer[] = []
  let size = 0
  let failure: ClamdError | undefined
  // Settles once the answer is complete (its NUL), the socket closed, or it failed.
  const reply = new Promise<string>((resolve, reject) => {
    const finish = () => {
      cleanup()
      const text = Buffer.concat(received).toString('utf8')
      if (failure) reject(failure)
      else if (text.length === 0) reject(new ClamdError('closed', 'clamd closed the connection before answering'))
      else resolve(text)
    }
    const cleanup = () => {
      socket.removeListener('data', onData)
      socket.removeListener('close', finish)
    }
    const onData = (chunk: Buffer) => {
      received.push(chunk)
      size += chunk.length
      if (size > MAX_REPLY) {
        failure = new ClamdError('garbage', `clamd answered more than ${MAX_REPLY} bytes`)
        socket.destroy()
      } else if (chunk.includes(0)) socket.end()
    }
    socket.on('data', onData)
    socket.on('close', finish)
    socket.on('error', (err) => {
      // EPIPE/ECONNRESET after clamd answered early (its size limit) still leaves that answer to read.
      if (received.length === 0 && !failure) {
        failure = new ClamdError(
          'closed',
          `clamd closed the connection mid-stream (${(err as NodeJS.ErrnoException).code ?? err.message})`,
          { cause: err },
        )
      }
    })
    socket.setTimeout(replyTimeout, () => {
      failure ??= new ClamdError('timeout', `clamd did not answer within ${replyTimeout} ms`)
      socket.destroy()
    })
  })
  let answered = false
  const settled = () => {
    answered = true
  }
  reply.then(settled, settled)
  let sentBytes = 0
  try {
    await write(socket, Buffer.from('zINSTREAM\0'))
    for await (const chunk of source) {
      for (let at = 0; at < chunk.length && !answered && !socket.destroyed; at += chunkSize) {
        const part = chunk.subarray(at, at + chunkSize)
        const head = Buffer.allocUnsafe(4)
        head.writeUInt32BE(part.length, 0)
        // One segment for the length and its chunk (no 4-byte packet of its own).
        socket.cork()
        socket.write(head)
        const sent = write(socket, part)
        socket.uncork()
        await sent
        sentBytes += part.length
      }
      if (answered || socket.destroyed) break
    }
    if (!answered && !socket.destroyed) await write(socket, Buffer.alloc(4))
  } catch (err) {
    socket.destroy()
    if (!(err instanceof WriteError)) throw err
  }
  try {
    return parseClamdReply(await reply)
  } catch (err) {
    // clamd closes a stream past its StreamMaxLength after answering so; with our chunks still unread on
    // its side the close is a reset, which can discard that answer before it is read. A clamd that
    // answers PING right after dropping a stream mid-way has refused it: its size limit.
    if (err instanceof ClamdError && err.failure === 'closed' && sentBytes > 0) {
      const alive = await clamdPing({ address: options.address, connectTimeoutMs: 1000, replyTimeoutMs: 1000 }).then(
        () => true,
        () => false,
      )
      if (alive) {
        throw new ClamdError(
          'size-limit',
          `the file is larger than clamd accepts (its StreamMaxLength): it closed the stream after ${sentBytes} bytes`,
          {
            cause: err,
          },
        )
      }
    }
    throw err
  } finally {
    socket.destroy()
  }
}

/** A write to the socket that failed: the answer (or its absence) says what happened. */
class WriteError extends Error {}

/** Writes `data`, resolving once the socket can take more (drained) or rejecting when it closes. */
function write(socket: Socket, data: Uint8Array): Promise<void> {
  return new Promise((resolve, reject) => {
    if (socket.destroyed || !socket.writable) return reject(new WriteError('closed'))
    const onClose = () => reject(new WriteError('closed'))
    socket.once('close', onClose)
    const done = () => {
      socket.removeListener('close', onClose)
      resolve()
    }
    if (socket.write(data)) done()
    else socket.once('drain', done)
  })
}

/** `zPING`: resolves when clamd answers PONG, or a {@link ClamdError}. */
export async function clamdPing(options: Pick<ClamdOptions, 'address' | 'connectTimeoutMs' | 'replyTimeoutMs'>): Promise<void> {
  const socket = await open(options.address, options.connectTimeoutMs ?? 5000)
  const timeout = options.replyTimeoutMs ?? 5000
  try {
    const text = await new Promise<string>((resolve, reject) => {
      const parts: Buffer[] = []
      socket.setTimeout(timeout, () => reject(new ClamdError('timeout', `clamd did not answer PING within ${timeout} ms`)))
      socket.on('data', (c: Buffer) => {
        parts.push(c)
        if (c.includes(0)) resolve(Buffer.concat(parts).toString('utf8'))
      })
      socket.on('error', (err) => reject(new ClamdError('closed', `clamd closed the connection (${err.message})`, { cause: err })))
      socket.on('close', () => resolve(Buffer.concat(parts).toString('utf8')))
      socket.write('zPING\0')
    })
    if (text.replace(/\0$/, '').trim() !== 'PONG') throw new ClamdError('garbage', `clamd answered ${JSON.stringify(clip(text))} to PING`)
  } finally {
    socket.destroy()
  }
}
