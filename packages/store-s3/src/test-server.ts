/**
 * Test-only: an s3rver 3.7.1 instance in a temporary directory, with a few gaps of the emulator filled so
 * the store's behaviour can be checked against it (not shipped: the package builds only index.ts).
 *
 * s3rver gaps, each patched by one Koa middleware placed before its router (requests signed with the
 * test access key only; everything else reaches s3rver untouched):
 * - `x-amz-copy-source` is decoded with `decodeURI`, which leaves `%2B`, `%3D`, `%2C`, `%40` encoded, so
 *   a copy of a key with `+` fails. Real S3 and MinIO decode the whole value; the header is rewritten to
 *   a form `decodeURI` reads the same way.
 * - AbortMultipartUpload (DELETE `?uploadId`) and ListMultipartUploads (GET bucket `?uploads`) are
 *   answered "not allowed / not implemented"; they are implemented on s3rver's own upload directory.
 * - UploadPartCopy (PUT `?uploadId` with `x-amz-copy-source`) is "not implemented"; it is implemented
 *   with s3rver's own ranged read and part write.
 * - PutObject writes the object file in place and answers before the bytes are flushed, so a reader
 *   can see a mix of old and new bytes, or a truncated object; a PUT cut off halfway leaves the
 *   truncated object. Real S3 is atomic. `putObject` of its file store is replaced by one that writes a
 *   temporary file, waits for it, and renames it into place (nothing on failure), and `getObject` by one
 *   that opens the file before sizing it, so one read is of one version. Its range quirks are kept
 *   ("bytes=0-0" gives the whole object, a range on an empty object a broken 206).
 * s3rver also does not check SigV4 signatures (a wrong secret key passes; an unknown access key fails).
 * It does enforce the expiry of a presigned (query-string) address (`X-Amz-Date` + `X-Amz-Expires`), and
 * applies the signed `response-content-*` overrides. Unless started with `verifyPresigned: false`, the
 * signature of a presigned address of the test access key is checked here, as S3 checks it (signature
 * version 4, recomputed with node:crypto from the request as received): a presigned address that passes
 * is one real S3 would accept, and a tampered one is refused with 403 SignatureDoesNotMatch. A CORS
 * preflight (`OPTIONS`) of such an address is left to s3rver's CORS rules, as S3 does.
 */
import { createHash, createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import { createWriteStream, existsSync } from 'node:fs'
import { mkdir, mkdtemp, open, readdir, readFile, rename, rm, stat, unlink, type FileHandle } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { Readable, Transform } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import S3rver, { type FilesystemStore, type S3rverContext } from 's3rver'
import S3Error from 's3rver/lib/models/error.js'
import S3Object from 's3rver/lib/models/object.js'

/** s3rver's built-in account. */
export const S3RVER_ACCESS_KEY = 'S3RVER'
export const S3RVER_SECRET_KEY = 'S3RVER'

export interface TestS3Server {
  endpoint: string
  port: number
  bucket: string
  /** s3rver's data directory. */
  directory: string
  server: S3rver
  /** Settings of an S3 store on this server (camelCase, with credentials). */
  settings: Record<string, unknown>
  /**
   * The same settings as a configuration file writes them (kebab-case keys), optionally reached
   * through another address (a relay or proxy in front of this server).
   */
  fileSettings(endpoint?: string): Record<string, unknown>
  /** The file s3rver keeps an object's bytes in. */
  objectFile(objectKey: string): string
  /** In-progress multipart uploads, read from s3rver's directory. */
  pendingUploads(): Promise<Array<{ uploadId: string; key: string }>>
  /** Stops listening and cuts every open connection at once (as a crash would). */
  kill(): Promise<void>
  /** Stops the server and removes its directory. */
  close(): Promise<void>
}

export async function startS3rver(bucket = 'attach-test', options: { verifyPresigned?: boolean } = {}): Promise<TestS3Server> {
  const directory = await mkdtemp(join(tmpdir(), 'attach-s3rver-'))
  const server = new S3rver({
    port: 0,
    address: '127.0.0.1',
    silent: true,
    directory,
    configureBuckets: [{ name: bucket }],
  })
  makeAtomic(server.store)
  const uploadsDir = (b: string) => server.store.getResourcePath(b, undefined, 'uploads')
  const pendingUploads = async (b = bucket) => {
    const dir = uploadsDir(b)
    if (!existsSync(dir)) return []
    const ids = await readdir(dir)
    return Promise.all(ids.map(async (uploadId) => ({ uploadId, key: (await readFile(join(dir, uploadId, 'key'))).toString() })))
  }
  if (options.verifyPresigned !== false) {
    server.middleware.splice(server.middleware.length - 1, 0, async (ctx, next) => {
      // A CORS preflight carries no credentials (S3 answers it from the bucket's CORS rules alone).
      if (ctx.method !== 'OPTIONS' && presignedBy(ctx) === S3RVER_ACCESS_KEY) verifyPresignedV4(ctx, S3RVER_SECRET_KEY)
      await next()
    })
  }
  server.middleware.splice(server.middleware.length - 1, 0, async (ctx, next) => {
    const auth = ctx.headers.authorization
    if (typeof auth !== 'string' || !auth.includes(`Credential=${S3RVER_ACCESS_KEY}/`)) return next()
    await patched(ctx, next)
  })

  async function patched(ctx: S3rverContext, next: () => Promise<void>): Promise<void> {
    const [b = '', ...rest] = ctx.path
      .slice(1)
      .split('/')
      .map((s) => decodeURIComponent(s))
    const key = rest.join('/')
    const q = ctx.query
    const copySource = ctx.headers['x-amz-copy-source']
    if (typeof copySource === 'string') ctx.headers['x-amz-copy-source'] = encodeURI(decodeURIComponent(copySource))

    if (ctx.method === 'DELETE' && key && typeof q.uploadId === 'string') {
      const dir = join(uploadsDir(b), q.uploadId)
      if (!existsSync(dir)) throw new S3Error('NoSuchUpload', 'The specified upload does not exist.', { UploadId: q.uploadId })
      await rm(dir, { recursive: true, force: true })
      ctx.status = 204
      return
    }
    if (ctx.method === 'GET' && !key && 'uploads' in q) {
      const prefix = typeof q.prefix === 'string' ? q.prefix : ''
      const uploads = (await pendingUploads(b)).filter((u) => u.key.startsWith(prefix))
      ctx.body = {
        ListMultipartUploadsResult: {
          Bucket: b,
          Prefix: prefix,
          IsTruncated: false,
          Upload: uploads.map((u) => ({ Key: u.key, UploadId: u.uploadId, Initiated: new Date().toISOString() })),
        },
      }
      return
    }
    if (ctx.method === 'PUT' && key && typeof q.uploadId === 'string' && typeof copySource === 'string') {
      const source = decodeURIComponent(copySource).replace(/^\//, '')
      const slash = source.indexOf('/')
      const [srcBucket, srcKey] = [source.slice(0, slash), source.slice(slash + 1)]
      const range = /^bytes=(\d+)-(\d+)$/.exec(String(ctx.headers['x-amz-copy-source-range'] ?? ''))
      const object = await server.store.getObject(srcBucket, srcKey, range ? { start: Number(range[1]), end: Number(range[2]) } : undefined)
      if (!(object?.content instanceof Readable)) throw new S3Error('NoSuchKey', 'The specified key does not exist.', { Key: srcKey })
      if (!existsSync(join(uploadsDir(b), q.uploadId))) {
        object.content.destroy()
        throw new S3Error('NoSuchUpload', 'The specified upload does not exist.', { UploadId: q.uploadId })
      }
      const { md5 } = await server.store.putPart(b, q.uploadId, String(q.partNumber), object.content)
      ctx.body = { CopyPartResult: { ETag: JSON.stringify(md5), LastModified: new Date().toISOString() } }
      return
    }
    await next()
  }

  const address = await server.run()
  const endpoint = `http://127.0.0.1:${address.port}`
  let closed = false
  const stopListening = async () => {
    if (closed) return
    closed = true
    const http = server.httpServer
    const done = server.close()
    http?.closeAllConnections()
    await done
  }
  return {
    endpoint,
    port: address.port,
    bucket,
    directory,
    server,
    settings: {
      type: 's3',
      bucket,
      region: 'us-east-1',
      endpoint,
      forcePathStyle: true,
      accessKey: S3RVER_ACCESS_KEY,
      secretKey: S3RVER_SECRET_KEY,
    },
    fileSettings: (through = endpoint) => ({
      type: 's3',
      bucket,
      region: 'us-east-1',
      endpoint: through,
      'force-path-style': true,
      'access-key': S3RVER_ACCESS_KEY,
      'secret-key': S3RVER_SECRET_KEY,
    }),
    objectFile: (objectKey) => server.store.getResourcePath(bucket, objectKey, 'object'),
    pendingUploads: () => pendingUploads(),
    kill: stopListening,
    async close() {
      await stopListening()
      await rm(directory, { recursive: true, force: true })
    },
  }
}

/** The access key of a signature version 4 presigned request; undefined for any other request. */
function presignedBy(ctx: S3rverContext): string | undefined {
  const credential = ctx.query['X-Amz-Credential']
  return ctx.query['X-Amz-Algorithm'] === 'AWS4-HMAC-SHA256' && typeof credential === 'string' ? credential.split('/')[0] : undefined
}

/** RFC 3986 encoding, as signature version 4 wants it. */
const rfc3986 = (s: string): string => encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)
const hmac = (key: Buffer | string, data: string): Buffer => createHmac('sha256', key).update(data, 'utf8').digest()

/**
 * Checks the signature of a presigned (query-string, signature version 4) request as S3 does: the
 * canonical request from the path as received, the sorted query without `X-Amz-Signature`, the signed
 * headers and the unsigned payload; throws 403 SignatureDoesNotMatch when it differs.
 */
function verifyPresignedV4(ctx: S3rverContext, secretKey: string): void {
  const [rawPath = '/', rawQuery = ''] = ctx.url.split('?', 2) as [string, string?]
  const params: Array<[string, string]> = rawQuery
    .split('&')
    .filter((p) => p !== '')
    .map((p) => {
      const at = p.indexOf('=')
      const [k, v] = at < 0 ? [p, ''] : [p.slice(0, at), p.slice(at + 1)]
      return [decodeURIComponent(k), decodeURIComponent(v)]
    })
  const get = (name: string) => params.find(([k]) => k === name)?.[1] ?? ''
  const canonicalQuery = params
    .filter(([k]) => k !== 'X-Amz-Signature')
    .map(([k, v]) => [rfc3986(k), rfc3986(v)] as const)
    .sort(([a, av], [b, bv]) => (a < b ? -1 : a > b ? 1 : av < bv ? -1 : av > bv ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join('&')
  const signedHeaders = get('X-Amz-SignedHeaders')
  const canonicalHeaders = signedHeaders
    .split(';')
    .map(
      (h) =>
        `${h}:${String(ctx.headers[h] ?? '')
          .trim()
          .replace(/\s+/g, ' ')}\n`,
    )
    .join('')
  const payload = get('X-Amz-Content-Sha256') || 'UNSIGNED-PAYLOAD'
  const canonicalRequest = [ctx.method, rawPath, canonicalQuery, canonicalHeaders, signedHeaders, payload].join('\n')
  const [, ...scopeParts] = get('X-Amz-Credential').split('/')
  const [date = '', region = '', service = ''] = scopeParts
  const stringToSign = [
    'AWS4-HMAC-SHA256',
    get('X-Amz-Date'),
    scopeParts.join('/'),
    createHash('sha256').update(canonicalRequest, 'utf8').digest('hex'),
  ].join('\n')
  const signingKey = hmac(hmac(hmac(hmac(`AWS4${secretKey}`, date), region), service), 'aws4_request')
  const expected = Buffer.from(hmac(signingKey, stringToSign).toString('hex'))
  const provided = Buffer.from(get('X-Amz-Signature'))
  if (provided.length !== expected.length || !timingSafeEqual(provided, expected)) {
    throw new S3Error('SignatureDoesNotMatch', 'The request signature we calculated does not match the signature you provided.', {})
  }
}

/** True when `file` exists. */
export async function fileExists(file: string): Promise<boolean> {
  return stat(file).then(
    () => true,
    () => false,
  )
}

/** Replaces s3rver's in-place object writes and its stat-then-open reads (see the module comment). */
function makeAtomic(store: FilesystemStore): void {
  store.putObject = async function putObject(object) {
    const objectPath = store.getResourcePath(object.bucket, object.key, 'object')
    await mkdir(dirname(objectPath), { recursive: true })
    const temp = `${objectPath}.${randomBytes(6).toString('hex')}.partial`
    const md5 = createHash('md5')
    let size = 0
    const content = Buffer.isBuffer(object.content) ? Readable.from([object.content]) : object.content
    try {
      await pipeline(
        content,
        new Transform({
          transform(chunk: Buffer, _encoding, callback) {
            md5.update(chunk)
            size += chunk.length
            callback(null, chunk)
          },
        }),
        createWriteStream(temp),
      )
      await rename(temp, objectPath)
    } catch (err) {
      await unlink(temp).catch(() => {})
      throw err
    }
    const digest = md5.digest('hex')
    await store.putMetadata(object.bucket, object.key, object.metadata, digest)
    return { size, md5: digest }
  }

  store.getObject = async function getObject(bucket, key, options) {
    let handle: FileHandle
    try {
      handle = await open(store.getResourcePath(bucket, key, 'object'), 'r')
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
      throw err
    }
    try {
      const metadata = await store.getMetadata(bucket, key)
      metadata['content-length'] = (await handle.stat()).size
      // s3rver's own range arithmetic, quirks included.
      const lastByte = Math.max(0, Number(metadata['content-length']) - 1)
      const range = { start: options?.start || 0, end: Math.min(options?.end || Infinity, lastByte) }
      const ranged = options !== undefined && (options.start !== undefined || !!options.end)
      if (range.start < 0 || Math.min(range.end, lastByte) < range.start) {
        await handle.close()
        const object = new S3Object(bucket, key, null, metadata)
        if (ranged) object.range = range
        return object
      }
      const object = new S3Object(bucket, key, handle.createReadStream(range), metadata)
      if (ranged) object.range = range
      return object
    } catch (err) {
      await handle.close().catch(() => {})
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null
      throw err
    }
  }
}
