import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { describe, expect, it } from 'vitest'

const repo = join(import.meta.dirname, '../../..')
const packages = join(repo, 'packages')

/** Every `.ts` file under `dir`, as paths relative to the repository. */
function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts'))
    .map((e) => relative(repo, join(e.parentPath, e.name)))
}

const packageSources = readdirSync(packages, { withFileTypes: true })
  .filter((d) => d.isDirectory())
  .flatMap((d) => sources(join(packages, d.name, 'src')))

describe('the house rules of packages/*/src', () => {
  it('keeps every source file (tests aside) at 600 lines or fewer', () => {
    const long = packageSources
      .filter((f) => !f.endsWith('.test.ts'))
      .map((f) => ({ f, lines: readFileSync(join(repo, f), 'utf8').split('\n').length }))
      .filter(({ lines }) => lines > 600)
      .map(({ f, lines }) => `${f}: ${lines} lines`)
    expect(long).toEqual([])
  })

  it("keeps attach-storage's test-support modules under src/testing/, not among the sources", () => {
    const misplaced = packageSources.filter(
      (f) =>
        f.startsWith('packages/attach-storage/src/') &&
        !f.startsWith('packages/attach-storage/src/testing/') &&
        /\/(test-[^/]*|[^/]*-kit|save-through-handler)\.ts$/.test(f),
    )
    expect(misplaced).toEqual([])
  })
})
