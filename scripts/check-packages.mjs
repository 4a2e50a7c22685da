#!/usr/bin/env node
/**
 * Checks the published packages the way a user gets them (`npm run check:packages`):
 *
 * 1. builds the workspace (`npm run build`, tsup into each package's `dist/`);
 * 2. packs every published package under packages/ (`npm pack`) into a temporary folder;
 * 3. lints each tarball with publint (errors and warnings fail) and with @arethetypeswrong/cli in its
 *    `esm-only` profile (the packages are ESM-only, so `require()` from CommonJS and the pre-`exports`
 *    `node10` resolution are not supported; every other attw problem fails);
 * 4. installs the tarballs into a fresh project outside the workspace (third-party dependencies come
 *    from the registry or npm's cache; the project's own packages must come from the tarballs);
 * 5. there, imports every package, type-checks the README's embedding example against the installed
 *    declarations, and runs it: a Hono app with `mountAttachStorage` on SQLite and a local folder,
 *    a temporary upload, the host's save route calling `commitAttachContainer`, a view and a resized
 *    view through `createAttachHandler(storage).fetch`.
 *
 * Prints one line per check (`ok`, `FAIL`, or `note` for what is reported but not a failure) and
 * exits 1 on any failure. Options:
 *   --skip-build     use the dist/ folders as they are
 *   --build-record F after building, record in file F what the build read and wrote (sha256 by file);
 *                    when F already records this tree's build and none of it changed, use that build
 *                    again (CI's Node 24 run, after the Node 20 run built the same tree)
 *   --keep           keep the temporary folder (its path is printed)
 *   --with-scripts   run the dependencies' install scripts in the fresh project (compiles
 *                    better-sqlite3 from source when no prebuilt binary can be fetched; slower)
 *   --nice           run at a lower CPU priority (nice 10), inherited by the build and the rest, so
 *                    that tests running beside it (npm test) keep their timing
 */
import { cpSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { createHash } from 'node:crypto'
import { builtinModules } from 'node:module'
import { getPriority, setPriority, tmpdir } from 'node:os'
import { dirname, join, relative, resolve, sep } from 'node:path'
import { fileURLToPath } from 'node:url'
import { run as runCommand } from './run-kit.mjs'

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..')
/** The workspace-only export condition naming each entry's TypeScript source (not published). */
const SOURCE = '@attach-storage/source'
const args = new Set(process.argv.slice(2))
if (args.has('--nice')) {
  try {
    setPriority(Math.min(19, getPriority() + 10))
  } catch {}
}
const started = Date.now()
const failures = []

function line(status, name, detail) {
  const text = `${status.padEnd(4)} ${name}${detail ? `: ${detail}` : ''}`
  console.log(text)
  if (status === 'FAIL') failures.push(name)
}
const indent = (text) =>
  text
    .trim()
    .split('\n')
    .map((l) => `       ${l}`)
    .join('\n')

/** Runs a command (scripts/run-kit.mjs), its children's colours off; resolves with its exit code and combined output. */
const run = (command, commandArgs, options = {}) =>
  runCommand(command, commandArgs, { cwd: root, ...options, env: { FORCE_COLOR: '0', NO_COLOR: '1', ...options.env } })
/** npm's own noise (unknown user config keys, engine warnings of third-party packages) dropped. */
const quiet = (output) =>
  output
    .split('\n')
    .filter((l) => !/^npm warn (Unknown user config|EBADENGINE|deprecated)/.test(l))
    .join('\n')
const tail = (output, lines = 30) => quiet(output).trim().split('\n').slice(-lines).join('\n')
const npm = process.platform === 'win32' ? 'npm.cmd' : 'npm'

async function main() {
  // The published packages: every packages/* folder with a package.json that is not private.
  const packages = readdirSync(join(root, 'packages'), { withFileTypes: true })
    .filter((d) => d.isDirectory() && existsSync(join(root, 'packages', d.name, 'package.json')))
    .map((d) => {
      const dir = join(root, 'packages', d.name)
      return { dir, pkg: JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) }
    })
    .filter((p) => !p.pkg.private)
  const names = new Set(packages.map((p) => p.pkg.name))

  // The Node the installed packages run on (a report read later, as CI's packages.test.ts does, says which).
  line('note', 'node', `${process.version} (${process.execPath})`)

  // 1. Build. Two checks in one tree would rebuild each other's dist/ while packing; the second waits.
  await takeLock()
  const record = option('--build-record')
  const reused = record && reusableBuild(record, packages)
  if (args.has('--skip-build')) line('note', 'build', 'skipped (--skip-build)')
  else if (reused) line('ok', 'build', reused)
  else {
    const t = Date.now()
    // Up to 10 minutes: on a loaded machine tsup's declaration build alone has taken 7 (the default is 5).
    const build = await run(npm, ['run', 'build'], { timeout: 600_000 })
    if (build.code !== 0) {
      line('FAIL', 'build', `npm run build exited ${build.code}\n${indent(tail(build.output))}`)
      return
    }
    line('ok', 'build', `npm run build (${Math.round((Date.now() - t) / 1000)} s)`)
    if (record) writeFileSync(record, JSON.stringify({ node: process.version, ...buildState(packages) }))
  }

  const work = mkdtempSync(join(tmpdir(), 'attach-storage-packages-'))
  const packs = join(work, 'packs')
  const app = join(work, 'app')
  mkdirSync(packs)
  mkdirSync(app)
  try {
    await checkAll(packages, names, packs, app)
  } finally {
    if (args.has('--keep')) line('note', 'temporary folder kept', work)
    else rmSync(work, { recursive: true, force: true })
  }
}

/** The value of `--name value` among the arguments. */
function option(name) {
  const argv = process.argv.slice(2)
  const i = argv.indexOf(name)
  return i >= 0 ? argv[i + 1] : undefined
}

/**
 * What a build reads and what it writes, file by file (sha256): the root package.json and
 * tsup.config.ts, each published package's own files (package.json, build-browser.mjs...) and src/,
 * and its dist/.
 */
function buildState(packages) {
  const hashes = (paths) =>
    Object.fromEntries(
      paths.filter((f) => existsSync(f)).map((f) => [relative(root, f), createHash('sha256').update(readFileSync(f)).digest('hex')]),
    )
  const walk = (d) =>
    existsSync(d)
      ? readdirSync(d, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(d, e.name)) : [join(d, e.name)]))
      : []
  return {
    inputs: hashes([
      join(root, 'package.json'),
      join(root, 'tsup.config.ts'),
      ...packages.flatMap((p) => [
        ...readdirSync(p.dir, { withFileTypes: true })
          .filter((e) => e.isFile())
          .map((e) => join(p.dir, e.name)),
        ...walk(join(p.dir, 'src')),
      ]),
    ]),
    outputs: hashes(packages.flatMap((p) => walk(join(p.dir, 'dist')))),
  }
}

/**
 * With `--build-record FILE` (CI's second run, on another Node): the build of the first run is used
 * again when FILE records it and nothing it read or wrote has changed since. The build's output does
 * not depend on the Node that runs it (esbuild is a native binary; the declarations come from the
 * TypeScript compiler); what does (installing, importing and running the packages) runs on this Node.
 * Answers the `ok build` detail, or undefined to build.
 */
function reusableBuild(record, packages) {
  let before
  try {
    before = JSON.parse(readFileSync(record, 'utf8'))
  } catch {
    return undefined
  }
  const now = buildState(packages)
  const same = (a, b) => JSON.stringify(Object.entries(a).sort()) === JSON.stringify(Object.entries(b).sort())
  if (!same(before.inputs, now.inputs) || !same(before.outputs, now.outputs) || Object.keys(now.outputs).length === 0) return undefined
  return `the build made on Node ${before.node} in this run, used again: its ${Object.keys(now.inputs).length} inputs and ${Object.keys(now.outputs).length} dist/ files unchanged (--build-record)`
}

/**
 * A lock directory beside the workspace's installed packages, holding the owner's pid: a second run of
 * the check in the same tree waits for the first (up to 10 minutes), and takes over a lock whose owner
 * is gone. Released on exit.
 */
async function takeLock() {
  const lock = join(root, 'node_modules', '.cache', 'check-packages.lock')
  mkdirSync(dirname(lock), { recursive: true })
  const deadline = Date.now() + 600_000
  let waited = false
  for (;;) {
    try {
      mkdirSync(lock)
      writeFileSync(join(lock, 'pid'), String(process.pid))
      process.on('exit', () => rmSync(lock, { recursive: true, force: true }))
      if (waited) line('note', 'lock', 'another check of this tree finished; going on')
      return
    } catch (error) {
      if (error.code !== 'EEXIST') throw error
    }
    let owner = NaN
    try {
      owner = Number(readFileSync(join(lock, 'pid'), 'utf8'))
    } catch {}
    let alive = false
    if (owner > 0) {
      try {
        process.kill(owner, 0)
        alive = true
      } catch (error) {
        alive = error.code === 'EPERM'
      }
    }
    let age = 0
    try {
      age = Date.now() - statSync(lock).mtimeMs
    } catch {
      continue // released meanwhile
    }
    if (!alive && (owner > 0 || age > 10_000)) {
      rmSync(lock, { recursive: true, force: true })
      continue
    }
    if (Date.now() > deadline) throw new Error(`another check of this tree (pid ${owner}) holds ${lock}`)
    if (!waited) line('note', 'lock', `another check of this tree is running (pid ${owner}); waiting`)
    waited = true
    await new Promise((r) => setTimeout(r, 1000))
  }
}

async function checkAll(packages, names, packs, app) {
  // 2. Pack, all in one npm call.
  const pack = await run(npm, [
    'pack',
    '--json',
    '--pack-destination',
    packs,
    ...packages.flatMap((p) => ['--workspace', relative(root, p.dir)]),
  ])
  let packed
  try {
    packed = JSON.parse(pack.output.slice(pack.output.indexOf('[')))
  } catch {
    packed = null
  }
  if (pack.code !== 0 || !Array.isArray(packed)) {
    line('FAIL', 'pack', `npm pack exited ${pack.code}\n${indent(tail(pack.output))}`)
    return
  }
  const tarballs = []
  for (const { dir, pkg } of packages) {
    const entry = packed.find((e) => e.name === pkg.name)
    if (!entry) {
      line('FAIL', `pack ${pkg.name}`, 'no tarball')
      continue
    }
    const files = entry.files.map((f) => f.path)
    const problems = []
    // Every file the exports map (and main/types) names for a consumer must be in the tarball.
    for (const target of exportTargets(pkg)) {
      if (!files.includes(target.replace(/^\.\//, ''))) problems.push(`${target} is not in the tarball`)
    }
    const stray = files.filter((f) => /(^|\/)test\/|\.test\.|\.tsbuildinfo$|(^|\/)\.data\//.test(f))
    if (stray.length) problems.push(`unexpected files: ${stray.slice(0, 5).join(', ')}`)
    // src/ ships so that the source maps' paths exist: exactly the entries' sources and what they import.
    const sources = shippedSources(dir, pkg, files)
    if (sources.missing.length)
      problems.push(`imported by the entries' sources but not in the tarball: ${sources.missing.slice(0, 5).join(', ')}`)
    if (sources.extra.length) problems.push(`src files no entry imports (test helpers?): ${sources.extra.slice(0, 5).join(', ')}`)
    const file = join(packs, entry.filename)
    tarballs.push({ name: pkg.name, dir, pkg, file })
    line(
      problems.length ? 'FAIL' : 'ok',
      `pack ${pkg.name}`,
      problems.length ? problems.join('; ') : `${entry.filename}, ${files.length} files, ${kib(entry.size)}`,
    )
    const source = exportTargets(pkg, SOURCE).filter((f) => !files.includes(f.replace(/^\.\//, '')))
    if (source.length) {
      line(
        'note',
        `pack ${pkg.name}`,
        `the workspace-only "${SOURCE}" condition names ${source.length} file(s) not in the tarball (only a consumer resolving with --conditions=${SOURCE} would look for them)`,
      )
    }
    const deps = importProblems(dir, pkg, files)
    line(
      deps.problems.length ? 'FAIL' : 'ok',
      `imports ${pkg.name}`,
      deps.problems.length ? deps.problems.join('; ') : `${deps.count} package(s), all declared, none bundled`,
    )
    const meta = metadataProblems(pkg)
    line(meta.length ? 'FAIL' : 'ok', `metadata ${pkg.name}`, meta.join('; '))
    // npm packs a LICENSE file of the package's folder whatever `files` says; the license requires it.
    if (!files.some((f) => /^LICEN[CS]E/i.test(f))) line('FAIL', `license ${pkg.name}`, 'no LICENSE file in the tarball')
    if (!files.some((f) => /^README/i.test(f))) line('note', `pack ${pkg.name}`, 'no README file in the tarball')
  }
  if (tarballs.length === 0) return

  // 3 and 4 at once: the linters use the CPU, the install mostly waits on the disk and the network.
  const [lintLines, installed] = await Promise.all([lint(tarballs), install(tarballs, names, app)])
  for (const l of lintLines) line(...l)
  if (!installed) return

  // 5. The installed packages, in the fresh project.
  writeFileSync(join(app, 'imports.mjs'), importsScript(tarballs))
  const imports = await run(process.execPath, ['imports.mjs'], { cwd: app, timeout: 60_000 })
  line(
    imports.code === 0 ? 'ok' : 'FAIL',
    'import every package and subpath',
    imports.code === 0 ? imports.output.trim() : `\n${indent(tail(imports.output))}`,
  )

  writeFileSync(join(app, 'example.mjs'), EXAMPLE_JS)
  for (const [name, text] of Object.entries(embeddingSources())) writeFileSync(join(app, name), text)
  writeFileSync(join(app, 'tsconfig.json'), TSCONFIG)
  writeFileSync(join(app, 'stack.mjs'), STACK_JS)
  const tsc = join(root, 'node_modules', 'typescript', 'bin', 'tsc')
  const [example, types, stack, scripts] = await Promise.all([
    run(process.execPath, ['example.mjs'], { cwd: app, timeout: 120_000 }),
    run(process.execPath, [tsc, '-p', 'tsconfig.json'], { cwd: app, timeout: 120_000 }),
    run(process.execPath, ['--enable-source-maps', 'stack.mjs'], { cwd: app, timeout: 60_000 }),
    installScripts(app),
  ])
  const maps = installedMaps(app, tarballs)
  line(
    maps.problems.length ? 'FAIL' : 'ok',
    'source maps resolve in the installed packages',
    maps.problems.length ? maps.problems.slice(0, 8).join('; ') : maps.summary,
  )
  const frames = stackProblems(stack, app, tarballs)
  line(
    frames.problems.length ? 'FAIL' : 'ok',
    'stack trace under node --enable-source-maps names installed files',
    frames.problems.length ? `${frames.problems.join('; ')}\n${indent(tail(stack.output, 20))}` : frames.summary,
  )
  line(...scripts)
  line(
    types.code === 0 ? 'ok' : 'FAIL',
    "type-check the README's embedding example (TypeScript, NodeNext)",
    types.code === 0 ? '' : `\n${indent(tail(types.output))}`,
  )
  if (example.code === 0) {
    for (const l of example.output.trim().split('\n')) console.log(l)
  } else {
    line('FAIL', "run the README's embedding example", `exited ${example.code}\n${indent(tail(example.output, 40))}`)
  }
  for (const l of await (await import('./check-browser-bundle.mjs')).checkBrowserBundle(app)) line(...l)
}

/**
 * Every `.map` the installed packages ship, and every `sourceMappingURL` of their JavaScript: each
 * source a map names must be a file of the installed package or be embedded in the map
 * (`sourcesContent`); where it is both, the two must be the same text.
 */
function installedMaps(app, tarballs) {
  const problems = []
  let maps = 0
  let sources = 0
  let shipped = 0
  let embedded = 0
  for (const t of tarballs) {
    const dir = join(app, 'node_modules', t.name)
    const walk = (d) =>
      readdirSync(d, { withFileTypes: true }).flatMap((e) =>
        e.isDirectory() ? (e.name === 'node_modules' ? [] : walk(join(d, e.name))) : [join(d, e.name)],
      )
    for (const file of walk(dir)) {
      const name = `${t.name}/${relative(dir, file)}`
      if (/\.m?js$/.test(file)) {
        const url = /\/\/# sourceMappingURL=(\S+)\s*$/.exec(readFileSync(file, 'utf8'))?.[1]
        if (url && !url.startsWith('data:') && !existsSync(join(dirname(file), url))) problems.push(`${name} names ${url}, not shipped`)
      }
      if (!file.endsWith('.map')) continue
      maps++
      const map = JSON.parse(readFileSync(file, 'utf8'))
      map.sources.forEach((source, i) => {
        sources++
        const path = resolve(dirname(file), map.sourceRoot ?? '', source)
        const inside = path.startsWith(dir + sep) && existsSync(path)
        const content = typeof map.sourcesContent?.[i] === 'string' ? map.sourcesContent[i] : undefined
        if (inside) shipped++
        if (content !== undefined) embedded++
        if (!inside && content === undefined) problems.push(`${name} names ${source}, neither shipped nor embedded`)
        else if (inside && content !== undefined && readFileSync(path, 'utf8') !== content)
          problems.push(`${name}: the embedded ${source} differs from the shipped file`)
      })
    }
  }
  if (maps === 0) problems.push('no source maps shipped')
  return {
    problems,
    summary: `${maps} maps in ${tarballs.length} packages name ${sources} sources: ${shipped} shipped as files, ${embedded} embedded`,
  }
}

/**
 * The stack of an error thrown inside attach-storage (a misspelt setting), printed under
 * \`node --enable-source-maps\`: every frame in one of the project's installed packages must name a
 * TypeScript file that exists there, at a line it has; and where such a frame's caller is one too,
 * the caller's line must name the function of the frame it called, which shows that the maps point
 * at the right lines, not only at existing files.
 */
function stackProblems(result, app, tarballs) {
  let stack = ''
  try {
    stack = JSON.parse(result.output.trim().split('\n').pop()).stack
  } catch {
    return { problems: [`stack.mjs exited ${result.code} without printing an error`], summary: '' }
  }
  const dirs = tarballs.map((t) => join(app, 'node_modules', t.name) + sep)
  const frames = stack
    .split('\n')
    .map((l) => /^\s*at (?:(.+?) \()?(.+?):(\d+):(\d+)\)?$/.exec(l))
    .filter(Boolean)
    .map((m) => {
      const file = m[2].startsWith('file:') ? fileURLToPath(m[2]) : m[2]
      return { fn: m[1], file, line: Number(m[3]), ours: dirs.some((d) => file.startsWith(d)) }
    })
  const problems = []
  const ours = frames.filter((f) => f.ours)
  if (ours.length === 0) problems.push('no frame in the installed packages')
  const lines = (f) => (existsSync(f.file) ? readFileSync(f.file, 'utf8').split('\n') : [])
  for (const f of ours) {
    const at = `${relative(join(app, 'node_modules'), f.file)}:${f.line}`
    if (!f.file.endsWith('.ts')) problems.push(`${at} is not mapped to a source`)
    else if (!existsSync(f.file)) problems.push(`${at} is not in the installed package`)
    else if (f.line > lines(f).length) problems.push(`${at} is past the file's end`)
  }
  let calls = 0
  frames.forEach((callee, i) => {
    const caller = frames[i + 1]
    if (!callee.ours || !caller?.ours || !callee.fn || !existsSync(caller.file)) return
    const name = callee.fn
      .replace(/^(new|async) /, '')
      .split('.')
      .pop()
    if ((lines(caller)[caller.line - 1] ?? '').includes(name)) calls++
    else problems.push(`${relative(join(app, 'node_modules'), caller.file)}:${caller.line} does not call ${name}`)
  })
  if (ours.length > 1 && calls === 0) problems.push('no call site checked')
  const top = ours[0] ? `${relative(join(app, 'node_modules'), ours[0].file)}:${ours[0].line}` : ''
  return { problems, summary: `${ours.length} frames in the installed files (first ${top}), ${calls} call sites on the lines named` }
}

/**
 * The install scripts of the installed tree, as npm's \`allowScripts\` policy sees them
 * (\`npm install-scripts ls\`, npm 11.16 and later): the packages it lists as not yet covered must be
 * the ones the README's "Installing" section names in its \`allowScripts\` block, and with that block
 * in the project's package.json none may be left.
 */
async function installScripts(app) {
  const name = 'install scripts of the installed tree (npm allowScripts)'
  const readme = readFileSync(join(root, 'README.md'), 'utf8')
  const section = readme.slice(readme.indexOf('\n## Installing'))
  const block = /```json\n([\s\S]*?)```/.exec(section)
  if (!readme.includes('\n## Installing') || !block) return ['FAIL', name, 'README.md has no JSON block under "## Installing"']
  const documented = JSON.parse(block[1]).allowScripts ?? {}
  const pending = async () => {
    const r = await run(npm, ['install-scripts', 'ls', '--json'], { cwd: app, timeout: 60_000 })
    try {
      return (JSON.parse(r.output.slice(r.output.indexOf('{'))).allowScripts ?? []).map((p) => p.name).sort()
    } catch {
      return r.output
    }
  }
  const before = await pending()
  if (typeof before === 'string') return ['note', name, `this npm has no \`install-scripts ls\`: ${before.trim().split('\n')[0]}`]
  const named = Object.keys(documented).sort()
  if (before.join() !== named.join())
    return ['FAIL', name, `npm lists ${before.join(', ') || 'none'}; the README's allowScripts names ${named.join(', ')}`]
  const pkgFile = join(app, 'package.json')
  const pkg = readFileSync(pkgFile, 'utf8')
  writeFileSync(pkgFile, JSON.stringify({ ...JSON.parse(pkg), allowScripts: documented }, null, 2))
  const after = await pending()
  writeFileSync(pkgFile, pkg)
  if (typeof after === 'string' || after.length)
    return ['FAIL', name, `with the README's allowScripts, npm still lists ${typeof after === 'string' ? after : after.join(', ')}`]
  return ['ok', name, `${before.join(', ')}: the README's allowScripts block covers them`]
}

/**
 * The packages the shipped JavaScript imports (static imports and literal dynamic imports) must be
 * Node built-ins, the package itself, or declared in `dependencies` or `peerDependencies`: an
 * undeclared one works in the workspace and in a fresh project only while some other package hoists
 * it. And nothing from node_modules may be bundled in (esbuild marks bundled modules with their path).
 */
function importProblems(dir, pkg, files) {
  const declared = new Set([pkg.name, ...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.peerDependencies ?? {})])
  const imported = new Set()
  const problems = []
  for (const file of files.filter((f) => /\.(m?js|cjs)$/.test(f))) {
    const code = readFileSync(join(dir, file), 'utf8')
    const specifiers = [
      ...code.matchAll(/(?:^|[;\s])(?:import|export)\s[^'"]*?\sfrom\s*['"]([^'"]+)['"]/g),
      ...code.matchAll(/(?:^|[;\s])import\s*['"]([^'"]+)['"]/g),
      ...code.matchAll(/\bimport\(\s*['"]([^'"$]+)['"]\s*\)/g),
    ].map((m) => m[1])
    for (const specifier of specifiers) {
      if (specifier.startsWith('.') || specifier.startsWith('node:') || builtinModules.includes(specifier.split('/')[0])) continue
      const name = specifier.startsWith('@') ? specifier.split('/').slice(0, 2).join('/') : specifier.split('/')[0]
      imported.add(name)
      if (!declared.has(name)) problems.push(`${file} imports ${specifier}, not in dependencies or peerDependencies`)
    }
    const bundled = /^\/\/ .*node_modules\/(.+)$/m.exec(code)
    if (bundled) problems.push(`${file} bundles ${bundled[1]}`)
  }
  return { count: imported.size, problems: [...new Set(problems)] }
}

/** What every published package.json must say, beside what publint checks. */
function metadataProblems(pkg) {
  const problems = []
  if (pkg.type !== 'module') problems.push('"type" is not "module" (the packages are ESM-only)')
  if (!pkg.license) problems.push('no "license"')
  if (!pkg.description) problems.push('no "description"')
  if (!pkg.engines?.node) problems.push('no "engines.node"')
  if (!Array.isArray(pkg.files) || pkg.files.length === 0) problems.push('no "files" list')
  if (!pkg.exports) problems.push('no "exports" map')
  // A scoped package is published restricted (a paid private package) unless it says otherwise.
  if (pkg.name.startsWith('@') && pkg.publishConfig?.access !== 'public')
    problems.push('scoped, without "publishConfig": {"access": "public"}')
  return problems
}

/**
 * The files a consumer resolves: the `exports` targets but those of the workspace-only `@attach-storage/source`
 * condition, and `main`, `types`; with `only`, the targets of that one condition.
 */
function exportTargets(pkg, only) {
  const targets = new Set()
  const walk = (value, condition) => {
    if (typeof value === 'string') {
      if (only ? condition === only : condition !== SOURCE) targets.add(value)
    } else if (value && typeof value === 'object') for (const [k, v] of Object.entries(value)) walk(v, k)
  }
  walk(pkg.exports)
  if (!only) for (const field of ['main', 'types', 'module']) if (typeof pkg[field] === 'string') targets.add(pkg[field])
  return [...targets].filter((t) => !t.includes('*'))
}

const kib = (bytes) => `${(bytes / 1024).toFixed(1)} KiB`

/**
 * The TypeScript sources a package ships beside dist/ (its `files` names src/ and leaves out the tests):
 * they must be the `@attach-storage/source` entries and every file they import by relative path, no
 * more (a test helper, and what it imports, would ship for nothing) and no less (a source map naming
 * a file that is not there).
 */
function shippedSources(dir, pkg, files) {
  const shipped = files.filter((f) => f.startsWith('src/'))
  const reached = new Set()
  const todo = exportTargets(pkg, SOURCE).map((f) => f.replace(/^\.\//, ''))
  while (todo.length) {
    const file = todo.pop()
    if (reached.has(file) || !existsSync(join(dir, file))) continue
    reached.add(file)
    const code = readFileSync(join(dir, file), 'utf8')
    for (const m of code.matchAll(/(?:\bfrom\s*|\bimport\s*\(\s*|\bimport\s+)['"](\.{1,2}\/[^'"]+)['"]/g)) {
      const target = join(dirname(file), m[1]).replace(/\.js$/, '.ts')
      todo.push(existsSync(join(dir, target)) ? target : target.replace(/\.ts$/, '.d.ts'))
    }
  }
  if (shipped.length === 0) return { missing: [], extra: [] }
  return { missing: [...reached].filter((f) => !shipped.includes(f)), extra: shipped.filter((f) => !reached.has(f)) }
}

async function lint(tarballs) {
  const lines = []
  const { publint } = await import('publint')
  const { formatMessage } = await import('publint/utils')
  for (const t of tarballs) {
    const tarball = readFileSync(t.file)
    const result = await publint({
      pack: { tarball: tarball.buffer.slice(tarball.byteOffset, tarball.byteOffset + tarball.byteLength) },
      level: 'suggestion',
    })
    const bad = result.messages.filter((m) => m.type !== 'suggestion')
    const suggestions = result.messages.filter((m) => m.type === 'suggestion')
    const text = (ms) => ms.map((m) => `${m.type}: ${formatMessage(m, result.pkg) ?? m.code}`).join('\n')
    lines.push(['ok', `publint ${t.name}`, ''])
    if (bad.length) lines[lines.length - 1] = ['FAIL', `publint ${t.name}`, `\n${indent(text(bad))}`]
    if (suggestions.length) lines.push(['note', `publint ${t.name}`, `\n${indent(text(suggestions))}`])
  }
  // attw: one process per tarball, two at a time.
  const attw = join(root, 'node_modules', '@arethetypeswrong', 'cli', 'dist', 'index.js')
  const results = new Array(tarballs.length)
  let next = 0
  await Promise.all(
    [0, 1].map(async () => {
      while (next < tarballs.length) {
        const i = next++
        results[i] = await run(
          process.execPath,
          [attw, tarballs[i].file, '--profile', 'esm-only', '--no-definitely-typed', '--format', 'ascii', '--no-emoji'],
          {
            timeout: 120_000,
          },
        )
      }
    }),
  )
  tarballs.forEach((t, i) => {
    const r = results[i]
    lines.push(
      r.code === 0
        ? ['ok', `attw ${t.name}`, 'esm-only profile']
        : ['FAIL', `attw ${t.name}`, `exited ${r.code}\n${indent(tail(r.output, 40))}`],
    )
  })
  return lines
}

async function install(tarballs, names, app) {
  const rootPkg = JSON.parse(readFileSync(join(root, 'package.json'), 'utf8'))
  const core = tarballs.find((t) => t.name === 'attach-storage')
  // Beside the tarballs, what the example itself imports: the host's framework and server, jose to sign
  // a token, prom-client for attach-storage/metrics, and Node's types for the TypeScript check. Versions as the workspace pins them.
  const hono = tarballs.find((t) => t.name === '@attach-storage/hono')?.pkg.devDependencies?.hono ?? 'latest'
  const extras = [
    `hono@${hono}`,
    `@hono/node-server@${installedVersion('@hono/node-server') ?? 'latest'}`,
    `jose@${core?.pkg.dependencies?.jose ?? 'latest'}`,
    // The optional peer of attach-storage/metrics, as a host that uses that entry installs it.
    `prom-client@${core?.pkg.devDependencies?.['prom-client'] ?? 'latest'}`,
    `@types/node@${rootPkg.devDependencies?.['@types/node'] ?? '20'}`,
  ]
  writeFileSync(
    join(app, 'package.json'),
    `${JSON.stringify({ name: 'attach-storage-install-check', version: '0.0.0', private: true, type: 'module' }, null, 2)}\n`,
  )
  const withScripts = args.has('--with-scripts')
  const t = Date.now()
  const result = await run(
    npm,
    [
      'install',
      '--no-audit',
      '--no-fund',
      '--prefer-offline',
      '--loglevel=error',
      ...(withScripts ? [] : ['--ignore-scripts']),
      ...tarballs.map((tb) => tb.file),
      ...extras,
    ],
    { cwd: app, timeout: 240_000 },
  )
  if (result.code !== 0) {
    line('FAIL', 'install the tarballs into a fresh project', `npm install exited ${result.code}\n${indent(tail(result.output))}`)
    return false
  }
  // Every copy of the project's packages in the fresh tree must be one of the tarballs.
  const lock = JSON.parse(readFileSync(join(app, 'package-lock.json'), 'utf8'))
  const wrong = []
  for (const [path, entry] of Object.entries(lock.packages ?? {})) {
    const name = entry.name ?? path.slice(path.lastIndexOf('node_modules/') + 'node_modules/'.length)
    if (!path || !names.has(name)) continue
    if (entry.link || !String(entry.resolved ?? '').startsWith('file:')) wrong.push(`${path} from ${entry.resolved ?? 'a link'}`)
  }
  const absent = tarballs.filter((tb) => !lock.packages?.[`node_modules/${tb.name}`])
  if (wrong.length || absent.length) {
    line(
      'FAIL',
      'install the tarballs into a fresh project',
      [...wrong.map((w) => `not from a tarball: ${w}`), ...absent.map((a) => `not installed: ${a.name}`)].join('; '),
    )
    return false
  }
  if (!withScripts) {
    // Install scripts were skipped; better-sqlite3 is the one native addon the example needs. The
    // workspace's build of the same version is reused (same Node), else it is built here.
    const version = JSON.parse(readFileSync(join(app, 'node_modules', 'better-sqlite3', 'package.json'), 'utf8')).version
    const built = join(root, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node')
    let usable = false
    if (installedVersion('better-sqlite3') === version && existsSync(built)) {
      mkdirSync(join(app, 'node_modules', 'better-sqlite3', 'build', 'Release'), { recursive: true })
      cpSync(built, join(app, 'node_modules', 'better-sqlite3', 'build', 'Release', 'better_sqlite3.node'))
      // Built for this Node? (The workspace may have been installed under another version.)
      const probe = await run(process.execPath, ['-e', "new (require('better-sqlite3'))(':memory:').close()"], {
        cwd: app,
        timeout: 30_000,
      })
      usable = probe.code === 0
    }
    if (!usable) {
      const rebuild = await run(npm, ['rebuild', 'better-sqlite3'], { cwd: app, timeout: 300_000 })
      if (rebuild.code !== 0) {
        line('FAIL', 'build better-sqlite3 in the fresh project', `\n${indent(tail(rebuild.output))}`)
        return false
      }
    }
  }
  line(
    'ok',
    'install the tarballs into a fresh project',
    `${tarballs.length} tarballs + ${extras.join(' ')}${withScripts ? '' : ' (install scripts skipped)'} (${Math.round((Date.now() - t) / 1000)} s)`,
  )
  return true
}

function installedVersion(name) {
  try {
    return JSON.parse(readFileSync(join(root, 'node_modules', name, 'package.json'), 'utf8')).version
  } catch {
    return undefined
  }
}

/** A script that imports every entry point of every package and checks it exports something. */
function importsScript(tarballs) {
  const specifiers = tarballs.flatMap((t) =>
    Object.keys(t.pkg.exports ?? { '.': null })
      .filter((k) => !k.includes('*') && k !== './package.json')
      // attach-storage/testing imports vitest, an optional peer the fresh project does not have.
      .filter((k) => !(t.name === 'attach-storage' && k === './testing'))
      .map((k) => (k === '.' ? t.name : `${t.name}/${k.slice(2)}`)),
  )
  return `const specifiers = ${JSON.stringify(specifiers)}
let failed = false
const counts = []
for (const s of specifiers) {
  try {
    const m = await import(s)
    const n = Object.keys(m).length
    if (n === 0) throw new Error('exports nothing')
    counts.push(s + ' (' + n + ')')
  } catch (error) {
    failed = true
    console.error(s + ': ' + (error && error.stack || error))
  }
}
if (failed) process.exit(1)
console.log(counts.join(', '))
process.exit(0)
`
}

const TSCONFIG = `${JSON.stringify(
  {
    compilerOptions: {
      target: 'ES2022',
      module: 'NodeNext',
      moduleResolution: 'NodeNext',
      lib: ['ES2023', 'DOM', 'DOM.Iterable'],
      types: ['node'],
      strict: true,
      noEmit: true,
      // The installed declarations are checked too: an import they make that a user does not have
      // (an optional peer's types, a dev-only package) fails here instead of turning into \`any\`.
      skipLibCheck: false,
    },
    files: ['embedding.ts', 'bridge.ts'],
  },
  null,
  2,
)}\n`

/**
 * The README's embedding example, as a user would paste it: the first TypeScript block under
 * "## Embedding" (type-checked, not run: it listens on a port), and the Web handlers and the
 * node:http bridge the README names after it.
 */
function embeddingSources() {
  const readme = readFileSync(join(root, 'README.md'), 'utf8')
  const section = readme.slice(readme.indexOf('\n## Embedding'))
  const block = /```ts\n([\s\S]*?)```/.exec(section)
  if (!readme.includes('\n## Embedding') || !block) throw new Error('README.md has no TypeScript block under "## Embedding"')
  return {
    'embedding.ts': block[1],
    'bridge.ts': `import { createServer } from 'node:http'
import { createAttachHandler, type AttachStorage } from 'attach-storage'
import { createNodeHandler } from 'attach-storage/node'

export function listen(storage: AttachStorage) {
  const { api, assets, fetch, matches } = createAttachHandler(storage)
  const handlers: Array<(request: Request) => Promise<Response>> = [api, assets, fetch]
  return { server: createServer(createNodeHandler(fetch)), handlers, matches }
}
`,
  }
}

/** An error thrown inside attach-storage: a misspelt setting (`tmp-tll`), refused at start. */
const STACK_JS = `import { createAttachStorage } from 'attach-storage'

try {
  await createAttachStorage({
    config: { 'tmp-tll': '1h', directory: { 'base-dir': './data/stack/files', 'tmp-dir': './data/stack/tmp' } },
    jwt: { secret: 'install-check-secret-of-32-bytes!' },
  })
  console.log('no error thrown')
  process.exit(1)
} catch (error) {
  console.log(JSON.stringify({ code: error.code, stack: error.stack }))
}
`

/**
 * The embedding example run for real: the README's Hono app (no listening socket: \`app.fetch\`), then
 * the plain Web handler for the view and the resized view. Plain ESM JavaScript, as a user would write.
 */
const EXAMPLE_JS = `import assert from 'node:assert/strict'
import { mkdirSync } from 'node:fs'
import { deflateSync } from 'node:zlib'
import { Hono } from 'hono'
import { SignJWT } from 'jose'
import { createAttachHandler, createAttachStorage, openDatabase } from 'attach-storage'
import { mountAttachStorage } from '@attach-storage/hono'

const step = (name, detail = '') => console.log('ok   example: ' + name + (detail ? ': ' + detail : ''))

// A 320x240 PNG of noise-free gradients, made here so the example needs no image file.
function png(width, height) {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1
    return c >>> 0
  })
  const crc = (buf) => {
    let c = 0xffffffff
    for (const b of buf) c = crcTable[(c ^ b) & 0xff] ^ (c >>> 8)
    return (c ^ 0xffffffff) >>> 0
  }
  const chunk = (type, data) => {
    const body = Buffer.concat([Buffer.from(type, 'latin1'), data])
    const out = Buffer.alloc(body.length + 8)
    out.writeUInt32BE(data.length, 0)
    body.copy(out, 4)
    out.writeUInt32BE(crc(body), body.length + 4)
    return out
  }
  const ihdr = Buffer.alloc(13)
  ihdr.writeUInt32BE(width, 0)
  ihdr.writeUInt32BE(height, 4)
  ihdr[8] = 8 // bit depth
  ihdr[9] = 2 // RGB
  const raw = Buffer.alloc((width * 3 + 1) * height)
  for (let y = 0; y < height; y++) {
    const row = y * (width * 3 + 1)
    for (let x = 0; x < width; x++) {
      raw[row + 1 + x * 3] = (x * 7 + y) & 0xff
      raw[row + 2 + x * 3] = (y * 5 + x * x) & 0xff
      raw[row + 3 + x * 3] = (x * y) & 0xff
    }
  }
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    chunk('IHDR', ihdr),
    chunk('IDAT', deflateSync(raw)),
    chunk('IEND', Buffer.alloc(0)),
  ])
}

mkdirSync('./data', { recursive: true })
const db = await openDatabase({ type: 'sqlite', file: './data/app.db' })
await db.schema
  .createTable('post')
  .ifNotExists()
  .addColumn('id', 'integer', (c) => c.primaryKey().autoIncrement())
  .addColumn('title', 'text', (c) => c.notNull())
  .addColumn('created_dt', 'text', (c) => c.notNull())
  .execute()

const secret = 'install-check-secret-of-32-bytes!'
const storage = await createAttachStorage({
  config: {
    directory: { 'base-dir': './data/files', 'tmp-dir': './data/tmp' },
    domains: {
      post: { 'date-field': 'created_dt', categories: { image: { filters: ['image'] } } },
    },
  },
  db,
  jwt: { secret },
})
step('createAttachStorage on SQLite and a local folder')

const app = new Hono()
mountAttachStorage(app, storage)
app.post('/posts', async (c) => {
  const user = await storage.authenticate(c.req.raw)
  if (!user) return c.json({ code: 'unauthorized', message: 'A valid Bearer token is required' }, 401)
  const { title, attachContainer } = await c.req.json()
  const post = await db
    .insertInto('post')
    .values({ title, created_dt: new Date().toISOString() })
    .returningAll()
    .executeTakeFirstOrThrow()
  const attachments = await storage.commitAttachContainer({
    refDomain: 'post',
    refKey: post.id,
    attachContainer,
    entity: post,
    user,
    request: c.req.raw,
  })
  return c.json({ ...post, attachments }, 201)
})

const token = await new SignJWT({})
  .setProtectedHeader({ alg: 'HS256' })
  .setSubject('1')
  .setExpirationTime('1h')
  .sign(new TextEncoder().encode(secret))
const auth = { Authorization: 'Bearer ' + token }
const base = 'http://localhost'
const image = png(320, 240)

// Temporary upload, through the Hono mount.
const form = new FormData()
form.append('refDomain', 'post')
form.append('refCategory', 'image')
form.append('file', new Blob([image], { type: 'image/png' }), 'gradient.png')
let res = await app.fetch(new Request(base + '/api/storage/attach/tmp', { method: 'POST', headers: auth, body: form }))
assert.equal(res.status, 200, 'temporary upload: ' + res.status + ' ' + (await res.clone().text()))
const uploaded = (await res.json()).files
assert.equal(uploaded.length, 1)
assert.equal(uploaded[0].size, image.length)
step('temporary upload', 'POST /api/storage/attach/tmp answered 200, ' + uploaded[0].size + ' bytes')

// Confirmed save: the host's route commits the container with its entity.
res = await app.fetch(
  new Request(base + '/posts', {
    method: 'POST',
    headers: { ...auth, 'Content-Type': 'application/json' },
    body: JSON.stringify({
      title: 'Hello',
      attachContainer: { refDomain: 'post', image: [{ savedName: uploaded[0].name, displayName: 'gradient.png' }] },
    }),
  }),
)
assert.equal(res.status, 201, 'save: ' + res.status + ' ' + (await res.clone().text()))
const post = await res.json()
assert.equal(post.attachments.length, 1)
const record = post.attachments[0]
assert.equal(record.refKey, String(post.id))
assert.equal(record.fileSize, image.length)
assert.equal(record.fileType, 'image/png')
step('confirmed save (commitAttachContainer)', 'POST /posts answered 201, record ' + record.id + ' at ' + record.url)

// View and resized view through the plain Web handler.
const handler = createAttachHandler(storage)
res = await handler.fetch(new Request(base + record.url))
assert.equal(res.status, 200, 'view: ' + res.status)
assert.equal(res.headers.get('content-type'), 'image/png')
const viewed = Buffer.from(await res.arrayBuffer())
assert.ok(viewed.equals(image), 'the viewed bytes are the uploaded bytes')
step('view', 'GET ' + record.url + ' answered 200 with the ' + viewed.length + ' uploaded bytes')

res = await handler.fetch(new Request(base + record.url + '?w=80'))
assert.equal(res.status, 200, 'resized view: ' + res.status + ' ' + (await res.clone().text()))
const resized = Buffer.from(await res.arrayBuffer())
assert.ok(resized.length > 0 && resized.length < image.length, 'resized ' + resized.length + ' < ' + image.length)
assert.equal(resized.readUInt32BE(16), 80, 'resized width')
assert.equal(resized.readUInt32BE(20), 60, 'resized height')
step('resized view', 'GET ' + record.url + '?w=80 answered 200, 80x60, ' + resized.length + ' bytes < ' + image.length)

await storage.close()
await db.destroy()
process.exit(0)
`

await main().catch((error) => line('FAIL', 'check-packages', error?.stack ?? String(error)))
const seconds = Math.round((Date.now() - started) / 1000)
if (failures.length) {
  console.log(`${failures.length} check(s) failed in ${seconds} s: ${failures.join(', ')}`)
  process.exit(1)
}
console.log(`all package checks passed in ${seconds} s`)
