#!/usr/bin/env node
/**
 * Builds the browser bundle (the client and `<attach-field>`, registered on load) with esbuild into
 * dist/, each with a source map carrying its sources (the package ships no src/):
 *
 * - attach-storage-client.min.js: a minified ES module, for `<script type="module">` and `import`
 *   (the package's `./browser` export; its types are attach-storage-client.min.d.ts, written here);
 * - attach-storage-client.iife.min.js: the same as a classic script, for a plain `<script>`: it sets
 *   the global `AttachStorage` (`AttachStorage.AttachClient`, `AttachStorage.AttachField`, ...).
 *
 * `npm run build` at the root runs it after tsup (which empties dist/ first); it prints the sizes, raw
 * and gzipped. src/bundle-size.test.ts builds the ES module the same way and holds it to 15 KB gzipped.
 */
import { mkdirSync, writeFileSync } from 'node:fs'
import { gzipSync } from 'node:zlib'
import { build } from 'esbuild'

export const BROWSER_BUILD = {
  entryPoints: [new URL('./src/browser.ts', import.meta.url).pathname],
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2022',
  platform: 'browser',
  write: false,
  legalComments: 'none',
}

const dist = new URL('./dist/', import.meta.url)
mkdirSync(dist, { recursive: true })

for (const [file, options] of [
  ['attach-storage-client.min.js', {}],
  ['attach-storage-client.iife.min.js', { format: 'iife', globalName: 'AttachStorage' }],
]) {
  const out = new URL(file, dist).pathname
  const result = await build({ ...BROWSER_BUILD, ...options, outfile: out, sourcemap: 'linked', sourcesContent: true })
  let size = 0
  let gzipped = 0
  for (const output of result.outputFiles) {
    writeFileSync(output.path, output.contents)
    if (output.path === out) {
      size = output.contents.length
      gzipped = gzipSync(output.contents, { level: 9 }).length
    }
  }
  console.log(`dist/${file}: ${size} bytes, ${gzipped} bytes gzipped (+ ${file}.map)`)
}

// The ES module's declarations: what src/browser.ts exports, from the declarations tsup wrote.
writeFileSync(
  new URL('attach-storage-client.min.d.ts', dist),
  `/** The browser bundle: the client, and \`<attach-field>\` registered on load. */
export * from './index.js'
export { AttachField, defineAttachField, parseSize } from './element.js'
`,
)
