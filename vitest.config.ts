import { defineConfig } from 'vitest/config'
import projects from './vitest.workspace.js'

// Vitest 4 no longer reads vitest.workspace.ts by name; the project list lives there and is used here.
export default defineConfig({
  test: {
    projects,
    reporters: ['default'],
  },
})
