#!/usr/bin/env node
// The `attach-storage` command. From the published package it runs the built dist/cli.js with plain
// node. In the repository's workspace, where nothing is built, it runs the TypeScript source through
// tsx, with the workspace packages (store packages included) resolved to their sources.
import { existsSync } from 'node:fs'
import { register } from 'node:module'
import { fileURLToPath } from 'node:url'

const built = new URL('../dist/cli.js', import.meta.url)
let cli
if (existsSync(fileURLToPath(built))) {
  cli = await import(built.href)
} else {
  const { register: registerTsx } = await import('tsx/esm/api')
  registerTsx()
  // Registered last, so it runs first: adds the workspace's source condition to every resolution.
  const hook = `export async function resolve(specifier, context, next) {
    return next(specifier, { ...context, conditions: [...context.conditions, '@attach-storage/source'] })
  }`
  register(`data:text/javascript,${encodeURIComponent(hook)}`)
  cli = await import(new URL('../src/cli/main.ts', import.meta.url).href)
}
await cli.runProcess()
