import { randomUUID } from 'node:crypto'
import { createWriteStream } from 'node:fs'
import { rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Readable } from 'node:stream'
import { pipeline } from 'node:stream/promises'
import sharp, { type Metadata } from 'sharp'
import type { Store } from '../stores/store.js'

/** Bytes of a remote original read for its header before deciding whether it needs a resize. */
export const METADATA_HEAD_BYTES = 512 * 1024

/**
 * Copies a stream into a new temporary file (mode 0600) and resolves with its path; the caller deletes
 * it. On any failure the source is destroyed and the partial file removed.
 */
export async function spoolToFile(source: Readable, dir: string = tmpdir()): Promise<string> {
  const path = join(dir, `.attach-spool-${randomUUID()}`)
  try {
    await pipeline(source, createWriteStream(path, { flags: 'wx', mode: 0o600 }))
    return path
  } catch (err) {
    source.destroy()
    await rm(path, { force: true }).catch(() => undefined)
    throw err
  }
}

/** The header of a remote original, read from its first {@link METADATA_HEAD_BYTES} only. */
export async function readMetadataHead(store: Store, key: string, maxInputPixels: number): Promise<Metadata> {
  const stream = await store.get(key, { start: 0, end: METADATA_HEAD_BYTES - 1 })
  const chunks: Buffer[] = []
  let size = 0
  try {
    for await (const c of stream) {
      chunks.push(c as Buffer)
      size += (c as Buffer).length
      if (size >= METADATA_HEAD_BYTES) break
    }
  } finally {
    stream.destroy()
  }
  return sharp(Buffer.concat(chunks), { limitInputPixels: maxInputPixels, failOn: 'none' }).metadata()
}
