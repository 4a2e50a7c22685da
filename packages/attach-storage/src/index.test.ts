/**
 * The root entry stays small: at most 40 names (values and types), every one listed in
 * docs/packaging.md. Helpers for other jobs belong on a subpath (`attach-storage/config`, `/list`, ...).
 */
import { readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'
import { describe, expect, it } from 'vitest'

const MAX_ROOT_NAMES = 40
const INDEX = fileURLToPath(new URL('./index.ts', import.meta.url))
const PACKAGING = fileURLToPath(new URL('../../../docs/packaging.md', import.meta.url))

/** The names index.ts exports, read from its syntax: `{ value, type-only }`; `export *` is refused. */
function rootNames(): { values: string[]; types: string[] } {
  const source = ts.createSourceFile(INDEX, readFileSync(INDEX, 'utf8'), ts.ScriptTarget.Latest, true)
  const values: string[] = []
  const types: string[] = []
  const exported = (node: ts.Node): boolean =>
    ts.canHaveModifiers(node) && (ts.getModifiers(node) ?? []).some((m) => m.kind === ts.SyntaxKind.ExportKeyword)
  for (const statement of source.statements) {
    if (ts.isExportDeclaration(statement)) {
      const clause = statement.exportClause
      if (clause === undefined || !ts.isNamedExports(clause)) {
        throw new Error(`index.ts: "${statement.getText()}" exports names nobody counted; name them one by one`)
      }
      for (const element of clause.elements) {
        ;(statement.isTypeOnly || element.isTypeOnly ? types : values).push(element.name.text)
      }
    } else if (ts.isExportAssignment(statement)) {
      values.push('default')
    } else if (exported(statement)) {
      if (ts.isInterfaceDeclaration(statement) || ts.isTypeAliasDeclaration(statement)) types.push(statement.name.text)
      else if (ts.isVariableStatement(statement)) {
        for (const d of statement.declarationList.declarations) values.push(d.name.getText())
      } else if (
        (ts.isFunctionDeclaration(statement) || ts.isClassDeclaration(statement) || ts.isEnumDeclaration(statement)) &&
        statement.name
      ) {
        values.push(statement.name.text)
      } else throw new Error(`index.ts: an exported statement this test cannot count: ${statement.getText().slice(0, 80)}`)
    }
  }
  return { values, types }
}

/** The names in the first column of the root entry's table in docs/packaging.md. */
function documentedNames(): string[] {
  const text = readFileSync(PACKAGING, 'utf8')
  const start = text.indexOf('`attach-storage`:\n')
  const end = text.indexOf('\n\n', text.indexOf('| Name', start))
  expect(start, 'docs/packaging.md has the root table after "`attach-storage`:"').toBeGreaterThan(-1)
  const names: string[] = []
  for (const row of text.slice(start, end).split('\n')) {
    const first = row.split('|')[1]
    if (first === undefined || !first.includes('`')) continue
    for (const m of first.matchAll(/`([A-Za-z_$][\w$]*)`/g)) names.push(m[1]!)
  }
  return names
}

describe('the root entry', () => {
  const { values, types } = rootNames()
  const all = [...values, ...types]

  it(`exports at most ${MAX_ROOT_NAMES} names, values and types together, each once`, () => {
    expect(new Set(all).size, `duplicates in ${all.join(', ')}`).toBe(all.length)
    expect(all.length, `the root exports ${all.length} names: ${all.sort().join(', ')}`).toBeLessThanOrEqual(MAX_ROOT_NAMES)
  })

  it('exports at run time exactly the value names index.ts declares', async () => {
    const runtime = Object.keys(await import('./index.js'))
    expect(runtime.sort()).toEqual([...values].sort())
  })

  it('is listed name by name in docs/packaging.md', () => {
    expect(documentedNames().sort()).toEqual([...all].sort())
  })
})
