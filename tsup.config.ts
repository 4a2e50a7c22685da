import { existsSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { defineConfig, type Options } from 'tsup'

/**
 * One build per published package under packages/: its entries are the `@attach-storage/source`
 * conditions of its package.json `exports` map, written to the matching `import` paths under dist/.
 */
const SOURCE = '@attach-storage/source'

const builds: Options[] = readdirSync('packages', { withFileTypes: true })
  .filter((d) => d.isDirectory() && existsSync(join('packages', d.name, 'package.json')))
  .flatMap((d) => {
    const dir = join('packages', d.name)
    const pkg = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as {
      exports?: Record<string, { [SOURCE]?: string; import?: string }>
      dependencies?: Record<string, string>
      peerDependencies?: Record<string, string>
    }
    // Dependencies stay imports (and their subpaths, e.g. attach-storage/testing); nothing is bundled in.
    const deps = [...Object.keys(pkg.dependencies ?? {}), ...Object.keys(pkg.peerDependencies ?? {})]
    const external = deps.map((d) => new RegExp(`^${d.replace(/[.*+?^${}()|[\]\\/]/g, '\\$&')}(/.*)?$`))
    const entry: Record<string, string> = {}
    for (const target of Object.values(pkg.exports ?? {})) {
      const source = target[SOURCE]
      if (!source || !target.import) continue
      const out = target.import.replace(/^\.\/dist\//, '').replace(/\.js$/, '')
      if (existsSync(join(dir, source))) entry[out] = join(dir, source)
    }
    if (Object.keys(entry).length === 0) return []
    return [
      defineConfig({
        entry,
        external,
        outDir: join(dir, 'dist'),
        format: ['esm'],
        target: 'node20',
        platform: 'node',
        dts: true,
        sourcemap: true,
        // src/ ships beside dist/ (each package.json's `files`, tests left out), so a map's sources are
        // files of the installed package and need not be repeated in it. The browser client's maps keep
        // them: a host's bundler carries only embedded sources into its own map.
        esbuildOptions(options) {
          options.sourcesContent = d.name === 'client'
        },
        clean: true,
        splitting: true,
        treeshake: true,
      }) as Options,
    ]
  })

export default builds
