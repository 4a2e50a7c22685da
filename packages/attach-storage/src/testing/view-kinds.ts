/**
 * The request kinds a view by id must answer alike on every path (the handlers, the Node fast path,
 * views answered before a framework): node/fast-views.test.ts and the adapters' views-first test send
 * each of them both ways and compare status, headers and body.
 */

/** What the kinds are made of: five saved records and the ways to ask for them. */
export interface ViewKindsInput {
  /** Records: `small` (text), `large` (600 KiB), `html`, `image` (a PNG in a category with `image` filters), `private` (a guarded category). */
  ids: { small: number; large: number; html: number; image: number; private: number }
  /** The small record's `ETag` and `Last-Modified`. */
  etag: string
  lastModified: string
  /** The `Authorization` header of the private record's owner. */
  owner: { authorization: string }
  /** Bearer tokens of the owner and of another user. */
  ownerToken: string
  otherToken: string
  /** A signed view of the private record, below the assets prefix (`/attach/view/{id}?exp=…&sig=…`). */
  signedPath: string
}

/** The 25 kinds: paths below the assets prefix, with their request options. */
export function viewKinds(k: ViewKindsInput): Array<[string, RequestInit?]> {
  const { ids } = k
  return [
    [`/attach/view/${ids.small}`],
    [`/attach/download/${ids.small}`],
    [`/attach/view/${ids.small}`, { method: 'HEAD' }],
    [`/attach/view/${ids.small}`, { headers: { 'if-none-match': k.etag } }],
    [`/attach/view/${ids.small}`, { headers: { 'if-modified-since': k.lastModified } }],
    [`/attach/view/${ids.small}`, { headers: { range: 'bytes=2-6' } }],
    [`/attach/view/${ids.small}`, { headers: { range: 'bytes=50-60' } }],
    [`/attach/view/${ids.small}`, { headers: { range: 'bytes=2-6', 'if-range': '"other"' } }],
    [`/attach/view/${ids.large}`],
    [`/attach/view/${ids.large}`, { headers: { range: 'bytes=1000-400000' } }],
    [`/attach/view/${ids.large}`, { method: 'HEAD', headers: { range: 'bytes=-10' } }],
    [`/attach/view/${ids.html}`],
    [`/attach/view/${ids.image}?w=20`],
    [`/attach/view/${ids.image}?w=20&format=auto`, { headers: { accept: 'image/webp,*/*' } }],
    [`/attach/view/${ids.image}?w=20`, { method: 'HEAD' }],
    [`/attach/view/${ids.image}?w=0`],
    [`/attach/view/${ids.image}?w=10&format=gif`],
    [`/attach/view/${ids.private}`],
    [`/attach/view/${ids.private}`, { headers: k.owner }],
    [`/attach/view/${ids.private}?access_token=${k.ownerToken}`],
    [`/attach/view/${ids.private}?access_token=${k.otherToken}`],
    [`/attach/view/${ids.private}?access_token=%E6%87%A6%0A`],
    [k.signedPath],
    [`${k.signedPath}x`],
    ['/attach/view/999999'],
  ]
}
