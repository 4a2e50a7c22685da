/**
 * The one module that drives basic-ftp's internal `FTPContext` (`client.ftp`: `handle`, `dataSocket`,
 * `socket`, `closeWithError`) and `prepareTransfer`; the rest of the store uses basic-ftp's public API
 * only. basic-ftp is pinned to one exact version, and retrieve.contract.test.ts checks every internal
 * used here, so an upgrade that moves one fails that test first.
 * @module
 */
import { Socket } from 'node:net'
import { PassThrough, type Readable } from 'node:stream'
import { TLSSocket } from 'node:tls'
import { type Client, FTPError, type FTPResponse, type TaskResolver } from 'basic-ftp'

/**
 * How much of the file a retrieval delivers:
 * - `all`: every byte the server sends, up to its end of file (an unranged read);
 * - `exact`: exactly `length` bytes up to the end of file; fewer or more means the object changed
 *   between `SIZE` and `RETR`, and the stream fails rather than deliver a mix;
 * - `slice`: the first `length` bytes, then the transfer is cut off and the connection resynchronized.
 */
export type RetrieveMode = 'all' | 'exact' | 'slice'

export interface RetrieveOptions {
  /** Absolute path on the server. */
  path: string
  /** Byte offset (`REST`); 0 for none. */
  start: number
  mode: RetrieveMode
  /** Bytes to deliver, for `exact` and `slice`. */
  length?: number
  /** Inactivity limit in ms (0: none), as the client's own. */
  timeout: number
  /** Turns an error raised after the stream was handed out into the error the stream fails with. */
  wrap: (err: unknown) => Error
}

export interface Retrieval {
  /**
   * Resolves with the byte stream once the server started the transfer (`150`/`125`); rejects with the
   * server's refusal (an `FTPError`, e.g. `550`) or a connection error before that.
   */
  started: Promise<Readable>
  /**
   * Settles once the control connection is idle and in step again (transfer confirmed, or cut off and
   * resynchronized): `true` when the client can be reused. Never rejects.
   */
  done: Promise<boolean>
}

/** Short wait for the server's reply after we cut a data connection off on purpose. */
const AFTER_ABORT_TIMEOUT = 5_000

/**
 * Downloads `path` over a fresh passive data connection of `client`, as `REST`+`RETR`, into the stream
 * that `started` resolves with.
 *
 * basic-ftp's `downloadTo` cannot stop early without closing the whole client, and it settles only at
 * the end; this drives the same `FTPContext` directly so that (a) `get` can answer `not-found` before
 * handing out a stream, (b) a byte range stops after its last byte: the data connection is closed, the
 * server's reply to the cut-off transfer is awaited and a `NOOP` round trip skips any late reply, after
 * which the connection goes back to the pool, and (c) a consumer that destroys the stream early does the
 * same. Back-pressure pauses the data socket; an inactivity watchdog counts only time in which we were
 * ready for data.
 */
export function retrieve(client: Client, options: RetrieveOptions): Retrieval {
  const out = new PassThrough({ highWaterMark: 64 * 1024 })
  let resolveStarted!: (stream: Readable) => void
  let rejectStarted!: (err: unknown) => void
  const started = new Promise<Readable>((resolve, reject) => {
    resolveStarted = resolve
    rejectStarted = reject
  })
  // `started` may be left unobserved when the caller gave up; never an unhandled rejection.
  started.catch(() => {})

  let handedOut = false
  /** The stream got its last byte (ended) or failed: no more writes to it. */
  let outSettled = false
  const endOut = (): void => {
    if (outSettled) return
    outSettled = true
    out.end()
  }
  const failOut = (err: unknown): void => {
    if (outSettled) return
    outSettled = true
    out.destroy(options.wrap(err))
  }

  const done = (async (): Promise<boolean> => {
    let aborted = false
    try {
      await client.prepareTransfer(client.ftp)
      if (options.start > 0) await client.send(`REST ${options.start}`)
      aborted = await transfer()
      if (aborted) await resync(client)
      return !client.closed
    } catch (err) {
      if (!handedOut) rejectStarted(err)
      else failOut(err)
      // An FTPError (the server refused) leaves the control connection in step; close the data one.
      client.ftp.dataSocket = undefined
      return !client.closed && err instanceof FTPError
    }
  })()

  /** Runs the RETR task; resolves with true when the data connection was cut off on purpose. */
  function transfer(): Promise<boolean> {
    let started = false
    let dataDone = false
    let controlDone = false
    let aborted = false
    let received = 0
    /** Every byte that arrived (also past a range), for the watchdog. */
    let arrived = 0
    let watchdog: NodeJS.Timeout | undefined
    /** An error the stream fails with once the task is over (the control connection is fine). */
    let pendingError: Error | undefined
    const length = options.length ?? 0

    return new Promise<boolean>((resolve, reject) => {
      let settled = false
      const stopWatchdog = (): void => {
        if (watchdog) clearInterval(watchdog)
        watchdog = undefined
      }
      const cleanup = (): void => {
        stopWatchdog()
        out.removeListener('drain', onDrain)
        out.removeListener('close', onOutClose)
      }
      const succeed = (task: TaskResolver, response: FTPResponse): void => {
        if (settled) return
        settled = true
        cleanup()
        if (pendingError) failOut(pendingError)
        else endOut()
        task.resolve(response)
        resolve(aborted)
      }
      const fail = (task: TaskResolver, err: unknown): void => {
        if (settled) return
        settled = true
        cleanup()
        client.ftp.dataSocket = undefined
        task.reject(err instanceof Error ? err : new Error(String(err)))
        reject(err)
      }

      let lastResponse: FTPResponse = { code: 226, message: '226 Transfer complete' }
      let currentTask: TaskResolver | undefined
      const finishIfDone = (): void => {
        if (dataDone && controlDone && currentTask) succeed(currentTask, lastResponse)
      }

      /** Cuts the data connection off (the range is complete, the consumer left, or the data overflowed). */
      const abort = (): void => {
        if (dataDone) return
        aborted = true
        dataDone = true
        stopWatchdog()
        cutOff(client)
        // The server now answers the cut-off transfer (426, 451, 226, ...); do not wait long for it.
        const wait = options.timeout > 0 ? Math.min(options.timeout, AFTER_ABORT_TIMEOUT) : AFTER_ABORT_TIMEOUT
        client.ftp.socket.setTimeout(wait)
        finishIfDone()
      }

      const onDrain = (): void => {
        client.ftp.dataSocket?.resume()
      }
      const onOutClose = (): void => {
        // The consumer destroyed the stream before its end: stop the transfer, keep the connection.
        if (!outSettled) {
          outSettled = true
          abort()
        }
      }

      const onData = (chunk: Buffer): void => {
        arrived += chunk.length
        if (dataDone) return
        let piece = chunk
        if (options.mode !== 'all' && received + piece.length > length) {
          if (options.mode === 'exact') {
            pendingError = new Error(`the object changed while it was read: more than the ${length} bytes its size announced`)
            failOut(pendingError)
            abort()
            return
          }
          piece = piece.subarray(0, length - received)
        }
        received += piece.length
        if (piece.length > 0 && !outSettled && !out.write(piece)) client.ftp.dataSocket?.pause()
        if (options.mode === 'slice' && received >= length) {
          endOut()
          abort()
        }
      }

      const onEnd = (): void => {
        if (dataDone) return
        dataDone = true
        stopWatchdog()
        if (options.mode !== 'all' && received < length) {
          pendingError = new Error(
            `the server sent ${received} of ${length} bytes: the object changed while it was read, or the transfer broke`,
          )
        }
        client.ftp.socket.setTimeout(options.timeout)
        finishIfDone()
      }

      const startData = (): void => {
        const socket = client.ftp.dataSocket
        if (socket === undefined) throw new Error('The server started the transfer, but there is no data connection')
        // The control connection idles during the transfer; the watchdog below guards the data connection.
        client.ftp.socket.setTimeout(0)
        socket.on('data', onData)
        socket.once('end', onEnd)
        out.on('drain', onDrain)
        out.on('close', onOutClose)
        if (options.timeout > 0) {
          const every = Math.max(50, Math.min(500, Math.floor(options.timeout / 4)))
          let lastBytes = arrived
          let idle = 0
          watchdog = setInterval(() => {
            const bytes = arrived
            if (socket.isPaused() || bytes !== lastBytes) idle = 0
            else idle += every
            lastBytes = bytes
            if (idle >= options.timeout) {
              stopWatchdog()
              client.ftp.closeWithError(new Error(`Timeout (data socket): no data for ${options.timeout} ms`))
            }
          }, every)
          watchdog.unref()
        }
        handedOut = true
        resolveStarted(out)
      }

      client.ftp
        .handle(`RETR ${options.path}`, (res, task) => {
          currentTask = task
          if (res instanceof Error) {
            // After a deliberate cut-off the server's complaint about it is the expected answer.
            if (aborted && res instanceof FTPError) {
              lastResponse = { code: res.code, message: res.message }
              controlDone = true
              finishIfDone()
              return
            }
            fail(task, res)
            return
          }
          if (res.code === 150 || res.code === 125) {
            if (started) return
            started = true
            try {
              startData()
            } catch (err) {
              fail(task, err)
            }
            return
          }
          if (res.code >= 200 && res.code < 300) {
            lastResponse = res
            controlDone = true
            finishIfDone()
            return
          }
          if (res.code >= 300 && res.code < 400) {
            fail(task, new Error(`Unexpected reply to RETR: ${res.message}`))
            client.ftp.closeWithError(new Error(`Unexpected reply to RETR: ${res.message}`))
          }
          // Other preliminary replies (1xx) are informational.
        })
        .catch(() => {
          // Settled through `resolve`/`reject` above.
        })
    })
  }

  return { started, done }
}

/**
 * Closes the data connection of a transfer we stop early with a TCP reset rather than a FIN: a server
 * then fails its next write at once and answers the transfer (426, 451, 551). Some servers (ftp-srv)
 * take a FIN for the end of the transfer's socket and never answer the RETR at all.
 */
function cutOff(client: Client): void {
  const socket = client.ftp.dataSocket
  if (socket !== undefined) {
    // A TLS data socket wraps the TCP one it was started on (node keeps it as `_parent`).
    const parent = socket instanceof TLSSocket ? (socket as unknown as { _parent?: unknown })._parent : undefined
    const tcp = parent instanceof Socket ? parent : socket
    try {
      tcp.resetAndDestroy()
    } catch {
      // Not a TCP handle (or already closed): the destroy below closes it.
    }
  }
  // The setter removes every listener from the old socket and destroys it.
  client.ftp.dataSocket = undefined
}

/**
 * Brings the control connection back in step after a cut-off transfer: a server may send one more
 * reply about it (e.g. 426 then 226); `NOOP` is answered with 200, which no transfer reply uses, so
 * every reply before it is skipped.
 */
async function resync(client: Client): Promise<void> {
  await client.ftp.handle('NOOP', (res, task) => {
    if (res instanceof FTPError) return
    if (res instanceof Error) {
      task.reject(res)
      return
    }
    if (res.code === 200) task.resolve(res)
  })
  client.ftp.socket.setTimeout(0)
}
