import { defineProject } from 'vitest/config'

/** One vitest project per package and example; the root vitest.config.ts runs them all. */
const shared = {
  resolve: { conditions: ['source'] },
  ssr: { resolve: { conditions: ['source'] } },
}

export default [
  defineProject({
    ...shared,
    test: {
      name: 'attach-storage',
      root: './packages/attach-storage',
      include: ['src/**/*.test.ts'],
      globalSetup: ['../../test/global-setup.ts'],
      testTimeout: 30_000,
      hookTimeout: 60_000,
    },
  }),
  defineProject({
    ...shared,
    test: {
      name: 'hono',
      root: './packages/hono',
      include: ['src/**/*.test.ts'],
      testTimeout: 30_000,
    },
  }),
  defineProject({
    ...shared,
    test: {
      name: 'hono-app',
      root: './examples/hono-app',
      include: ['test/**/*.test.ts', 'src/**/*.test.ts'],
      globalSetup: ['../../test/global-setup.ts'],
      testTimeout: 60_000,
      hookTimeout: 60_000,
    },
  }),
]
