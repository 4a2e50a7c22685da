import { existsSync, readdirSync } from 'node:fs'
import { join } from 'node:path'
import { defineProject } from 'vitest/config'

/**
 * One vitest project per workspace package and example (packages/*, examples/*), found on disk so a new
 * package joins the run by existing. Tests sit beside the code (`src/**\/*.test.ts`) or in `test/`.
 * Every project gets the PostgreSQL/MariaDB servers of test/global-setup.ts.
 */
const dirs = ['packages', 'examples'].flatMap((group) =>
  existsSync(group)
    ? readdirSync(group, { withFileTypes: true })
        .filter((d) => d.isDirectory() && existsSync(join(group, d.name, 'package.json')))
        .map((d) => join(group, d.name))
    : [],
)

export default dirs.map((dir) =>
  defineProject({
    resolve: { conditions: ['@attach-storage/source'] },
    ssr: { resolve: { conditions: ['@attach-storage/source'] } },
    test: {
      name: dir.split('/').pop()!,
      root: `./${dir}`,
      include: ['src/**/*.test.ts', 'test/**/*.test.ts'],
      globalSetup: ['../../test/global-setup.ts'],
      testTimeout: 60_000,
      hookTimeout: 120_000,
    },
  }),
)
