import { BaseSequencer, type TestSpecification } from 'vitest/node'
import { defineConfig } from 'vitest/config'
import projects from './vitest.workspace.js'

/**
 * Vitest's order (project by project, the slowest file of the last run first), with the package check
 * (examples/adapters-test/test/packages.test.ts) moved to the end: in CI (.ci/run) that check runs
 * beside the suite from its start and the test reads its report, which is then there, not awaited.
 * Vitest runs one file at a time here (two cores: one worker), so the order changes nothing else.
 */
class PackageCheckLast extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const sorted = await super.sort(files)
    const last = (f: TestSpecification) => f.moduleId.replaceAll('\\', '/').endsWith('/examples/adapters-test/test/packages.test.ts')
    return [...sorted.filter((f) => !last(f)), ...sorted.filter(last)]
  }
}

// Vitest 4 no longer reads vitest.workspace.ts by name; the project list lives there and is used here.
export default defineConfig({
  test: {
    projects,
    reporters: ['default'],
    sequence: { sequencer: PackageCheckLast },
  },
})
