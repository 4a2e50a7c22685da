import { fileURLToPath } from 'node:url'
import { gzipSync } from 'node:zlib'
import { build } from 'esbuild'
import { expect, it } from 'vitest'

// The browser bundle as build-browser.mjs makes it: the client and <attach-field>, minified.
it('the browser bundle (client and <attach-field>) is at most 15 KB minified and gzipped', async () => {
  const out = await build({
    entryPoints: [fileURLToPath(new URL('./browser.ts', import.meta.url))],
    bundle: true,
    minify: true,
    format: 'esm',
    target: 'es2022',
    platform: 'browser',
    write: false,
    legalComments: 'none',
    metafile: true,
  })
  const code = out.outputFiles[0]!.contents
  const gzipped = gzipSync(code, { level: 9 }).length
  console.log(`browser bundle: ${code.length} bytes minified, ${gzipped} bytes gzipped`)
  // Nothing of the server package comes along (its types only are imported); thumbhash is the one dependency.
  const inputs = Object.keys(out.metafile.inputs)
  expect(inputs.filter((f) => !f.includes('packages/client/src/') && !f.includes('node_modules/thumbhash/'))).toEqual([])
  expect(gzipped).toBeLessThanOrEqual(15 * 1024)
})
