/**
 * Active content (what the binary routes serve as a download only: HTML, SVG, XML, JavaScript, ...)
 * never gets a public CDN address: on the CDN's or bucket's origin such a page would run. Its `url` is
 * the binary route, on every path that hands out addresses (lookup, list, save answer, direct-url,
 * direct upload).
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeKit, type Kit } from '../testing/handler-kit.js'

const API = '/api/storage'
const ASSETS = '/assets/storage'
const CDN = 'https://cdn.example.com/'
type Rec = Record<string, any>

const FILES: Array<[string, string, boolean]> = [
  ['page.html', '<!doctype html><html><body><script>alert(document.domain)</script></body></html>', true],
  ['drawing.svg', '<svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)"><rect width="1" height="1"/></svg>', true],
  ['feed.xml', '<?xml version="1.0"?><x:script xmlns:x="http://www.w3.org/1999/xhtml">alert(1)</x:script>', true],
  ['app.js', 'alert(document.cookie)\n', true],
  ['notes.txt', 'plain words', false],
]

describe('active content never gets a CDN address', () => {
  let kit: Kit
  let saved: Rec[]
  beforeAll(async () => {
    kit = await makeKit('sqlite', { config: { cdnUrl: CDN } })
    const bag: Rec = { default: [] }
    for (const [name, content] of FILES) {
      const res = await kit.upload(`${API}/attach/tmp`, [
        ['refDomain', 'demo'],
        ['refCategory', 'default'],
        ['file', new Blob([content]), name],
      ])
      expect(res.status).toBe(200)
      bag.default.push({ savedName: ((await res.json()) as { files: Rec[] }).files[0]!.name })
    }
    const res = await kit.call(`${API}/attach/demo/active`, { method: 'POST', body: JSON.stringify(bag) })
    expect(res.status).toBe(200)
    saved = ((await res.json()) as { attachList: Rec[] }).attachList
  })
  afterAll(async () => kit?.cleanup())

  it('answers the binary route (no cdnUrl) for HTML, SVG, XML and JavaScript, the CDN for plain text: save, lookup, list', async () => {
    const lookup = ((await (await kit.call(`${API}/attach/demo/active/default`)).json()) as { default: Rec[] }).default
    const list = (await (await kit.call(`${API}/attach?refDomain=demo&refKeyList=active`)).json()) as Rec[]
    for (const answer of [saved, lookup, list]) {
      expect(answer.map((r) => r.displayName)).toEqual(FILES.map(([n]) => n))
      answer.forEach((r, i) => {
        const [, , active] = FILES[i]!
        if (active) {
          expect(r.url, r.displayName).toBe(`${ASSETS}/attach/view/demo/active/default/${i}`)
          expect(r.cdnUrl, r.displayName).toBeUndefined()
        } else {
          expect(r.url).toBe(`${CDN}${r.savedDir.replace(/^\//, '')}${r.savedName}`)
        }
      })
    }
    expect(saved.slice(0, 4).map((r) => r.fileType)).toEqual(['text/html', 'image/svg+xml', 'application/xml', 'text/javascript'])
    // The binary route serves it as a download, never inline.
    const view = await kit.call(saved[0]!.url)
    expect(view.headers.get('content-disposition')).toMatch(/^attachment;/)
    expect(view.headers.get('content-type')).toBe('application/octet-stream')
  })

  it('answers direct-url with the by-id route for active content', async () => {
    const at = async (index: number) =>
      (await kit.call(`${API}/direct-url`, { method: 'POST', body: JSON.stringify({ refDomain: 'demo', refKey: 'active', index }) })).json()
    expect(await at(0)).toBe(`${ASSETS}/attach/view/${saved[0]!.id}`)
    expect(await at(4)).toMatch(new RegExp(`^${CDN}`))
  })

  it('gives a direct upload of HTML the attach-direct route, a text file the CDN', async () => {
    const res = await kit.upload(`${API}/attach/direct`, [
      ['refDomain', 'demo'],
      ['refCategory', 'default'],
      ['files', new Blob([FILES[0]![1]]), 'page.html'],
      ['files', new Blob(['words']), 'words.txt'],
    ])
    expect(res.status).toBe(200)
    const [html, txt] = ((await res.json()) as { files: Rec[] }).files
    expect(html!.url).toMatch(new RegExp(`^${ASSETS}/attach-direct/view/demo/default\\?path=`))
    expect(txt!.url).toMatch(new RegExp(`^${CDN}`))
  })
})
