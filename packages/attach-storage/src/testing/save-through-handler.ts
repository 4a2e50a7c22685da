import type { AttachmentView } from '../model.js'
import type { AttachHandler } from '../http/handler.js'

/** What {@link saveThroughHandler} saves, and as whom. */
export interface SaveThroughHandlerOptions {
  /** The `Authorization` header of the JSON group (`Bearer <token>`). */
  authorization: string
  refDomain: string
  refKey: string
  /** @default 'default' */
  refCategory?: string
  /** The file's name (its display name). */
  name: string
  bytes: Uint8Array
}

/**
 * Saves one file the way a client does, through a service's handlers: the temporary upload
 * (`POST {api}/attach/tmp`), then the confirmed save (`POST {api}/attach/{refDomain}/{refKey}`).
 * Resolves with the saved record; any other answer throws with its status and body. For a store
 * package's end-to-end tests (a `serve` mode, a CDN address) on top of its conformance call.
 *
 * @example
 * const file = await saveThroughHandler(createAttachHandler(storage), {
 *   authorization: `Bearer ${token}`, refDomain: 'demo', refKey: '1', name: 'a.pdf', bytes,
 * })
 * const res = await handler.fetch(new Request(`http://x/assets/storage/attach/download/${file.id}`))
 */
export async function saveThroughHandler(handler: AttachHandler, options: SaveThroughHandlerOptions): Promise<AttachmentView> {
  const { authorization, refDomain, refKey, refCategory = 'default', name, bytes } = options
  const form = new FormData()
  form.append('refDomain', refDomain)
  form.append('refCategory', refCategory)
  form.append('file', new Blob([new Uint8Array(bytes)]), name)
  // The multipart body as bytes: undici's FormData stream is not needed by the handlers.
  const multipart = new Response(form)
  const upload = await handler.fetch(
    new Request('http://x/api/storage/attach/tmp', {
      method: 'POST',
      body: await multipart.arrayBuffer(),
      headers: { authorization, 'content-type': multipart.headers.get('content-type')! },
    }),
  )
  const uploaded = (await upload.json()) as { files?: Array<{ name?: string; error?: unknown }> }
  const temporary = uploaded.files?.[0]
  if (upload.status !== 200 || !temporary?.name) throw new Error(`temporary upload answered ${upload.status}: ${JSON.stringify(uploaded)}`)
  const saved = await handler.fetch(
    new Request(`http://x/api/storage/attach/${encodeURIComponent(refDomain)}/${encodeURIComponent(refKey)}`, {
      method: 'POST',
      headers: { authorization, 'content-type': 'application/json' },
      body: JSON.stringify({ [refCategory]: [{ savedName: temporary.name }] }),
    }),
  )
  const body = (await saved.json()) as { attachList?: AttachmentView[] }
  const record = body.attachList?.find((r) => r.displayName === name && r.refCategory === refCategory)
  if (saved.status !== 200 || !record) throw new Error(`confirmed save answered ${saved.status}: ${JSON.stringify(body)}`)
  return record
}
