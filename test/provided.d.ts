import 'vitest'

declare module 'vitest' {
  export interface ProvidedContext {
    /** URL of the PostgreSQL server started (or named by ATTACH_TEST_PG_URL) by test/global-setup.ts. */
    pgUrl: string
    /**
     * URL of the MariaDB/MySQL server started (or named by ATTACH_TEST_MYSQL_URL) by test/global-setup.ts,
     * without a database (`mysql://root@127.0.0.1:PORT/`).
     */
    mysqlUrl: string
  }
}
