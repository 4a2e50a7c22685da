import { EventEmitter } from 'node:events'
import { Readable, Transform, type TransformCallback } from 'node:stream'
import { Busboy, type BusboyFileStream } from '@fastify/busboy'
import { AttachStorageError, badRequest, tooLarge } from '../errors.js'
import type { AttachStorage, ReceivedFile } from '../service/attach-storage.js'
import { nodeRequestBodyOf } from './node-body.js'

/** What a multipart upload request carried: text fields and the files streamed into the temporary area. */
export interface ReceivedUpload {
  fields: Record<string, string>
  /** Files by part name (`file`, `fileMap`, `files`, `upload`, ...), in request order. */
  files: Array<{ field: string; file: ReceivedFile }>
}

/** Counts request bytes and fails with 413 past the limit. */
class ByteLimit extends Transform {
  #seen = 0
  constructor(readonly limit: number) {
    super()
  }
  override _transform(chunk: Buffer, _e: BufferEncoding, cb: TransformCallback): void {
    this.#seen += chunk.length
    if (this.#seen > this.limit) cb(tooLarge(`The request is larger than the limit of ${this.limit} bytes`))
    else cb(null, chunk)
  }
}

/**
 * Keeps busboy from stalling on a part it skips. Busboy drops a part it cannot use (no
 * `Content-Disposition`, a bare CR or LF in its name or file name, past the parts limit) by resuming it
 * without a reader; when such a part holds more than the parser's high-water mark (16 KiB) and ends in
 * the same write, the parser stays paused for good: no `finish`, no `error`, and the request never
 * answers. Every part that has no reader once its header is read gets one here, so its bytes flow away
 * as they come. Parts busboy reads (fields and files) are left alone.
 */
function drainSkippedParts(bb: InstanceType<typeof Busboy>): void {
  const parser = (bb as unknown as { _parser?: { parser?: unknown } })._parser?.parser
  if (!(parser instanceof EventEmitter)) return
  parser.on('part', (part: Readable) => {
    part.on('header', () => {
      if (part.listenerCount('data') > 0) return // Emit each chunk at once (as busboy does for the parts it reads) instead of buffering it.
      ;(part as unknown as { _readableState: { sync: boolean } })._readableState.sync = false
      part.on('data', () => {})
    })
  })
}

/**
 * Streams a `multipart/form-data` request: every file part goes straight into the temporary area
 * through {@link AttachStorage.receiveFile} (never buffered whole), text parts are collected. A body over
 * the limits answers 413, a malformed one 400; either way no received file is left behind.
 */
export async function receiveMultipart(
  request: Request,
  storage: AttachStorage,
  /** `stripWhen`: asked with the text parts read so far when a file part starts (strip it as it comes). */
  options: { fileFields: readonly string[]; stripWhen?: (fields: Record<string, string>) => boolean },
): Promise<ReceivedUpload> {
  const contentType = request.headers.get('content-type') ?? ''
  if (!/^multipart\/form-data\s*;/i.test(contentType) || !/boundary=/i.test(contentType)) {
    throw badRequest('The request must be multipart/form-data', 'no-file')
  }
  const { maxFileSize, maxFiles, maxFields, maxFieldSize } = storage.config.upload
  const maxRequest = storage.config.upload.maxRequestSize ?? maxFileSize * maxFiles + maxFields * maxFieldSize
  const declared = Number(request.headers.get('content-length') ?? NaN)
  if (Number.isFinite(declared) && declared > maxRequest) {
    throw tooLarge(`The request is larger than the limit of ${maxRequest} bytes`)
  }
  // On Node, the request's own stream when nothing of it was read yet; else its Web body. (Nothing
  // else of the request is touched while it is read: on @hono/node-server, its `signal` would make
  // the Web Request, whose body starts reading the same stream.)
  const node = nodeRequestBodyOf(request)
  if (!node && !request.body) throw badRequest('The request has no body', 'no-file')

  const fields: Record<string, string> = {}
  // One slot per file part, in request order, filled as each file finishes.
  const slots: Array<{ field: string; file: ReceivedFile } | undefined> = []
  const pending: Array<Promise<unknown>> = []
  const abort = new AbortController()
  const onClientAbort = () => abort.abort(new AttachStorageError('aborted', 'The client went away', { status: 400 }))
  // The client going away: the Node stream closes before its end, or the Web request's signal aborts.
  const onNodeClose = () => {
    if (!node?.readableEnded) onClientAbort()
  }
  if (node) node.once('close', onNodeClose)
  else request.signal?.addEventListener('abort', onClientAbort, { once: true })

  let failure: unknown
  const fail = (err: unknown) => {
    failure ??= err
    if (!abort.signal.aborted) abort.abort(err)
  }

  let bb: InstanceType<typeof Busboy>
  try {
    bb = new Busboy({
      headers: { 'content-type': contentType },
      limits: {
        fileSize: maxFileSize,
        files: maxFiles,
        fields: maxFields,
        fieldSize: maxFieldSize,
        parts: maxFiles + maxFields,
        headerPairs: 20,
      },
    })
  } catch (err) {
    throw badRequest(`Malformed multipart request: ${(err as Error).message}`)
  }
  drainSkippedParts(bb)

  const body = node ?? Readable.fromWeb(request.body as import('node:stream/web').ReadableStream<Uint8Array>)
  const limit = new ByteLimit(maxRequest)

  const done = new Promise<void>((resolve) => {
    bb.on('file', (field: string, stream: BusboyFileStream, filename: string) => {
      // Stream errors also reach busboy's own 'error'; this listener keeps them from going uncaught.
      stream.on('error', () => {})
      if (failure || !options.fileFields.includes(field) || !filename) {
        stream.resume()
        return
      }
      const slot = slots.length
      slots.push(undefined)
      pending.push(
        storage
          .receiveFile(stream, filename, { maxSize: maxFileSize, signal: abort.signal, strip: options.stripWhen?.(fields) })
          .then((file) => {
            slots[slot] = { field, file }
          })
          .catch((err) => {
            stream.resume()
            fail(err)
          }),
      )
    })
    bb.on('field', (name: string, value: string, _nt: boolean, valueTruncated: boolean) => {
      if (valueTruncated) fail(tooLarge(`A text part is larger than ${maxFieldSize} bytes`))
      else if (!(name in fields)) fields[name] = value
    })
    bb.on('filesLimit', () => fail(tooLarge(`A request may carry at most ${maxFiles} files`)))
    bb.on('partsLimit', () => fail(tooLarge('The request has too many parts')))
    bb.on('fieldsLimit', () => fail(badRequest(`A request may carry at most ${maxFields} text parts`)))
    bb.on('error', (err: Error) => {
      fail(err instanceof AttachStorageError ? err : badRequest(`Malformed multipart request: ${err.message}`))
      resolve()
    })
    bb.on('finish', () => resolve())
    limit.on('error', (err) => {
      fail(err)
      bb.destroy()
      resolve()
    })
    body.on('error', (err) => {
      fail(new AttachStorageError('aborted', `The request body failed: ${err.message}`, { status: 400 }))
      resolve()
    })
    abort.signal.addEventListener('abort', () => {
      // A Node request's stream is only let go of: its adapter discards or cuts the rest after the
      // answer, which destroying it here would cut off.
      if (node) node.unpipe(limit)
      else body.destroy()
      resolve()
    })
  })
  body.pipe(limit).pipe(bb)
  await done
  await Promise.allSettled(pending)
  if (node) node.off('close', onNodeClose)
  else request.signal?.removeEventListener('abort', onClientAbort)
  const files = slots.filter((f): f is { field: string; file: ReceivedFile } => f !== undefined)
  // Files that finished before another part failed are in `files`; a failure removes them all.
  if (failure) {
    await storage.discardReceived(files.map((f) => f.file))
    throw failure
  }
  return { fields, files }
}
