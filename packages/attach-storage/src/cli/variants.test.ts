/** `attach-storage variants make|purge` over named variants, on a real SQLite file and the local store. */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { Writable } from 'node:stream'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { makeKit, png, saveFile, type Kit } from '../testing/handler-kit.js'
import { pdfBytes } from '../testing/pdf-kit.js'
import { main } from './main.js'
import type { CliIo } from './runtime.js'

class Sink extends Writable {
  text = ''
  override _write(chunk: Buffer, _e: BufferEncoding, cb: () => void) {
    this.text += chunk.toString()
    cb()
  }
}

const VARIANTS = { thumb: { w: 20, h: 20 }, wide: { w: 40, format: 'webp' as const } }

describe('attach-storage variants make and purge', () => {
  let kit: Kit
  let config: string
  const run = async (args: string[]) => {
    const stdout = new Sink()
    const stderr = new Sink()
    const io: CliIo = { stdout, stderr, env: {}, cwd: kit.dir, signal: new AbortController().signal }
    const code = await main(['--config', config, ...args], io)
    return { code, stdout: stdout.text, stderr: stderr.text, json: () => JSON.parse(stdout.text) }
  }
  const lookup = async (refKey: string) => (await (await kit.call(`/api/storage/attach/demo/${refKey}/gallery`)).json()).gallery

  beforeAll(async () => {
    // A server that runs no background work: the saves queue nothing, the command makes them.
    kit = await makeKit('sqlite', {
      backgroundWork: false,
      registrar: (registry) => {
        registry.registerCategory('demo', 'gallery', { variants: VARIANTS })
      },
    })
    config = join(kit.dir, 'attach.json')
    const attach = {
      directory: { baseDir: kit.baseDir, tmpDir: kit.tmpDir },
      db: { type: 'sqlite', file: kit.dbLocation },
      domains: { demo: { categories: { gallery: { variants: VARIANTS } } } },
    }
    writeFileSync(config, JSON.stringify({ attach }))
  })
  afterAll(() => kit?.cleanup())

  it('makes what is missing once, then nothing; purge forgets them', async () => {
    for (let i = 0; i < 3; i++) await saveFile(kit, await png(80 + i, 60), `p${i}.png`, 'cli', 'gallery')
    await saveFile(kit, await png(10, 10), 'small.png', 'cli', 'gallery')
    await saveFile(kit, new Blob(['words'], { type: 'text/plain' }), 'notes.txt', 'cli', 'gallery')
    expect((await lookup('cli'))[0].variants).toEqual({})

    const first = await run(['variants', 'make', '--domain', 'demo', '--json'])
    expect(first.code, first.stderr).toBe(0)
    expect(first.stderr).toContain('"progress":"variants make"')
    // small.png is within thumb's box (its original serves) but still made as wide's WebP.
    expect(first.json()).toMatchObject({ domain: 'demo', records: 5, made: 7, original: 1, existing: 0, problems: [], interrupted: false })
    const items = await lookup('cli')
    expect(items.map((x: { variants?: object }) => Object.keys(x.variants ?? {}).sort())).toEqual([
      ['thumb', 'wide'],
      ['thumb', 'wide'],
      ['thumb', 'wide'],
      ['thumb', 'wide'],
      [],
    ])
    const thumb = await kit.call(items[0].variants.thumb, { user: null })
    expect(thumb.status).toBe(200)
    expect(thumb.headers.get('content-type')).toBe('image/png')

    const again = await run(['variants', 'make', '--domain', 'demo', '--category', 'gallery', '--json'])
    expect(again.json()).toMatchObject({ made: 0, original: 0, existing: 8 })
    const stats = await run(['stats', '--json'])
    expect(stats.json().named).toEqual([
      { name: 'thumb', count: 4 },
      { name: 'wide', count: 4 },
    ])

    const purged = await run(['variants', 'purge', '--domain', 'demo', '--json'])
    expect(purged.json()).toMatchObject({ removed: 7, namedForgotten: 8 })
    expect((await lookup('cli'))[0].variants).toEqual({})
    expect((await kit.files()).filter((f) => f.includes('_v/'))).toEqual([])
  })

  it('makes the preview and media of a PDF saved while nothing ran in the background, then its named variants from it', async () => {
    // What the test before purged is made again first, so this run counts the PDF's alone.
    expect((await run(['variants', 'make', '--domain', 'demo'])).code).toBe(0)
    const pdf = new Blob([new Uint8Array(pdfBytes({ pages: 2 }))], { type: 'application/pdf' })
    const rec = await saveFile(kit, pdf, 'two.pdf', 'cli-pdf', 'gallery')
    const [before] = await lookup('cli-pdf')
    expect([before.preview, before.media]).toEqual(['pending', null])
    const made = await run(['variants', 'make', '--domain', 'demo', '--json'])
    expect(made.code, made.stderr).toBe(0)
    expect(made.json()).toMatchObject({ previews: 1, previewsFailed: 0, made: 2, problems: [] })
    const [after] = await lookup('cli-pdf')
    expect(after).toMatchObject({ id: rec.id, preview: 'made', media: { pages: 2 } })
    expect(Object.keys(after.variants).sort()).toEqual(['thumb', 'wide'])
    const wide = await kit.call(after.variants.wide, { user: null })
    expect(wide.headers.get('content-type')).toBe('image/webp')
    const again = await run(['variants', 'make', '--domain', 'demo', '--json'])
    expect(again.json()).toMatchObject({ previews: 0, made: 0 })
    // stats counts the preview apart from the named variants.
    const stats = await run(['stats', '--json'])
    expect(stats.json().previews).toBe(1)
    expect(stats.json().named.map((n: { name: string }) => n.name)).toEqual(['thumb', 'wide'])
  })

  it('refuses a domain, category or action it does not know, with exit 2', async () => {
    expect((await run(['variants', 'make', '--domain', 'nowhere'])).code).toBe(2)
    const cat = await run(['variants', 'make', '--domain', 'demo', '--category', 'nope'])
    expect(cat.code).toBe(2)
    expect(cat.stderr).toContain('category "nope"')
    expect((await run(['variants', 'make', '--domain', 'demo', '--concurrency', '0'])).code).toBe(2)
    expect((await run(['variants', 'remake', '--domain', 'demo'])).code).toBe(2)
  })
})
