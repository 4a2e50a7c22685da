#!/usr/bin/env node
/**
 * Builds the browser bundle (the client and `<attach-field>`, registered on load) with esbuild:
 * one minified ES module, dist/attach-storage-client.min.js, and prints its size, raw and gzipped.
 * src/bundle-size.test.ts builds it the same way and holds the gzipped size to 15 KB.
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

const result = await build(BROWSER_BUILD)
const code = result.outputFiles[0].contents
mkdirSync(new URL('./dist/', import.meta.url), { recursive: true })
writeFileSync(new URL('./dist/attach-storage-client.min.js', import.meta.url), code)
console.log(`dist/attach-storage-client.min.js: ${code.length} bytes, ${gzipSync(code, { level: 9 }).length} bytes gzipped`)
