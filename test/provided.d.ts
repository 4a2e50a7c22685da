import 'vitest'

declare module 'vitest' {
  export interface ProvidedContext {
    /** URL of the PostgreSQL server started (or named by ATTACH_TEST_PG_URL) by test/global-setup.ts. */
    pgUrl: string
  }
}
