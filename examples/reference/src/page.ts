import { createHmac } from 'node:crypto'
import { readFile } from 'node:fs/promises'
import { fileURLToPath } from 'node:url'

/**
 * The board page of the reference server: `GET /` (the HTML), `GET /page/app.js` (the page's script with
 * the client and `<attach-field>`, bundled by esbuild on first use), `GET /page/app.css`, and
 * `GET /page/dev-token` (a development token, only with the development JWT secret). Every answer
 * carries a Content-Security-Policy without `unsafe-inline`: the page loads only its own script and
 * stylesheet, and `<attach-field>` styles itself through a constructed stylesheet.
 *
 * Each example app routes `GET /` and `GET /page/*` here.
 */
export interface PageOptions {
  /** Answers a development token, or undefined when the server does not hand them out. */
  devToken?: () => string
  /** The CDN address (`ATTACH_CDN_URL`): images load from there too. */
  cdnUrl?: string
}

const here = (path: string) => fileURLToPath(new URL(path, import.meta.url))

/** A development token: HS256, `sub` 1, valid 12 hours. */
export function signDevToken(secret: string, sub = '1'): string {
  const b64 = (v: unknown) => Buffer.from(JSON.stringify(v)).toString('base64url')
  const now = Math.floor(Date.now() / 1000)
  const head = `${b64({ alg: 'HS256', typ: 'JWT' })}.${b64({ sub, iat: now, exp: now + 12 * 3600 })}`
  return `${head}.${createHmac('sha256', secret).update(head).digest('base64url')}`
}

const HTML = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Board · attach-storage</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/page/app.css">
<script type="module" src="/page/app.js"></script>
</head>
<body>
<header>
  <h1><a href="#/">Board</a></h1>
  <div id="auth" role="status"></div>
</header>
<main>
  <section id="board-view">
    <section class="card" aria-labelledby="new-post-title">
      <h2 id="new-post-title">New post</h2>
      <form id="new-post" method="post" action="/board">
        <label>Title <input name="title" required maxlength="200" autocomplete="off"></label>
        <label>Text <textarea name="body" rows="3"></textarea></label>
        <fieldset>
          <legend>Images (shown with thumbnails)</legend>
          <attach-field name="images" domain="board" category="image" max-size="20MB" max-files="20"></attach-field>
        </fieldset>
        <fieldset>
          <legend>Files (any type)</legend>
          <attach-field name="attachContainer" domain="board" max-files="50"></attach-field>
        </fieldset>
        <div class="row"><button type="submit">Publish</button><span id="form-status" role="status" aria-live="polite"></span></div>
      </form>
    </section>
    <section class="card" aria-labelledby="posts-title">
      <h2 id="posts-title">Posts</h2>
      <ul id="post-list" class="posts"></ul>
      <nav id="pager" aria-label="Pages"></nav>
    </section>
  </section>
  <section id="post-view" class="card" hidden></section>
</main>
</body>
</html>
`

let bundle: Promise<string> | undefined

/** The page's script: src/page/app.ts with the client and `<attach-field>`, one minified module. */
async function pageScript(): Promise<string> {
  const { build } = await import('esbuild')
  const out = await build({
    entryPoints: [here('./page/app.ts')],
    bundle: true,
    minify: true,
    format: 'esm',
    target: 'es2022',
    platform: 'browser',
    conditions: ['@attach-storage/source'],
    write: false,
    legalComments: 'none',
  })
  return out.outputFiles[0]!.text
}

export function createPage(options: PageOptions = {}): (request: Request) => Promise<Response> {
  const cdnOrigin = options.cdnUrl ? ` ${new URL(options.cdnUrl).origin}` : ''
  const csp = [
    "default-src 'self'",
    "script-src 'self'",
    "style-src 'self'",
    `img-src 'self' blob: data:${cdnOrigin}`,
    "connect-src 'self'",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ')
  const answer = (body: string, type: string, status = 200, cache = 'no-cache') =>
    new Response(body, {
      status,
      headers: {
        'content-type': type,
        'content-security-policy': csp,
        'x-content-type-options': 'nosniff',
        'referrer-policy': 'same-origin',
        'cache-control': cache,
      },
    })
  const error = (status: number, code: string, message: string) =>
    answer(JSON.stringify({ code, message }), 'application/json; charset=utf-8', status, 'no-store')

  return async (request) => {
    const path = new URL(request.url).pathname
    if (request.method !== 'GET' && request.method !== 'HEAD') return error(405, 'method-not-allowed', 'Only GET is served here')
    switch (path) {
      case '/':
        return answer(HTML, 'text/html; charset=utf-8')
      case '/page/app.css':
        return answer(await readFile(here('./page/app.css'), 'utf8'), 'text/css; charset=utf-8')
      case '/page/app.js':
        try {
          bundle ??= pageScript()
          return answer(await bundle, 'text/javascript; charset=utf-8')
        } catch (err) {
          bundle = undefined
          return error(500, 'internal-error', `The page script could not be built: ${(err as Error).message}`)
        }
      case '/page/dev-token':
        if (!options.devToken) return error(404, 'not-found', 'No development token: the server has its own JWT secret')
        return answer(JSON.stringify({ token: options.devToken() }), 'application/json; charset=utf-8', 200, 'no-store')
      default:
        return error(404, 'not-found', 'No such page')
    }
  }
}
