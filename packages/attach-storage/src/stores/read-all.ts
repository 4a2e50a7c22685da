import type { Readable } from 'node:stream'

/** Reads a (small) stream whole: sidecars, file heads, bodies the caller has bounded already. */
export async function readAll(stream: Readable): Promise<Buffer> {
  const chunks: Buffer[] = []
  for await (const c of stream) chunks.push(c as Buffer)
  return Buffer.concat(chunks)
}
