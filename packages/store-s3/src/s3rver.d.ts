// Minimal typings of s3rver 3.7.1 (it ships none), as far as the tests of this package use it.
declare module 's3rver' {
  import type { Server } from 'node:http'
  import type { AddressInfo } from 'node:net'
  import type { Readable } from 'node:stream'

  export interface S3rverOptions {
    port?: number
    address?: string
    silent?: boolean
    directory?: string
    resetOnClose?: boolean
    allowMismatchedSignatures?: boolean
    vhostBuckets?: boolean
    configureBuckets?: Array<{ name: string; configs?: Array<string | Buffer> }>
  }

  /** The Koa context s3rver's middleware sees (only what the tests touch). */
  export interface S3rverContext {
    method: string
    /** The request target as received (path and query, still percent-encoded). */
    url: string
    path: string
    query: Record<string, string | string[] | undefined>
    headers: Record<string, string | string[] | undefined>
    status: number
    body: unknown
  }

  export interface FilesystemStore {
    getResourcePath(bucket: string, key: string | undefined, resource: string): string
    getObject(
      bucket: string,
      key: string,
      options?: { start?: number; end?: number },
    ): Promise<{ size: number; content?: Readable | Buffer | null; range?: unknown } | null>
    putPart(bucket: string, uploadId: string, partNumber: number | string, content: Readable): Promise<{ size: number; md5: string }>
    putObject(object: {
      bucket: string
      key: string
      content: Readable | Buffer
      metadata: Record<string, unknown>
    }): Promise<{ size: number; md5: string }>
    getMetadata(bucket: string, key: string): Promise<Record<string, unknown>>
    putMetadata(bucket: string, key: string, metadata: Record<string, unknown>, md5?: string): Promise<void>
  }

  class S3rver {
    constructor(options?: S3rverOptions)
    run(): Promise<AddressInfo>
    close(): Promise<void>
    httpServer: Server | undefined
    store: FilesystemStore
    /** Koa's middleware list; composed when the server starts listening. */
    middleware: Array<(ctx: S3rverContext, next: () => Promise<void>) => Promise<void> | void>
  }
  export default S3rver
}

declare module 's3rver/lib/models/error.js' {
  class S3Error extends Error {
    constructor(code: string, message?: string, detail?: Record<string, unknown>)
  }
  export default S3Error
}

declare module 's3rver/lib/models/object.js' {
  import type { Readable } from 'node:stream'
  class S3Object {
    constructor(bucket: string, key: string, content: Readable | Buffer | null, metadata: Record<string, unknown>)
    bucket: string
    key: string
    content: Readable | Buffer | null
    metadata: Record<string, unknown>
    range?: { start: number; end: number }
    readonly size: number
  }
  export default S3Object
}
