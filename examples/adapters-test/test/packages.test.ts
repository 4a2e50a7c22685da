/**
 * The published packages as a user installs them: runs `scripts/check-packages.mjs` (build, `npm pack`,
 * publint, @arethetypeswrong/cli, install of the tarballs into a fresh project outside the workspace,
 * and there the README's embedding example, the source maps and a mapped stack trace). It lives in this project because vitest finds projects
 * by their package.json under packages/ and examples/; it builds into the packages' dist/ like
 * `npm run build`, which no other test reads, and the script's lock keeps two checks of one tree apart.
 * It runs at a lower CPU priority (`--nice`) so that the timed tests beside it keep their pace.
 *
 * In CI (.ci/run) the check starts with the suite, beside it, on the same Node, and ATTACH_PACKAGES_REPORT
 * names its report: this test then waits for that report instead of running the check a second time, and
 * holds it to the same lines. vitest.config.ts runs this file last, so that the report is there by then;
 * vitest runs one file at a time on two cores, so the check's two minutes then overlap the rest of the
 * suite instead of adding to it.
 */
import { readFileSync } from 'node:fs'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { describe, expect, it } from 'vitest'
import { run } from '../../../scripts/run-kit.mjs'

const root = join(dirname(fileURLToPath(import.meta.url)), '..', '..', '..')
/** Where CI's run of the check, started beside the suite, writes: `<report>.log`, then `<report>.status`. */
const REPORT = process.env.ATTACH_PACKAGES_REPORT

/** The check's exit code and output: the report of CI's run when there is one, else a run of its own. */
async function checkPackages(): Promise<{ code: number; output: string }> {
  if (!REPORT) return run(process.execPath, [join(root, 'scripts', 'check-packages.mjs'), '--nice'], { cwd: root, timeout: 890_000 })
  // The status file (the exit code) is written once the log is whole.
  for (;;) {
    let status = ''
    try {
      status = readFileSync(`${REPORT}.status`, 'utf8').trim()
    } catch {}
    if (status) return { code: Number(status), output: readFileSync(`${REPORT}.log`, 'utf8') }
    await new Promise((r) => setTimeout(r, 500))
  }
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
      `note node: ${process.version} (`, // the check ran on this test's Node (CI's report included)
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
