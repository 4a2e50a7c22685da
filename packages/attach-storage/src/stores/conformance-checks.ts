/**
 * How the store conformance suite reads objects back and checks them: whole reads, digests, listings,
 * the expected failure of a call and its code, bytes compared by hash.
 * @module
 */
import { createHash } from 'node:crypto'
import type { Readable } from 'node:stream'
import { expect } from 'vitest'
import { sha256 } from './conformance-sources.js'
import type { ByteRange, Store } from './store.js'

export async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const chunk of stream) chunks.push(Buffer.isBuffer(chunk) ? chunk : Buffer.from(chunk))
  return Buffer.concat(chunks)
}

export async function digestOf(stream: Readable): Promise<{ size: number; sha256: string }> {
  const hash = createHash('sha256')
  let size = 0
  for await (const chunk of stream) {
    const bytes: Uint8Array = typeof chunk === 'string' ? Buffer.from(chunk) : chunk
    size += bytes.length
    hash.update(bytes)
  }
  return { size, sha256: hash.digest('hex') }
}

export async function getBytes(store: Store, key: string, range?: ByteRange): Promise<Buffer> {
  return readAll(await store.get(key, range))
}

export async function collect<T>(items: AsyncIterable<T>): Promise<T[]> {
  const out: T[] = []
  for await (const item of items) out.push(item)
  return out
}

/** The error `fn` throws or rejects with; fails the test when it succeeds. */
export async function rejection(fn: () => unknown, what = 'the call'): Promise<unknown> {
  try {
    await fn()
  } catch (err) {
    return err
  }
  return expect.unreachable(`expected ${what} to fail, but it succeeded`)
}

export function expectError(err: unknown, code: string, status: number, what?: string): void {
  expect(err, what).toMatchObject({ name: 'AttachStorageError', code, status })
}

/** Compares bytes by length and hash first, so that a mismatch does not print megabytes. */
export function expectBytes(actual: Uint8Array, expected: Uint8Array): void {
  expect(actual.length).toBe(expected.length)
  if (sha256(actual) !== sha256(expected)) {
    const at = Buffer.from(actual).findIndex((b, i) => b !== expected[i])
    expect.fail(`bytes differ first at offset ${at} (of ${expected.length})`)
  }
}
