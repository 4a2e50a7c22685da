/**
 * The bounds and failure paths of the S3 store's multipart uploads and copies, on a real s3rver: a copy
 * whose part fails starts no further part and aborts only once the parts in flight have ended; a put
 * past the most parts fails before that part is sent. Both leave no object and no upload behind.
 */
import { createHash, randomBytes } from 'node:crypto'
import { Readable } from 'node:stream'
import { setTimeout as sleep } from 'node:timers/promises'
import type { S3Client } from '@aws-sdk/client-s3'
import { type AttachStorageError, storeFailure } from 'attach-storage/store-kit'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { S3Store, type S3StoreOptions } from './index.js'
import { multipartPut } from './multipart-put.js'
import { resolveS3Settings } from './settings.js'
import type { S3Calls } from './store-calls.js'
import { startS3rver, type TestS3Server } from './test-server.js'

const MiB = 1024 * 1024
const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')

let s3: TestS3Server
beforeAll(async () => {
  s3 = await startS3rver()
})
afterAll(async () => {
  await s3?.close()
})

const make = (overrides: Record<string, unknown> = {}) => new S3Store('s3', { ...s3.settings, ...overrides } as unknown as S3StoreOptions)

/** Each command's start and end, in the order they happened (`part` for the part commands). */
function timeline(client: S3Client): Array<{ command: string; part?: number; phase: 'start' | 'done' | 'failed' }> {
  const events: Array<{ command: string; part?: number; phase: 'start' | 'done' | 'failed' }> = []
  client.middlewareStack.add(
    (next, context) => async (args) => {
      const command = String(context.commandName).replace(/Command$/, '')
      const part = (args.input as { PartNumber?: number }).PartNumber
      events.push({ command, ...(part ? { part } : {}), phase: 'start' })
      try {
        const out = await next(args)
        events.push({ command, ...(part ? { part } : {}), phase: 'done' })
        return out
      } catch (err) {
        events.push({ command, ...(part ? { part } : {}), phase: 'failed' })
        throw err
      }
    },
    { step: 'initialize', name: 'timeline' },
  )
  return events
}

describe('S3Store multipart copy, a part failing', () => {
  it('starts no part after the failure, waits for the parts in flight, then aborts: no object, no upload', async () => {
    const store = make({ multipartCopyThreshold: '5MB', copyPartSize: '5MB', queueSize: 3 })
    try {
      const bytes = randomBytes(26 * MiB)
      await store.put('copy-fails/src.bin', bytes)
      const events = timeline(store.client)
      // Part 2 is refused at once; parts 1 and 3 take a while, so they are still in flight then.
      store.client.middlewareStack.add(
        (next, context) => async (args) => {
          const part = (args.input as { PartNumber?: number }).PartNumber
          if (context.commandName === 'UploadPartCopyCommand' && part === 2) {
            await sleep(20)
            throw Object.assign(new Error('part 2 refused'), { name: 'InternalError', $metadata: { httpStatusCode: 500 } })
          }
          if (context.commandName === 'UploadPartCopyCommand') await sleep(300)
          return next(args)
        },
        { step: 'build', name: 'slow-or-failing-parts' },
      )
      await expect(store.copy('copy-fails/src.bin', 'copy-fails/dst.bin')).rejects.toMatchObject({
        name: 'AttachStorageError',
        code: 'store-failure',
        message: expect.stringContaining('part 2 refused'),
      })
      const parts = events.filter((e) => e.command === 'UploadPartCopy')
      expect(parts.filter((e) => e.phase === 'start').map((e) => e.part)).toEqual([1, 2, 3])
      const ends = parts.filter((e) => e.phase !== 'start').map((e) => [e.part, e.phase])
      expect(ends[0]).toEqual([2, 'failed'])
      expect(ends.slice(1).sort()).toEqual([
        [1, 'done'],
        [3, 'done'],
      ])
      const abort = events.findIndex((e) => e.command === 'AbortMultipartUpload' && e.phase === 'start')
      expect(abort).toBeGreaterThan(events.findLastIndex((e) => e.command === 'UploadPartCopy'))
      expect(events.some((e) => e.command === 'CompleteMultipartUpload')).toBe(false)
      expect(await store.exists('copy-fails/dst.bin')).toBe(false)
      expect((await s3.pendingUploads()).filter((u) => u.key.startsWith('copy-fails/'))).toEqual([])
      // The source is untouched.
      const back: Buffer[] = []
      for await (const c of await store.get('copy-fails/src.bin')) back.push(c as Buffer)
      expect(sha256(Buffer.concat(back))).toBe(sha256(bytes))
    } finally {
      await store.close()
    }
  })
})

describe('S3Store multipart put, the most parts', () => {
  it('fails at the first part past the bound, before sending it: store-failure, upload aborted, nothing left', async () => {
    const store = make()
    try {
      const events = timeline(store.client)
      const calls: S3Calls = {
        client: () => store.client,
        bucket: store.bucket,
        settings: resolveS3Settings('s3', s3.settings),
        call: (_operation, _key, run) => run(),
        failure: (message, cause) => storeFailure(message, cause === undefined ? {} : { cause }),
        wrap: (_operation, _key, err) => err as AttachStorageError,
      }
      // 16 MiB in parts of 5 MiB is four parts; the bound here is three.
      const body = Readable.from(
        Array.from({ length: 16 }, () => randomBytes(MiB)),
        { objectMode: false },
      )[Symbol.asyncIterator]()
      await expect(
        multipartPut(calls, 'max-parts/big.bin', 'max-parts/big.bin', [], body, 5 * MiB, undefined, undefined, 3),
      ).rejects.toMatchObject({
        code: 'store-failure',
        message: expect.stringMatching(/"max-parts\/big\.bin" failed: more than 3 parts/),
      })
      const sent = events.filter((e) => e.command === 'UploadPart' && e.phase === 'start').map((e) => e.part)
      expect(sent).toEqual([1, 2, 3])
      expect(events.filter((e) => e.command === 'AbortMultipartUpload').map((e) => e.phase)).toEqual(['start', 'done'])
      expect(events.some((e) => e.command === 'CompleteMultipartUpload')).toBe(false)
      expect(await store.exists('max-parts/big.bin')).toBe(false)
      expect((await s3.pendingUploads()).filter((u) => u.key.startsWith('max-parts/'))).toEqual([])
    } finally {
      await store.close()
    }
  })
})
