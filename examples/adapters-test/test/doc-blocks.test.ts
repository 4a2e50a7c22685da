/**
 * Docs that cannot drift: every TypeScript and JavaScript block of README.md and docs/**\/*.md is
 * type-checked against the workspace packages (doc-blocks-kit.ts says how, and which markers a page
 * may put before a block), one test per block, failing with the page's file and line of each error.
 *
 * The embedding examples of docs/frameworks/ (the mount, then the host's save routes) also run, in
 * process, on SQLite and a temporary folder: an upload, /board committing it with its post in one
 * transaction, the stored file read back, a refused commit leaving no post; /tickets (the entity in
 * another database) refusing before its insert, then saving. README's embedding example is run from
 * the packed tarballs by scripts/check-packages.mjs.
 */
import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs'
import { createServer, type Server } from 'node:http'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { SignJWT } from 'jose'
import sharp from 'sharp'
import { beforeAll, describe, expect, it } from 'vitest'
import {
  type BlockProblem,
  checkBlocks,
  type DocBlock,
  docPages,
  extractBlocks,
  modulesOf,
  ROOT,
  tsdocExamples,
  where,
} from './doc-blocks-kit.js'

const blocks = docPages().flatMap((page) => extractBlocks(page))
const examples = tsdocExamples()
const label = (b: DocBlock) => `${where(b)} (${b.lang}${b.mode === 'check' ? '' : `, ${b.mode}`})`

describe('doc blocks type-check against the packages', () => {
  // One program for the TypeScript blocks and the TSDoc examples, one for the JavaScript blocks (it
  // reuses the parsed files).
  let problems: Map<DocBlock, BlockProblem[]>
  beforeAll(() => {
    problems = checkBlocks([...blocks, ...examples])
  }, 300_000)

  it('finds the blocks of README.md and docs/', () => {
    expect(blocks.filter((b) => b.file === 'README.md' && b.lang === 'ts').length).toBeGreaterThanOrEqual(1)
    expect(blocks.length).toBeGreaterThanOrEqual(25)
    // A marker naming a host thing that does not exist is an error of the page, not silently nothing.
    for (const b of blocks) expect(b.unknownUses, where(b)).toEqual([])
    expect(examples.length).toBeGreaterThanOrEqual(30) // the TSDoc @example blocks of packages/*/src
  })

  for (const block of [...blocks, ...examples]) {
    if (block.mode === 'skip') {
      it.skip(`${label(block)}: ${block.reason || 'skipped by its marker'}`, () => {})
      continue
    }
    it(label(block), () => {
      const found = problems.get(block) ?? []
      const report = found.map((p) => `${p.at}: ${p.message}`).join('\n')
      expect(report, `${where(block)} does not type-check:\n${report}`).toBe('')
    })
  }
})

/** The host's own database of the framework pages' save routes (`uses db`), for real. */
const hostModule = (dir: string) => `import { openDatabase } from 'attach-storage'

export const db = await openDatabase({ type: 'sqlite', file: ${JSON.stringify(join(dir, 'host.db'))} })
await db.schema
  .createTable('board')
  .ifNotExists()
  .addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
  .addColumn('title', 'text', (c) => c.notNull())
  .addColumn('body', 'text')
  .addColumn('created_by', 'text', (c) => c.notNull())
  .addColumn('created_dt', 'text', (c) => c.notNull())
  .execute()
await db.schema
  .createTable('post')
  .ifNotExists()
  .addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
  .addColumn('title', 'text', (c) => c.notNull())
  .addColumn('created_dt', 'text', (c) => c.notNull())
  .execute()
`

/** What listens on a port in a page's example; the test listens on port 0 itself. */
const LISTEN = /^(await )?(serve\(\{ fetch: app\.fetch, port: \d+ \}\)|app\.listen\(.*\))\s*$/m

interface Served {
  base: string
  close(): Promise<unknown>
  /** Hono's `app.fetch`, called without a socket. */
  fetch?: (request: Request) => Response | Promise<Response>
}

/** How the test serves each framework's `app` (the page's `app`, untyped here). */
const SERVE: Record<string, (app: any) => Promise<Served>> = {
  async hono(app) {
    return { base: 'http://doc.test', close: async () => {}, fetch: (request) => app.fetch(request) }
  },
  async express(app) {
    const server: Server = createServer(app).listen(0, '127.0.0.1')
    await new Promise((r) => server.once('listening', r))
    const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`
    return { base, close: () => new Promise((r) => server.close(r)) }
  },
  async fastify(app) {
    await app.listen({ port: 0, host: '127.0.0.1' })
    return { base: `http://127.0.0.1:${(app.server.address() as AddressInfo).port}`, close: () => app.close() }
  },
}

describe("the framework pages' embedding examples run", () => {
  const secret = 'doc-blocks-test-secret-0123456789'
  for (const framework of Object.keys(SERVE)) {
    const page = `docs/frameworks/${framework}.md`
    it(`${page}: the mount, /board saving a post and its upload in one transaction, /tickets checking first`, async () => {
      const main = modulesOf(extractBlocks(page)).find((m) => m.text.includes('createAttachStorage(') && m.text.includes("'/board'"))
      expect(main, `${page} has no block creating the storage that a block with the /board save route continues`).toBeDefined()
      expect(main!.text, `${page}: its example no longer listens as the test expects (${LISTEN})`).toMatch(LISTEN)
      const dir = mkdtempSync(join(tmpdir(), `doc-run-${framework}-`))
      const previous = process.env.JWT_SECRET
      process.env.JWT_SECRET = secret
      let served: Served | undefined
      let storage: { close(): Promise<void> } | undefined
      let db: any
      try {
        // The page's module, as a user pastes it, with its data folder in the temporary one and no port.
        symlinkSync(join(ROOT, 'node_modules'), join(dir, 'node_modules'), 'dir')
        mkdirSync(join(dir, 'data'))
        writeFileSync(join(dir, 'host.ts'), hostModule(dir))
        const text = main!.text.replaceAll("'./data/", `'${dir}/data/`).replace(LISTEN, '')
        writeFileSync(join(dir, 'example.ts'), `${text}\nexport { app, storage }\n`)
        const example = await import(join(dir, 'example.ts'))
        storage = example.storage
        db = (await import(join(dir, 'host.ts'))).db
        served = await SERVE[framework]!(example.app)
        const call = (path: string, init: RequestInit = {}) => {
          const request = new Request(served!.base + path, init)
          return served!.fetch ? served!.fetch(request) : fetch(request)
        }
        const token = await new SignJWT({})
          .setProtectedHeader({ alg: 'HS256' })
          .setSubject('alice')
          .setExpirationTime('1h')
          .sign(new TextEncoder().encode(secret))
        const auth = { authorization: `Bearer ${token}` }

        const png = await sharp({ create: { width: 8, height: 6, channels: 3, background: '#08f' } })
          .png()
          .toBuffer()
        const form = new FormData()
        form.set('refDomain', 'board')
        form.set('refCategory', 'image')
        form.set('file', new Blob([new Uint8Array(png)]), 'photo.png')
        const uploaded = await call('/api/storage/attach/tmp', { method: 'POST', headers: auth, body: form })
        expect(uploaded.status).toBe(200)
        const savedName = (await uploaded.json()).files[0].name
        const post = (body: unknown, headers: Record<string, string> = auth) =>
          call('/board', { method: 'POST', headers: { ...headers, 'content-type': 'application/json' }, body: JSON.stringify(body) })

        const anonymous = await post({ title: 'x' }, {})
        expect([anonymous.status, (await anonymous.json()).code]).toEqual([401, 'unauthorized'])
        const attachContainer = { refDomain: 'board', image: [{ savedName, displayName: 'photo.png' }] }
        const saved = await post({ title: 'Hello', body: 'with a photo', attachContainer })
        const answer = await saved.json()
        expect(saved.status, JSON.stringify(answer)).toBe(201)
        expect(answer).toMatchObject({ title: 'Hello', created_by: 'alice' })
        const [record] = answer.attachContainer.image
        expect(record).toMatchObject({ displayName: 'photo.png', fileSize: png.length, refKey: String(answer.id) })
        const view = await call(`/assets/storage/attach/view/${record.id}`, { headers: auth })
        expect(view.status).toBe(200)
        expect(Buffer.from(await view.arrayBuffer()).equals(png)).toBe(true)
        // A second save of the same temporary file is refused with the route's JSON error (the page's
        // catch): the file was committed, not copied. The pages save in one transaction: no post is left.
        const again = await post({ title: 'Again', attachContainer })
        const refusal = await again.json()
        expect(again.status).toBeGreaterThanOrEqual(400)
        expect(refusal).toMatchObject({ code: expect.any(String), message: expect.any(String) })
        if (refusal.failures) expect(refusal.failures).toMatchObject([{ code: 'not-found', displayName: 'photo.png' }])
        const titles = async (table: string) => (await db!.selectFrom(table).select('title').execute()).map((r: any) => r.title)
        expect(await titles('board')).toEqual(['Hello'])

        // The other-database route (/tickets): checkAttachContainer() refuses before the insert, then
        // a fresh upload is inserted and committed.
        const ticket = (body: unknown) =>
          call('/tickets', { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: JSON.stringify(body) })
        const refused = await ticket({ title: 'Refused', attachContainer })
        expect([refused.status, (await refused.json()).ok]).toEqual([400, false])
        expect(await titles('post')).toEqual([])
        const second = new FormData()
        second.set('refDomain', 'board')
        second.set('file', new Blob(['minutes']), 'minutes.txt')
        const upload2 = (await (await call('/api/storage/attach/tmp', { method: 'POST', headers: auth, body: second })).json()).files[0]
        const created = await ticket({ title: 'Ticket', attachContainer: { refDomain: 'board', default: [{ savedName: upload2.name }] } })
        const createdBody = await created.json()
        expect(created.status, JSON.stringify(createdBody)).toBe(201)
        expect(await titles('post')).toEqual(['Ticket'])
        const bag = await example.storage.lookup('board', String(createdBody.id))
        expect(bag.default.map((r: { fileSize: number }) => r.fileSize)).toEqual([7])
      } finally {
        await served?.close()
        await storage?.close()
        await db?.destroy()
        if (previous === undefined) delete process.env.JWT_SECRET
        else process.env.JWT_SECRET = previous
        rmSync(dir, { recursive: true, force: true })
      }
    })
  }
})
