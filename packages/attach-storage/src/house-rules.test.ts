import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import ts from 'typescript'
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

  it('makes no getter or setter per call: an object with an accessor of its own made inside a function', () => {
    // Each such object gets a hidden class of its own, made in V8's old generation, which holds the
    // accessor's closure (and all it reaches) through young-generation collections: per request, that
    // was 3 KB of every view moved to the old generation and 5-13 ms scavenges (node/views-gc.test.ts).
    // A class's accessor, or one made once at module level, is shared.
    const found: string[] = []
    for (const f of packageSources.filter((f) => !f.endsWith('.test.ts') && !f.includes('/testing/'))) {
      const file = ts.createSourceFile(f, readFileSync(join(repo, f), 'utf8'), ts.ScriptTarget.Latest, true)
      const inFunction = (n: ts.Node) => {
        for (let p = n.parent; p; p = p.parent) if (ts.isFunctionLike(p)) return true
        return false
      }
      const accessorLiteral = (n: ts.Node) =>
        ts.isObjectLiteralExpression(n) &&
        n.properties.some(
          (p) => ts.isGetAccessor(p) || ts.isSetAccessor(p) || (ts.isPropertyAssignment(p) && /^(get|set)$/.test(p.name.getText())),
        )
      const visit = (n: ts.Node): void => {
        const definesAccessor =
          ts.isCallExpression(n) &&
          /^Object\.define(Property|Properties)$/.test(n.expression.getText()) &&
          n.arguments.some((a) => accessorLiteral(a))
        const literalAccessor = (ts.isGetAccessor(n) || ts.isSetAccessor(n)) && ts.isObjectLiteralExpression(n.parent)
        if ((definesAccessor || literalAccessor) && inFunction(n)) {
          found.push(`${f}:${file.getLineAndCharacterOfPosition(n.getStart()).line + 1}`)
        }
        ts.forEachChild(n, visit)
      }
      visit(file)
    }
    expect(found).toEqual([])
  })
})
