#!/usr/bin/env node
// The `attach-storage` command. An installed package (dist/ and this file only) runs the built
// dist/cli.js with plain node. In the repository's workspace, where src/ is there, workspace.js runs
// the TypeScript source instead, so nothing needs building and a stale build never runs there.
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'

const inWorkspace = existsSync(fileURLToPath(new URL('../src/cli/main.ts', import.meta.url)))
const cli = inWorkspace ? await import('./workspace.js').then((w) => w.loadSource()) : await import('../dist/cli.js')
await cli.runProcess()
