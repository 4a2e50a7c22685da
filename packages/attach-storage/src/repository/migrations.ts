import {
  type ColumnDefinitionBuilder,
  type CreateTableBuilder,
  type Kysely,
  type Migration,
  type MigrationProvider,
  Migrator,
  sql,
} from 'kysely'
import { AttachStorageError } from '../errors.js'
import { BLOB_TABLE, type DialectName, dialectOf, FILE_TABLE } from './database.js'

/** Kysely's migration table for attach-storage, apart from a host's own `kysely_migration`. */
export const MIGRATION_TABLE = 'attach_migration'
/** Kysely's migration lock table for attach-storage. */
export const MIGRATION_LOCK_TABLE = 'attach_migration_lock'

/** An auto-increment 64-bit primary key, written the way each dialect wants it. */
function idColumn(dialect: DialectName): [type: 'integer' | 'bigint', build: (col: ColumnDefinitionBuilder) => ColumnDefinitionBuilder] {
  switch (dialect) {
    case 'sqlite':
      // Only `integer primary key` aliases the rowid; it is 64-bit in SQLite.
      return ['integer', (col) => col.primaryKey().autoIncrement()]
    case 'postgres':
      return ['bigint', (col) => col.primaryKey().generatedByDefaultAsIdentity()]
    case 'mysql':
      return ['bigint', (col) => col.primaryKey().autoIncrement()]
  }
}

/** MySQL: InnoDB, utf8mb4 and a binary collation, so keys compare exactly as on the other dialects. */
function tableOptions<T extends string, C extends string>(dialect: DialectName, builder: CreateTableBuilder<T, C>): CreateTableBuilder<T, C> {
  return dialect === 'mysql' ? builder.modifyEnd(sql`engine=InnoDB default charset=utf8mb4 collate=utf8mb4_bin`) : builder
}

const attachTables: Migration = {
  async up(db: Kysely<any>): Promise<void> {
    const dialect = dialectOf(db)
    const [idType, idBuild] = idColumn(dialect)

    await tableOptions(
      dialect,
      db.schema
        .createTable(BLOB_TABLE)
        .addColumn('id', idType, idBuild)
        .addColumn('store', 'varchar(64)', (col) => col.notNull())
        .addColumn('saved_dir', 'varchar(512)', (col) => col.notNull())
        .addColumn('saved_name', 'varchar(255)', (col) => col.notNull())
        .addColumn('file_size', 'bigint', (col) => col.notNull())
        .addColumn('file_type', 'varchar(255)', (col) => col.notNull())
        .addColumn('sha256', 'char(64)', (col) => col.notNull())
        .addColumn('ref_count', 'integer', (col) => col.notNull().defaultTo(0))
        .addColumn('created_dt', 'varchar(24)', (col) => col.notNull())
        .addColumn('updated_dt', 'varchar(24)', (col) => col.notNull()),
    ).execute()

    if (dialect === 'mysql') {
      // utf8mb4 allows 3072 key bytes: (64 + 512 + 255) * 4 is too long, so the directory is a prefix
      // there (stored names are generated unique identifiers; the prefix never decides alone).
      await sql`create unique index attach_blob_path_uq on ${sql.table(BLOB_TABLE)} (store, saved_dir(255), saved_name)`.execute(db)
    } else {
      await db.schema
        .createIndex('attach_blob_path_uq')
        .on(BLOB_TABLE)
        .columns(['store', 'saved_dir', 'saved_name'])
        .unique()
        .execute()
    }
    await db.schema.createIndex('attach_blob_dead_idx').on(BLOB_TABLE).columns(['ref_count', 'updated_dt']).execute()

    await tableOptions(
      dialect,
      db.schema
        .createTable(FILE_TABLE)
        .addColumn('id', idType, idBuild)
        .addColumn('ref_domain', 'varchar(64)', (col) => col.notNull())
        .addColumn('ref_key', 'varchar(255)', (col) => col.notNull())
        .addColumn('ref_category', 'varchar(64)', (col) => col.notNull())
        .addColumn('display_name', 'varchar(1024)', (col) => col.notNull())
        .addColumn('saved_name', 'varchar(255)', (col) => col.notNull())
        .addColumn('saved_dir', 'varchar(512)', (col) => col.notNull())
        .addColumn('file_type', 'varchar(255)', (col) => col.notNull())
        .addColumn('file_size', 'bigint', (col) => col.notNull())
        .addColumn('ext', 'varchar(1024)')
        .addColumn('fmeta_value', 'varchar(1024)')
        .addColumn('sort', 'integer', (col) => col.notNull())
        .addColumn('created_by', 'varchar(255)')
        .addColumn('created_dt', 'varchar(24)', (col) => col.notNull())
        .addColumn('deleted', 'smallint', (col) => col.notNull().defaultTo(0))
        .addColumn('deleted_dt', 'varchar(24)')
        .addColumn('sha256', 'char(64)', (col) => col.notNull())
        .addColumn('store', 'varchar(64)', (col) => col.notNull())
        .addColumn('blob_id', 'bigint', (col) => col.notNull())
        .addForeignKeyConstraint('attach_file_blob_fk', ['blob_id'], BLOB_TABLE, ['id']),
    ).execute()

    await db.schema
      .createIndex('attach_file_ref_idx')
      .on(FILE_TABLE)
      .columns(['ref_domain', 'ref_key', 'ref_category', 'deleted', 'sort', 'id'])
      .execute()
    await db.schema.createIndex('attach_file_blob_idx').on(FILE_TABLE).column('blob_id').execute()
  },

  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropTable(FILE_TABLE).ifExists().execute()
    await db.schema.dropTable(BLOB_TABLE).ifExists().execute()
  },
}

/**
 * The attach-storage migrations, in order. Names never change once released. Run them with
 * {@link migrateAttachSchema}, never inside a host's migration table.
 */
export const attachMigrations: Readonly<Record<string, Migration>> = {
  '0001_attach_tables': attachTables,
}

const provider: MigrationProvider = {
  getMigrations: async () => attachMigrations,
}

/**
 * Brings the attach-storage tables up to date. Idempotent; safe to call at every start. Uses its own
 * migration tables (`attach_migration`, `attach_migration_lock`), so a host's Kysely migrations on the
 * same database are left alone.
 *
 * @throws AttachStorageError `migration-failed` (the driver's error is the `cause`)
 */
export async function migrateAttachSchema(db: Kysely<any>): Promise<void> {
  let outcome: Awaited<ReturnType<Migrator['migrateToLatest']>>
  try {
    const migrator = new Migrator({
      db,
      provider,
      migrationTableName: MIGRATION_TABLE,
      migrationLockTableName: MIGRATION_LOCK_TABLE,
    })
    outcome = await migrator.migrateToLatest()
  } catch (cause) {
    throw new AttachStorageError('migration-failed', 'Could not migrate the attach-storage tables', { cause })
  }
  if (outcome.error !== undefined) {
    const failed = outcome.results?.find((r) => r.status === 'Error')?.migrationName
    const reason = outcome.error instanceof Error ? outcome.error.message : String(outcome.error)
    throw new AttachStorageError(
      'migration-failed',
      `Could not migrate the attach-storage tables${failed ? ` (migration ${failed})` : ''}: ${reason}`,
      { cause: outcome.error },
    )
  }
}
