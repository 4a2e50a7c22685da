#!/usr/bin/env node
/**
 * The browser bundle as a user gets it, in Debian's Chromium (driven by playwright-core): called by
 * scripts/check-packages.mjs once the tarballs are installed into its fresh project, or alone on a
 * project kept by `check-packages.mjs --keep` (`node scripts/check-browser-bundle.mjs <its app folder>`).
 *
 * In that project, a Hono host (`mountAttachStorage` on SQLite and a local folder, as docs/client.md
 * shows) serves the files of `@attach-storage/client/browser`, resolved through the installed tarball's
 * `exports`, and two plain HTML pages, each with an `<attach-field>` and a form posting to the host's
 * save route (`commitAttachContainer`):
 *
 * - `classic.html`: a plain `<script>` of attach-storage-client.iife.min.js; the token comes from a
 *   `<meta>` the host wrote, through `AttachStorage.AttachField.defaultClient`;
 * - `module.html`: `import {...} from '/js/attach-storage-client.min.js'` in a `<script type="module">`;
 *   the token comes from an async function fetching the host's `/session/token`.
 *
 * On each page a PNG is picked in the field's file input; the check asserts the field's value (the
 * temporary entry, its size and type), publishes the form, asserts the host's 201 and its record,
 * and reads the stored file back through the view route, byte for byte. A screenshot of each page
 * after the upload goes to examples/adapters-test/test-artifacts/browser-bundle/.
 *
 * Answers lines for check-packages.mjs's report: `[status, name, detail]`.
 */
import { spawn } from 'node:child_process'
import { existsSync, mkdirSync, mkdtempSync, realpathSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import { CHROMIUM_ARGS, CHROMIUM_PATH as CHROMIUM } from './chromium.mjs'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
const artifacts = join(root, 'examples', 'adapters-test', 'test-artifacts', 'browser-bundle')

/** The host, run in the fresh project: everything it imports comes from there (the tarballs). */
const SERVER_JS = `import { createHmac } from 'node:crypto'
import { mkdirSync, rmSync } from 'node:fs'
import { readFile } from 'node:fs/promises'
import { serve } from '@hono/node-server'
import { Hono } from 'hono'
import { createAttachStorage, openDatabase } from 'attach-storage'
import { mountAttachStorage } from '@attach-storage/hono'

rmSync('./browser-data', { recursive: true, force: true })
mkdirSync('./browser-data')
const db = await openDatabase({ type: 'sqlite', file: './browser-data/app.db' })
await db.schema
  .createTable('post')
  .addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
  .addColumn('title', 'text', (c) => c.notNull())
  .addColumn('created_dt', 'text', (c) => c.notNull())
  .execute()
const secret = 'browser-bundle-check-secret-32-bytes'
const storage = await createAttachStorage({
  config: {
    directory: { 'base-dir': './browser-data/files', 'tmp-dir': './browser-data/tmp' },
    domains: { post: { 'date-field': 'created_dt', categories: { image: { filters: ['image'] } } } },
  },
  db,
  jwt: { secret },
})
// The host's own session would hand out this token; here: user 1, one hour.
const b64 = (v) => Buffer.from(JSON.stringify(v)).toString('base64url')
const now = Math.floor(Date.now() / 1000)
const head = b64({ alg: 'HS256', typ: 'JWT' }) + '.' + b64({ sub: '1', iat: now, exp: now + 3600 })
const token = head + '.' + createHmac('sha256', secret).update(head).digest('base64url')

const app = new Hono()
mountAttachStorage(app, storage)

// The browser bundle, from the installed package, as docs/client.md ("The browser bundle") serves it.
const bundle = import.meta.resolve('@attach-storage/client/browser')
const dist = new URL('.', bundle)
const files = ['attach-storage-client.min.js', 'attach-storage-client.iife.min.js']
app.get('/js/:file', async (c) => {
  const file = c.req.param('file')
  if (!files.includes(file.replace(/\\.map$/, ''))) return c.notFound()
  const type = file.endsWith('.map') ? 'application/json' : 'text/javascript; charset=utf-8'
  return c.body(new Uint8Array(await readFile(new URL(file, dist))), 200, { 'content-type': type })
})
app.get('/session/token', (c) => c.text(token))

const FORM = \`<form id="post">
<label>Title <input name="title" value="A post from the browser bundle"></label>
<attach-field name="attachContainer" domain="post" category="image" accept="image/*" max-size="5MB" max-files="3"></attach-field>
<button id="publish" type="submit">Publish</button> <output id="status"></output>
</form>\`
const SUBMIT = \`async (event, getToken) => {
  event.preventDefault()
  const token = await getToken()
  const data = new FormData(event.target)
  const res = await fetch('/posts', {
    method: 'POST',
    headers: { authorization: 'Bearer ' + token, 'content-type': 'application/json' },
    body: JSON.stringify({ title: data.get('title'), attachContainer: JSON.parse(data.get('attachContainer')) }),
  })
  const body = await res.json()
  document.getElementById('status').textContent = res.status + ' ' + (body.attachments ? body.attachments.length + ' file(s) saved' : body.message)
  window.published = { status: res.status, body }
}\`
const page = (title, head, script) => \`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>\${title}</title><link rel="icon" href="data:,">\${head}</head>
<body><h1>\${title}</h1>\${FORM}<script\${script.module ? ' type="module"' : ''}>\${script.text}</script></body></html>\`

app.get('/classic.html', (c) =>
  c.html(
    page(
      'Plain script (IIFE bundle)',
      \`<meta name="attach-token" content="\${token}">
<script src="/js/attach-storage-client.iife.min.js"></script>
<script>
  const pageToken = () => document.querySelector('meta[name="attach-token"]').content
  AttachStorage.AttachField.defaultClient = new AttachStorage.AttachClient({ token: pageToken })
</script>\`,
      { text: \`document.getElementById('post').addEventListener('submit', (e) => (\${SUBMIT})(e, pageToken))\` },
    ),
  ),
)
app.get('/module.html', (c) =>
  c.html(
    page('Module script (ES module bundle)', '', {
      module: true,
      text: \`import { AttachClient, AttachField } from '/js/attach-storage-client.min.js'
const sessionToken = async () => (await fetch('/session/token')).text()
AttachField.defaultClient = new AttachClient({ token: sessionToken })
document.getElementById('post').addEventListener('submit', (e) => (\${SUBMIT})(e, sessionToken))\`,
    }),
  ),
)

app.post('/posts', async (c) => {
  const user = await storage.authenticate(c.req.raw)
  if (!user) return c.json({ code: 'unauthorized', message: 'A valid Bearer token is required' }, 401)
  const { title, attachContainer } = await c.req.json()
  const post = await db.insertInto('post').values({ title, created_dt: new Date().toISOString() }).returningAll().executeTakeFirstOrThrow()
  try {
    const attachments = await storage.commitAttachContainer({ refDomain: 'post', refKey: post.id, attachContainer, entity: post, user, request: c.req.raw })
    return c.json({ ...post, attachments }, 201)
  } catch (error) {
    return c.json({ code: error.code ?? 'save-failed', message: error.message }, error.status ?? 500)
  }
})

const server = serve({ fetch: app.fetch, hostname: '127.0.0.1', port: 0 }, (info) => {
  console.log(JSON.stringify({ port: info.port, bundle: new URL(bundle).pathname }))
})
process.on('SIGTERM', () => server.close(() => storage.close().then(() => db.destroy()).then(() => process.exit(0))))
`

/** Starts the host in `app`; resolves with its port and the bundle's path, and the child. */
function startHost(app) {
  writeFileSync(join(app, 'browser-server.mjs'), SERVER_JS)
  const child = spawn(process.execPath, ['browser-server.mjs'], { cwd: app, stdio: ['ignore', 'pipe', 'pipe'] })
  let output = ''
  return new Promise((done, fail) => {
    const timer = setTimeout(() => fail(new Error(`the host did not start in 30 s\n${output}`)), 30_000)
    child.stderr.on('data', (d) => (output += d))
    child.stdout.on('data', (d) => {
      output += d
      const first = output.split('\n')[0]
      if (!output.includes('\n')) return
      clearTimeout(timer)
      try {
        done({ child, ...JSON.parse(first) })
      } catch {
        fail(new Error(`the host said: ${output}`))
      }
    })
    child.on('exit', (code) => {
      clearTimeout(timer)
      fail(new Error(`the host exited ${code}\n${output}`))
    })
  })
}

/** One page: pick a PNG in the field, check its value, publish, read the stored file back. */
async function checkPage(context, base, variant, png) {
  const page = await context.newPage()
  const errors = []
  page.on('pageerror', (e) => errors.push(e.message))
  page.on('console', (m) => m.type() === 'error' && errors.push(m.text()))
  try {
    await page.goto(`${base}/${variant}.html`)
    await page.waitForFunction(() => customElements.get('attach-field') !== undefined, null, { timeout: 10_000 })
    await page.setInputFiles('attach-field input[type=file]', { name: 'photo.png', mimeType: 'image/png', buffer: png })
    await page.waitForFunction(
      () => {
        const field = document.querySelector('attach-field')
        return !field.busy && (field.hasErrors || JSON.parse(field.value).image?.length === 1)
      },
      null,
      { timeout: 15_000 },
    )
    const value = JSON.parse(await page.evaluate(() => document.querySelector('attach-field').value))
    const entry = value.image?.[0]
    const problems = []
    if (value.refDomain !== 'post') problems.push(`value.refDomain ${value.refDomain}`)
    if (!entry || typeof entry.savedName !== 'string') problems.push(`no temporary entry in the field's value ${JSON.stringify(value)}`)
    else if (entry.fileSize !== png.length || entry.fileType !== 'image/png' || entry.displayName !== 'photo.png')
      problems.push(`the temporary entry ${JSON.stringify(entry)} is not the ${png.length}-byte photo.png`)
    const hidden = await page.evaluate(() => document.querySelector('input[name="attachContainer"]')?.value)
    if (hidden !== JSON.stringify(value)) problems.push('the hidden input in the form does not hold the field value')
    mkdirSync(artifacts, { recursive: true })
    await page.screenshot({ path: join(artifacts, `${variant}.png`), fullPage: true })
    if (problems.length) return { problems }

    await page.click('#publish')
    await page.waitForFunction(() => window.published !== undefined, null, { timeout: 15_000 })
    const published = await page.evaluate(() => window.published)
    const record = published.body.attachments?.[0]
    if (published.status !== 201 || published.body.attachments?.length !== 1)
      return { problems: [`the host's save answered ${published.status} ${JSON.stringify(published.body)}`] }
    if (record.fileSize !== png.length || record.fileType !== 'image/png' || record.displayName !== 'photo.png')
      problems.push(`the record ${JSON.stringify(record)} is not the uploaded photo.png`)
    const stored = await fetch(base + record.url)
    const bytes = Buffer.from(await stored.arrayBuffer())
    if (stored.status !== 200 || !bytes.equals(png))
      problems.push(`GET ${record.url} answered ${stored.status}, ${bytes.length} bytes, not the upload`)
    await page.screenshot({ path: join(artifacts, `${variant}-published.png`), fullPage: true })
    if (errors.length) problems.push(`page errors: ${errors.join('; ')}`)
    return { problems, detail: `temporary ${entry.savedName}, then record ${record.id} at ${record.url}, ${bytes.length} bytes read back` }
  } finally {
    await page.close()
  }
}

/** Runs the check in `app` (a project with the tarballs installed); answers report lines. */
export async function checkBrowserBundle(app) {
  const name = 'browser bundle'
  if (!existsSync(CHROMIUM)) return [['FAIL', name, `no Chromium at ${CHROMIUM} (apt-get install chromium)`]]
  const { chromium } = await import('playwright-core')
  const sharp = (await import('sharp')).default
  const png = await sharp({ create: { width: 240, height: 160, channels: 3, background: { r: 40, g: 120, b: 200 } } })
    .png()
    .toBuffer()
  const lines = []
  let host
  let context
  const profile = mkdtempSync(join(tmpdir(), 'attach-bundle-chromium-'))
  try {
    host = await startHost(app)
    const installed = realpathSync(join(app, 'node_modules', '@attach-storage', 'client')) + sep
    if (!host.bundle.startsWith(installed) || host.bundle.includes(`${sep}src${sep}`))
      return [['FAIL', name, `@attach-storage/client/browser resolved to ${host.bundle}, not into the installed tarball ${installed}`]]
    context = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      viewport: { width: 800, height: 480 },
      args: CHROMIUM_ARGS,
    })
    const base = `http://127.0.0.1:${host.port}`
    for (const [variant, label] of [
      ['classic', 'plain <script> of dist/attach-storage-client.iife.min.js, token from a <meta>'],
      ['module', '<script type="module"> import of dist/attach-storage-client.min.js, token from an async function'],
    ]) {
      const t = Date.now()
      const { problems, detail } = await checkPage(context, base, variant, png)
      lines.push(
        problems.length
          ? ['FAIL', `${name} (${label})`, problems.join('; ')]
          : ['ok', `${name} (${label})`, `${detail} (${Date.now() - t} ms)`],
      )
    }
  } catch (error) {
    lines.push(['FAIL', name, error?.stack ?? String(error)])
  } finally {
    await context?.close().catch(() => {})
    host?.child.kill('SIGTERM')
    rmSync(profile, { recursive: true, force: true })
  }
  return lines
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const app = process.argv[2]
  if (!app) {
    console.error('usage: node scripts/check-browser-bundle.mjs <folder of a project with the tarballs installed>')
    process.exit(2)
  }
  const lines = await checkBrowserBundle(resolve(app))
  for (const [status, name, detail] of lines) console.log(`${status.padEnd(4)} ${name}${detail ? `: ${detail}` : ''}`)
  process.exit(lines.some((l) => l[0] === 'FAIL') ? 1 : 0)
}
