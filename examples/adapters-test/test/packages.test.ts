/**
 * The published packages as a user installs them: runs `scripts/check-packages.mjs` (build, `npm pack`,
 * publint, @arethetypeswrong/cli, install of the tarballs into a fresh project outside the workspace,
 * and there the README's embedding example, the source maps and a mapped stack trace). It lives in this project because vitest finds projects
 * by their package.json under packages/ and examples/; it builds into the packages' dist/ like
 * `npm run build`, which no other test reads, and the script's lock keeps two checks of one tree apart.
 * It runs at a lower CPU priority (`--nice`) so that the timed tests beside it keep their pace.
 */
import { spawn } from 'node:child_process'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')

function checkPackages(): Promise<{ code: number | null; output: string }> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(root, 'scripts', 'check-packages.mjs'), '--nice'], {
      cwd: root,
      stdio: ['ignore', 'pipe', 'pipe'],
    })
    let output = ''
    child.stdout.on('data', (d: Buffer) => (output += d.toString()))
    child.stderr.on('data', (d: Buffer) => (output += d.toString()))
    child.on('error', reject)
    child.on('close', (code) => resolve({ code, output }))
  })
}

describe('the published packages', () => {
  it('build, pack, pass publint and attw, install from their tarballs into a fresh project and run the README example there', async () => {
    const { code, output } = await checkPackages()
    const lines = output.split('\n')
    // The whole report is the failure message: one line per check.
    expect(
      lines.filter((l) => l.startsWith('FAIL')),
      output,
    ).toEqual([])
    expect(code, output).toBe(0)
    for (const check of [
      'ok   build',
      'ok   publint attach-storage',
      'ok   attw attach-storage',
      'ok   install the tarballs into a fresh project',
      'ok   import every package and subpath',
      "ok   type-check the README's embedding example",
      'ok   example: temporary upload',
      'ok   example: confirmed save',
      'ok   example: view',
      'ok   example: resized view',
      'ok   browser bundle (plain <script>', // scripts/check-browser-bundle.mjs (its module line, if FAIL, fails above)
      // The installed maps name shipped src/ files, and a stack under --enable-source-maps names them.
      'ok   source maps resolve in the installed packages',
      'ok   stack trace under node --enable-source-maps names installed files',
    ]) {
      expect(
        lines.some((l) => l.startsWith(check)),
        `${check}\n${output}`,
      ).toBe(true)
    }
  }, 900_000)
})
