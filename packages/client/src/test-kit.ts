/**
 * For this package's tests (not shipped): attach-storage on a SQLite file in a temporary folder, its
 * handlers, and an AttachClient that calls them in-process, signed in as user 7.
 */
import { createHmac } from 'node:crypto'
import { mkdtemp, rm } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createAttachHandler, createAttachStorage, type AttachmentView, type AttachStorage } from 'attach-storage'
import { AttachClient } from './client.js'
import { AttachContainerBuilder } from './container.js'

/** An HS256 JWT for `sub`, valid one hour. */
export function signToken(secret: string, sub: string): string {
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url')
  const head = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, exp: Math.floor(Date.now() / 1000) + 3600 })}`
  return `${head}.${createHmac('sha256', secret).update(head).digest('base64url')}`
}

export interface TestServer {
  storage: AttachStorage
  handler: ReturnType<typeof createAttachHandler>
  /** A client whose `fetch` is the handler's (no socket). */
  client: AttachClient
  /** A token of user 7. */
  token: string
  /** Uploads `file` to `category` of domain `demo`, saves it under `refKey`, waits for its variants, looks it up. */
  save(file: File, refKey: string, category: string): Promise<AttachmentView>
  close(): Promise<void>
}

const SECRET = 'client-test-kit-secret-0123456789'

/** attach-storage with domain `demo` and the given categories. */
export async function startTestServer(categories: Record<string, object>): Promise<TestServer> {
  const dir = await mkdtemp(join(tmpdir(), 'attach-client-kit-'))
  const storage = await createAttachStorage({
    config: {
      directory: { baseDir: join(dir, 'files'), tmpDir: join(dir, 'tmp') },
      db: { type: 'sqlite', file: join(dir, 'attach.db') },
      domains: { demo: { categories } },
    },
    jwt: { secret: SECRET },
    logger: { info() {}, warn() {}, error() {} },
  })
  const handler = createAttachHandler(storage)
  const token = signToken(SECRET, '7')
  const client = new AttachClient({ baseUrl: 'http://app.test', token, fetch: (i, init) => handler.fetch(new Request(i, init)) })
  return {
    storage,
    handler,
    client,
    token,
    async save(file, refKey, category) {
      const up = await client.upload(file, { refDomain: 'demo', refCategory: category })
      if (!up.ok) throw new Error(`${file.name}: ${up.error.message}`)
      const saved = await client.save(
        'demo',
        refKey,
        new AttachContainerBuilder('demo').category(category, [{ temporary: up.value }]).build(),
      )
      if (!saved.ok) throw new Error(saved.error.message)
      await storage.variantJobsIdle()
      const looked = await client.lookup('demo', refKey, category)
      if (!looked.ok) throw new Error(looked.error.message)
      return (looked.value[category] as AttachmentView[])[0]!
    },
    async close() {
      await storage.close()
      await rm(dir, { recursive: true, force: true })
    },
  }
}
