/**
 * The code blocks of README.md and docs/**\/*.md, extracted and type-checked against the workspace
 * packages (their sources, through the `@attach-storage/source` condition of the root tsconfig.json),
 * in one compiler program for the TypeScript blocks (and the TSDoc `@example` blocks of packages/*\/src,
 * held to their imports) and one for the JavaScript blocks. Nothing is written to disk: each block is a
 * virtual module under examples/adapters-test/.doc-blocks/.
 *
 * A block may be preceded (blank lines allowed) by a marker the reader does not see:
 *
 *     <!-- doc-check: partial -->            syntax, and what it imports from the project's packages
 *     <!-- doc-check: skip (the reason) -->  not checked at all
 *     <!-- doc-check: continues -->          the same module as the page's previous block
 *     <!-- doc-check: uses db, storage -->   host names declared by HOST below (an invisible import)
 *     <!-- doc-check: uses db
 *     declare const token: string            further lines: TypeScript put before the block
 *     -->
 *
 * Words combine with commas (`continues, uses db`). A block whose first line is a comment naming a file
 * (`// src/settings.ts`) is that file of the page's example project: its siblings import it by name.
 * JavaScript blocks (```js) are checked as TypeScript without `strict`: unknown names, wrong members
 * and wrong arguments are caught, types a JavaScript user never writes are not asked for.
 */
import { readdirSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import ts from 'typescript'

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), '../../..')
const VIRTUAL = join(ROOT, 'examples/adapters-test/.doc-blocks')

/**
 * The host's things a block may name with `uses`: declared, never run. `db` is the host's own
 * database (the docs' `board` and `post` tables), opened with the core's `openDatabase()` beside the
 * attachment tables.
 */
export const HOST = `import type { Hono } from 'hono'
import type { Generated, Kysely } from 'kysely'
import type { AttachConfigInput, AttachStorage, AuthUser } from 'attach-storage'

export interface HostTables {
  board: { id: Generated<number>; title: string; body: string; created_by: string; created_dt: string; tenant_id: string | null }
  post: { id: Generated<number>; title: string; created_dt: string }
}
export declare const db: Kysely<HostTables>
export declare const storage: AttachStorage
export declare const config: AttachConfigInput
export declare const user: AuthUser
export declare const request: Request
export declare const token: string
export declare const app: Hono
`
/** The names `uses` may ask for. */
export const HOST_NAMES = ['db', 'storage', 'config', 'user', 'request', 'token', 'app']

export interface DocBlock {
  /** Path from the repository root, e.g. docs/frameworks/hono.md. */
  file: string
  /** 1-based line of the opening fence. */
  line: number
  lang: 'ts' | 'js'
  code: string
  /** `imports`: only the names imported from the project's packages (TSDoc examples). */
  mode: 'check' | 'partial' | 'imports' | 'skip'
  continues: boolean
  uses: string[]
  /** Names after `uses` that HOST does not declare (a typo in the marker). */
  unknownUses: string[]
  /** Lines of TypeScript from the marker, put before the block. */
  prelude: string[]
  /** Line of the marker (for errors in the prelude), or 0. */
  markerLine: number
  /** The marker's words after `skip`, shown as the reason. */
  reason: string
}

export interface BlockProblem {
  /** file:line in the Markdown page. */
  at: string
  message: string
}

/** README.md and every docs/**\/*.md, sorted. */
export function docPages(): string[] {
  const pages = ['README.md']
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(ROOT, dir), { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const path = `${dir}/${entry.name}`
      if (entry.isDirectory()) walk(path)
      else if (entry.name.endsWith('.md')) pages.push(path)
    }
  }
  walk('docs')
  return pages
}

const LANGS: Record<string, 'ts' | 'js'> = { ts: 'ts', typescript: 'ts', js: 'js', javascript: 'js', mjs: 'js' }

/** The TypeScript and JavaScript blocks of one page, with their markers. */
export function extractBlocks(file: string, text = readFileSync(join(ROOT, file), 'utf8')): DocBlock[] {
  const lines = text.split('\n')
  const blocks: DocBlock[] = []
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(`{3,}|~{3,})\s*([\w-]*)(.*)$/.exec(lines[i]!)
    if (!open) continue
    const [, indent, fence, info] = open as unknown as [string, string, string, string]
    let end = i + 1
    while (end < lines.length && !new RegExp(`^\\s*${fence[0]}{${fence.length},}\\s*$`).test(lines[end]!)) end++
    const lang = LANGS[info.toLowerCase()]
    if (lang) {
      const code = lines
        .slice(i + 1, end)
        .map((l) => (l.startsWith(indent) ? l.slice(indent.length) : l.trimStart()))
        .join('\n')
      blocks.push({ file, line: i + 1, lang, code, ...readMarker(lines, i) })
    }
    i = end
  }
  return blocks
}

/**
 * The `@example` blocks of the TSDoc comments in packages/*\/src (tests and test kits aside), held only
 * to the names they import from the project's packages: they are fragments (`this`, `{...}`, the host's
 * `db`, a value alone, prose after the code) too often to be checked whole, or even parsed.
 */
export function tsdocExamples(): DocBlock[] {
  const blocks: DocBlock[] = []
  for (const pkg of readdirSync(join(ROOT, 'packages')).sort()) {
    const walk = (dir: string) => {
      let entries: import('node:fs').Dirent[]
      try {
        entries = readdirSync(join(ROOT, dir), { withFileTypes: true })
      } catch {
        return
      }
      for (const entry of entries.sort((a, b) => a.name.localeCompare(b.name))) {
        const path = `${dir}/${entry.name}`
        if (entry.isDirectory()) {
          if (entry.name !== 'testing') walk(path)
        } else if (/\.tsx?$/.test(entry.name) && !/\.(test|bench)\.tsx?$/.test(entry.name)) blocks.push(...examplesOf(path))
      }
    }
    walk(`packages/${pkg}/src`)
  }
  return blocks
}

function examplesOf(file: string): DocBlock[] {
  const lines = readFileSync(join(ROOT, file), 'utf8').split('\n')
  const found: DocBlock[] = []
  for (let i = 0; i < lines.length; i++) {
    const tag = /^\s*\*\s*@example\b\s?(.*)$/.exec(lines[i]!)
    if (!tag) continue
    const code = tag[1]!.trim() ? [tag[1]!] : []
    let j = i + 1
    for (; j < lines.length; j++) {
      const l = lines[j]!
      if (/^\s*\*\//.test(l) || /^\s*\*\s*@\w+/.test(l)) break
      code.push(l.replace(/^\s*\*\s?/, '').replace(/\s*\*\/\s*$/, ''))
      if (/\*\//.test(l)) break
    }
    const text = code
      .join('\n')
      .replace(/^```\w*\n|\n```\s*$/g, '')
      .trim()
    if (text)
      found.push({
        file,
        line: i + 1,
        lang: 'ts',
        code: text,
        mode: 'imports',
        continues: false,
        uses: [],
        unknownUses: [],
        prelude: [],
        markerLine: 0,
        reason: '',
      })
    i = j
  }
  return found
}

/** The `<!-- doc-check ... -->` comment ending on the last non-blank line before line `fence` (0-based). */
function readMarker(lines: string[], fence: number) {
  const none = { mode: 'check' as const, continues: false, uses: [], unknownUses: [], prelude: [], markerLine: 0, reason: '' }
  let last = fence - 1
  while (last >= 0 && lines[last]!.trim() === '') last--
  if (last < 0 || !lines[last]!.trimEnd().endsWith('-->')) return none
  let first = last
  while (first > 0 && !lines[first]!.includes('<!--')) first--
  const body = lines
    .slice(first, last + 1)
    .join('\n')
    .replace(/^\s*<!--/, '')
    .replace(/-->\s*$/, '')
  const head = /^\s*doc-check[ \t]*:?([^\n]*)/.exec(body)
  if (!head) return none
  const words = head[1]!
  const prelude = body.slice(head[0].length).split('\n').slice(1)
  const mode = /\bskip\b/.test(words) ? 'skip' : /\bpartial\b/.test(words) ? 'partial' : 'check'
  const named = (/\buses\s+([\w\s,]+)/.exec(words)?.[1] ?? '').split(/[\s,]+/).filter(Boolean)
  const uses = named.filter((w) => HOST_NAMES.includes(w))
  return {
    mode: mode as DocBlock['mode'],
    continues: /\bcontinues\b/.test(words),
    uses,
    unknownUses: named.filter((w) => !HOST_NAMES.includes(w)),
    prelude: prelude.map((l) => l.trim()).filter(Boolean),
    markerLine: first + 1,
    reason: words.replace(/^\s*skip\s*/, '').trim(),
  }
}

/** Diagnostics a partial block is held to: syntax, and the names it imports from the project. */
const PARTIAL_CODES = new Set([2305, 2307, 2614, 2724, 1484])
const projectModule = (message: string) => /['"](attach-storage|@attach-storage\/[\w-]+)(\/[\w-]+)?['"]/.test(message)

export interface Module {
  path: string
  text: string
  /** Per line of `text`: where it comes from, and the block it belongs to. */
  origin: Array<{ at: string; block: DocBlock }>
}

/** The import specifier of the host module from a module's path. */
const hostFrom = (path: string) => {
  const r = relative(dirname(path), join(VIRTUAL, 'host.js'))
  return r.startsWith('.') ? r : `./${r}`
}

/** The modules of the blocks: one per block, or one per run of `continues` blocks of a page. */
export function modulesOf(blocks: DocBlock[]): Module[] {
  const modules: Module[] = []
  let current: (Module & { lines: string[]; file: string }) | undefined
  for (const b of blocks) {
    if (b.mode === 'skip') continue
    if (!(b.continues && current && current.file === b.file)) {
      // A block opening with `// src/settings.ts` is that file of the page's example project.
      const named = /^\/\/ ((?:[\w-]+\/)*[\w.-]+\.ts)\s*$/.exec(b.code.split('\n', 1)[0]!)?.[1]
      const page = b.file.replace(/[^\w]+/g, '-')
      const path = named ? join(VIRTUAL, page, named) : join(VIRTUAL, `${page}-${b.line}.ts`)
      current = { path, text: '', lines: [], origin: [], file: b.file }
      modules.push(current)
    }
    const head: string[] = []
    if (b.uses.length) head.push(`import { ${b.uses.join(', ')} } from '${hostFrom(current.path)}'`)
    head.push(...b.prelude)
    for (const l of head) {
      current.lines.push(l)
      current.origin.push({ at: `${b.file}:${b.markerLine} (its doc-check marker)`, block: b })
    }
    b.code.split('\n').forEach((l, k) => {
      current!.lines.push(l)
      current!.origin.push({ at: `${b.file}:${b.line + 1 + k}`, block: b })
    })
  }
  for (const m of modules as Array<Module & { lines: string[] }>) m.text = `${m.lines.join('\n')}\nexport {}\n`
  return modules
}

const cache = new Map<string, ts.SourceFile>()

function compilerOptions(lang: 'ts' | 'js'): ts.CompilerOptions {
  const config = ts.readConfigFile(join(ROOT, 'tsconfig.json'), ts.sys.readFile)
  const parsed = ts.parseJsonConfigFileContent({ ...config.config, include: [], files: [] }, ts.sys, ROOT)
  const options: ts.CompilerOptions = { ...parsed.options, noEmit: true, skipLibCheck: true, declaration: false }
  if (lang === 'js')
    Object.assign(options, { strict: false, noImplicitAny: false, strictNullChecks: false, noUncheckedIndexedAccess: false })
  return options
}

/** Type-checks the blocks of one language in one program; problems keyed by block. */
function check(blocks: DocBlock[], lang: 'ts' | 'js'): Map<DocBlock, BlockProblem[]> {
  const problems = new Map<DocBlock, BlockProblem[]>()
  const modules = modulesOf(blocks.filter((b) => b.lang === lang))
  if (modules.length === 0) return problems
  const files = new Map(modules.map((m) => [m.path, m.text]))
  files.set(join(VIRTUAL, 'host.ts'), HOST)
  const options = compilerOptions(lang)
  const host = ts.createCompilerHost(options, true)
  const { fileExists, readFile, getSourceFile, directoryExists } = host
  host.fileExists = (f) => files.has(f) || fileExists.call(host, f)
  host.directoryExists = (d) => d === VIRTUAL || d.startsWith(`${VIRTUAL}/`) || directoryExists!.call(host, d)
  host.readFile = (f) => files.get(f) ?? readFile.call(host, f)
  host.getSourceFile = (f, version, onError, create) => {
    const text = files.get(f)
    if (text !== undefined) return ts.createSourceFile(f, text, version, true)
    const key = `${typeof version === 'object' ? version.languageVersion : version}:${f}`
    let sf = cache.get(key)
    if (!sf) {
      sf = getSourceFile.call(host, f, version, onError, create)
      if (sf) cache.set(key, sf)
    }
    return sf
  }
  const program = ts.createProgram([...files.keys()], options, host)
  for (const m of modules) {
    const sf = program.getSourceFile(m.path)!
    const syntax = program.getSyntacticDiagnostics(sf)
    const imports = m.origin.every((o) => o.block.mode === 'imports')
    const diagnostics = [...syntax, ...(syntax.length && !imports ? [] : program.getSemanticDiagnostics(sf))]
    for (const d of diagnostics) {
      const line = d.start === undefined ? 0 : sf.getLineAndCharacterOfPosition(d.start).line
      const origin = m.origin[Math.min(line, m.origin.length - 1)]!
      const message = ts.flattenDiagnosticMessageText(d.messageText, '\n')
      const block = origin.block
      const importProblem = PARTIAL_CODES.has(d.code) && projectModule(message)
      if (block.mode === 'imports' && !importProblem) continue
      if (block.mode === 'partial' && !((syntax as readonly ts.Diagnostic[]).includes(d) || importProblem)) continue
      if (lang === 'js' && [7005, 7006, 7008, 7031, 7034].includes(d.code)) continue
      const list = problems.get(block) ?? []
      list.push({ at: origin.at, message: `TS${d.code}: ${message}` })
      problems.set(block, list)
    }
  }
  return problems
}

/** The problems the compiler found in each block (blocks without any are absent). */
export function checkBlocks(blocks: DocBlock[]): Map<DocBlock, BlockProblem[]> {
  return new Map([...check(blocks, 'ts'), ...check(blocks, 'js')])
}

/** `docs/x.md:12` of a block. */
export const where = (b: DocBlock) => `${b.file}:${b.line}`
