/** `attach-storage migrate`: brings the schema up to date (idempotent); `--dry-run` prints the SQL instead. */
import { resolve } from 'node:path'
import {
  type CompiledQuery,
  type DatabaseConnection,
  type QueryResult,
  type Driver,
  Kysely,
  Migrator,
  MysqlIntrospector,
  MysqlQueryCompiler,
  PostgresIntrospector,
  PostgresQueryCompiler,
  SqliteIntrospector,
  SqliteQueryCompiler,
} from 'kysely'
import { parseAttachConfig } from '../config/schema.js'
import { configError } from '../errors.js'
import { dialectOf, openDatabase } from '../repository/database.js'
import { attachMigrations, MIGRATION_LOCK_TABLE, MIGRATION_TABLE, migrateAttachSchema } from '../repository/migrations.js'
import { type CliIo, EXIT, type GlobalOptions, report } from './runtime.js'
import { resolveSettings } from './settings.js'

/** Statements that change the database: recorded by a dry run, never sent. */
const WRITES = /^\s*(create|alter|drop|insert|update|delete|replace)\b/i

/** Opens the configured database alone (no stores). */
export async function openConfiguredDatabase(options: GlobalOptions, io: CliIo): Promise<Kysely<any>> {
  const { settings } = await resolveSettings(options.config, io.env, io.cwd)
  const config = parseAttachConfig(settings)
  const c = config.db
  if (c.type === 'sqlite')
    return openDatabase({ type: 'sqlite', file: resolve(c.file ?? resolve(config.directory.baseDir ?? '.', 'attach.db')) })
  if (!c.url) throw configError(`attach.db.url is required for db.type ${c.type}`)
  return openDatabase({ type: c.type, url: c.url })
}

/**
 * A Kysely over `db` that reads for real (the migrations look at what exists) and records every
 * statement that would change the database instead of sending it.
 */
function recordingDatabase(db: Kysely<any>, statements: string[]): Kysely<any> {
  const dialect = dialectOf(db)
  const connection: DatabaseConnection = {
    async executeQuery<R>(query: CompiledQuery) {
      if (!WRITES.test(query.sql)) return (await db.executeQuery(query)) as QueryResult<R>
      statements.push(query.parameters.length ? `${query.sql} -- parameters: ${JSON.stringify(query.parameters)}` : query.sql)
      return { rows: [] as R[] }
    },
    // biome-ignore lint/correctness/useYield: the migrations never stream
    async *streamQuery() {
      throw new Error('streamed queries are not part of a migration')
    },
  }
  const driver: Driver = {
    init: async () => {},
    acquireConnection: async () => connection,
    beginTransaction: async () => {},
    commitTransaction: async () => {},
    rollbackTransaction: async () => {},
    releaseConnection: async () => {},
    destroy: async () => {},
  }
  return new Kysely({
    dialect: {
      createAdapter: () => db.getExecutor().adapter,
      createDriver: () => driver,
      createQueryCompiler: () =>
        dialect === 'sqlite' ? new SqliteQueryCompiler() : dialect === 'mysql' ? new MysqlQueryCompiler() : new PostgresQueryCompiler(),
      createIntrospector: (k) =>
        dialect === 'sqlite' ? new SqliteIntrospector(k) : dialect === 'mysql' ? new MysqlIntrospector(k) : new PostgresIntrospector(k),
    },
  })
}

/** The migrations not applied yet, in order. */
async function pendingMigrations(db: Kysely<any>): Promise<string[]> {
  const migrator = new Migrator({
    db,
    provider: { getMigrations: async () => attachMigrations },
    migrationTableName: MIGRATION_TABLE,
    migrationLockTableName: MIGRATION_LOCK_TABLE,
  })
  return (await migrator.getMigrations()).filter((m) => m.executedAt === undefined).map((m) => m.name)
}

export async function migrateCommand(options: GlobalOptions & { dryRun?: boolean }, io: CliIo): Promise<number> {
  const db = await openConfiguredDatabase(options, io)
  try {
    const pending = await pendingMigrations(db)
    if (options.dryRun) {
      const statements: string[] = []
      const recorder = recordingDatabase(db, statements)
      for (const name of pending) {
        statements.push(`-- migration ${name}`)
        await attachMigrations[name]!.up(recorder)
      }
      if (options.json) report(io, options, { dialect: dialectOf(db), pending, statements }, [])
      else
        io.stdout.write(
          pending.length ? `${statements.map((s) => (s.startsWith('--') ? s : `${s};`)).join('\n')}\n` : '-- the schema is up to date\n',
        )
      return EXIT.ok
    }
    await migrateAttachSchema(db)
    report(io, options, { dialect: dialectOf(db), applied: pending }, [
      pending.length ? `applied ${pending.length} migration(s): ${pending.join(', ')}` : 'the schema is up to date',
    ])
    return EXIT.ok
  } finally {
    await db.destroy()
  }
}
