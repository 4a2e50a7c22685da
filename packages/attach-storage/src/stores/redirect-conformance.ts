import { createHash, randomBytes } from 'node:crypto'
import { expect } from 'vitest'
import type { AttachHandler } from '../http/handler.js'
import { contentDisposition } from '../http/serve.js'
import { saveThroughHandler } from '../testing/save-through-handler.js'
import type { AttachmentView } from '../model.js'

/** What {@link expectRedirectServing} needs: a service whose store is declared with `serve: redirect`. */
export interface RedirectServingOptions {
  /** The handlers of a service whose domain `refDomain` (category `default`) is on the store under test. */
  handler: AttachHandler
  /** The `Authorization` header of the JSON group. */
  authorization: string
  /** @default 'demo' */
  refDomain?: string
  /** Checks the store-specific shape of the presigned address (its origin, path, the expiry parameter). */
  checkAddress(address: URL, file: AttachmentView): void
}

const sha256 = (b: Uint8Array) => createHash('sha256').update(b).digest('hex')

/**
 * The end-to-end check of a store's `presignGet` under `serve: redirect`, for its package's tests: a
 * PDF with a Korean name is saved through the handlers; its download answers 302 (`private, no-store`)
 * to an address that a plain `fetch` reads with the same bytes, type and UTF-8 download name; its view
 * answers 302 too, inline, and the store answers a Range on that address itself (206).
 */
export async function expectRedirectServing(options: RedirectServingOptions): Promise<void> {
  const { handler, authorization, refDomain = 'demo' } = options
  const name = '분기 보고서.pdf'
  const bytes = Buffer.concat([Buffer.from('%PDF-1.4\n'), randomBytes(50_000)])
  const file = await saveThroughHandler(handler, { authorization, refDomain, refKey: '1', name, bytes })

  const res = await handler.fetch(new Request(`http://x/assets/storage/attach/download/${file.id}`))
  expect(res.status).toBe(302)
  expect(res.headers.get('cache-control')).toBe('private, no-store')
  const location = res.headers.get('location')!
  options.checkAddress(new URL(location), file)

  const direct = await fetch(location)
  expect(direct.status).toBe(200)
  expect(direct.headers.get('content-type')).toBe('application/pdf')
  expect(direct.headers.get('content-disposition')).toBe(contentDisposition('attachment', name))
  expect(sha256(new Uint8Array(await direct.arrayBuffer()))).toBe(sha256(bytes))

  const view = await handler.fetch(new Request(`http://x/assets/storage/attach/view/${file.id}`))
  expect(view.status).toBe(302)
  const ranged = await fetch(view.headers.get('location')!, { headers: { range: 'bytes=0-8' } })
  expect(ranged.status).toBe(206)
  expect(ranged.headers.get('content-disposition')).toMatch(/^inline; /)
  expect(Buffer.from(await ranged.arrayBuffer()).toString()).toBe('%PDF-1.4\n')
}
