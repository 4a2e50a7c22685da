import { defineConfig } from 'tsup'

/** One build per published package; one entry per export of its package.json. */
const pkg = (dir: string, entry: Record<string, string>) =>
  defineConfig({
    entry: Object.fromEntries(Object.entries(entry).map(([k, v]) => [k, `packages/${dir}/${v}`])),
    outDir: `packages/${dir}/dist`,
    format: ['esm'],
    target: 'node20',
    platform: 'node',
    dts: true,
    sourcemap: true,
    clean: true,
    splitting: true,
    treeshake: true,
  })

export default [
  pkg('attach-storage', { index: 'src/index.ts', testing: 'src/testing.ts' }),
  pkg('hono', { index: 'src/index.ts' }),
].flat()
