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
import { BLOB_TABLE, type DialectName, dialectOf, FILE_TABLE, VARIANT_TABLE } from './database.js'
import { PENDING_TABLE } from './pending-uploads.js'

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

/**
 * The binary no-pad collation of utf8mb4 on this MySQL server: keys compare byte for byte, as on SQLite
 * and PostgreSQL. `utf8mb4_bin` is not enough: it is a PAD SPACE collation (`'a' = 'a '`). MariaDB
 * (10.2+) names it `utf8mb4_nopad_bin`, MySQL 8 `utf8mb4_0900_bin`; `utf8mb4_bin` on older servers.
 */
async function mysqlKeyCollation(db: Kysely<any>): Promise<string> {
  const preferred = ['utf8mb4_nopad_bin', 'utf8mb4_0900_bin']
  const { rows } = await sql<{
    name: string
  }>`select collation_name as name from information_schema.collations where collation_name in (${sql.join(preferred)})`.execute(db)
  const available = new Set(rows.map((r) => r.name))
  return preferred.find((c) => available.has(c)) ?? 'utf8mb4_bin'
}

/** MySQL: InnoDB, utf8mb4 with an exact collation, and the DYNAMIC row format (3072-byte index keys). */
function tableOptions<T extends string, C extends string>(
  dialect: DialectName,
  collation: string,
  builder: CreateTableBuilder<T, C>,
): CreateTableBuilder<T, C> {
  return dialect === 'mysql'
    ? builder.modifyEnd(sql`engine=InnoDB default charset=utf8mb4 collate=${sql.raw(collation)} row_format=dynamic`)
    : builder
}

/**
 * MySQL: the SHA-256 of the blob's place (store, saved_dir, saved_name), each part after its length so
 * that no two places meet. Unique in place of the three columns, whose 831 characters (3324 bytes in
 * utf8mb4) exceed InnoDB's 3072-byte key limit.
 */
const MYSQL_PLACE_HASH = sql`unhex(sha2(concat(char_length(store), ':', store, char_length(saved_dir), ':', saved_dir, saved_name), 256))`

async function createTables(db: Kysely<any>, dialect: DialectName, created: string[]): Promise<void> {
  const [idType, idBuild] = idColumn(dialect)
  const collation = dialect === 'mysql' ? await mysqlKeyCollation(db) : ''

  let blobTable = db.schema
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
    .addColumn('updated_dt', 'varchar(24)', (col) => col.notNull())
  if (dialect === 'mysql') {
    blobTable = blobTable.addColumn('place_hash', sql`binary(32)`, (col) => col.generatedAlwaysAs(MYSQL_PLACE_HASH).stored())
  }
  await tableOptions(dialect, collation, blobTable).execute()
  created.push(BLOB_TABLE)

  if (dialect === 'mysql') {
    // Uniqueness on the hash of the whole place; lookups by place on an index holding a prefix of
    // saved_dir (the other columns decide with it, and the row itself is compared in full).
    await db.schema.createIndex('attach_blob_path_uq').on(BLOB_TABLE).column('place_hash').unique().execute()
    await sql`create index attach_blob_path_idx on ${sql.table(BLOB_TABLE)} (store, saved_dir(255), saved_name)`.execute(db)
  } else {
    await db.schema.createIndex('attach_blob_path_uq').on(BLOB_TABLE).columns(['store', 'saved_dir', 'saved_name']).unique().execute()
  }
  await db.schema.createIndex('attach_blob_dead_idx').on(BLOB_TABLE).columns(['ref_count', 'updated_dt']).execute()

  await tableOptions(
    dialect,
    collation,
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
  created.push(FILE_TABLE)

  // (64 + 255 + 64) characters: 1532 bytes in utf8mb4, within MySQL's 3072.
  await db.schema
    .createIndex('attach_file_ref_idx')
    .on(FILE_TABLE)
    .columns(['ref_domain', 'ref_key', 'ref_category', 'deleted', 'sort', 'id'])
    .execute()
  await db.schema.createIndex('attach_file_blob_idx').on(FILE_TABLE).column('blob_id').execute()
}

const attachTables: Migration = {
  async up(db: Kysely<any>): Promise<void> {
    const dialect = dialectOf(db)
    const created: string[] = []
    try {
      await createTables(db, dialect, created)
    } catch (err) {
      // On PostgreSQL the Migrator's transaction takes the whole migration back. Kysely runs SQLite
      // migrations outside a transaction, and MySQL commits each DDL statement anyway: drop what this
      // run created, so that it can run again once the cause is fixed.
      if (!db.getExecutor().adapter.supportsTransactionalDdl) {
        for (const table of created.reverse())
          await db.schema
            .dropTable(table)
            .ifExists()
            .execute()
            .catch(() => {})
      }
      throw err
    }
  },

  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropTable(FILE_TABLE).ifExists().execute()
    await db.schema.dropTable(BLOB_TABLE).ifExists().execute()
  },
}

/**
 * `attach_blob.tmp_name`: the temporary file a pending blob waits for, so that the retry of a confirmed
 * save interrupted between the move and the record finds the blob (and its file) whatever the month.
 * Written so that a run interrupted half-way (SQLite and MySQL have no transactional DDL) can run again.
 */
const blobTmpName: Migration = {
  async up(db: Kysely<any>): Promise<void> {
    const dialect = dialectOf(db)
    const blob = (await db.introspection.getTables()).find((t) => t.name === BLOB_TABLE)
    if (!blob?.columns.some((c) => c.name === 'tmp_name')) {
      await db.schema.alterTable(BLOB_TABLE).addColumn('tmp_name', 'varchar(255)').execute()
    }
    const index = db.schema.createIndex('attach_blob_tmp_idx').on(BLOB_TABLE).column('tmp_name')
    if (dialect !== 'mysql') await index.ifNotExists().execute()
    else {
      // MySQL has no CREATE INDEX IF NOT EXISTS: an existing index (error 1061) is fine.
      await index.execute().catch((err: { errno?: number }) => {
        if (err?.errno !== 1061) throw err
      })
    }
  },

  async down(db: Kysely<any>): Promise<void> {
    const drop = db.schema.dropIndex('attach_blob_tmp_idx')
    await (dialectOf(db) === 'mysql' ? drop.on(BLOB_TABLE) : drop.ifExists()).execute()
    await db.schema.alterTable(BLOB_TABLE).dropColumn('tmp_name').execute()
  },
}

/**
 * `attach_variant`: the named variants made for each record (docs/variants.md), one row per record and
 * name. Idempotent like the others: a run cut short on SQLite or MySQL can run again.
 */
const variantTable: Migration = {
  async up(db: Kysely<any>): Promise<void> {
    const dialect = dialectOf(db)
    const collation = dialect === 'mysql' ? await mysqlKeyCollation(db) : ''
    await tableOptions(
      dialect,
      collation,
      db.schema
        .createTable(VARIANT_TABLE)
        .ifNotExists()
        .addColumn('file_id', 'bigint', (col) => col.notNull())
        .addColumn('name', 'varchar(64)', (col) => col.notNull())
        .addColumn('spec', 'varchar(64)', (col) => col.notNull())
        .addColumn('file_size', 'bigint', (col) => col.notNull())
        .addColumn('file_type', 'varchar(255)', (col) => col.notNull())
        .addColumn('created_dt', 'varchar(24)', (col) => col.notNull())
        .addPrimaryKeyConstraint('attach_variant_pk', ['file_id', 'name']),
    ).execute()
  },

  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropTable(VARIANT_TABLE).ifExists().execute()
  },
}

/**
 * `attach_pending`: the uploads not committed yet (temporary files, unfinished tus uploads, presigned
 * uploads) with their user, bytes and expiry, which the per-user quota counts, and the lease of the
 * PATCH writing a tus upload (service/quota.ts). Idempotent like the others.
 */
const pendingTable: Migration = {
  async up(db: Kysely<any>): Promise<void> {
    const dialect = dialectOf(db)
    const collation = dialect === 'mysql' ? await mysqlKeyCollation(db) : ''
    await tableOptions(
      dialect,
      collation,
      db.schema
        .createTable(PENDING_TABLE)
        .ifNotExists()
        .addColumn('name', 'varchar(255)', (col) => col.primaryKey())
        .addColumn('user_key', 'varchar(255)', (col) => col.notNull())
        .addColumn('kind', 'varchar(16)', (col) => col.notNull())
        .addColumn('bytes', 'bigint', (col) => col.notNull())
        .addColumn('expires_dt', 'varchar(24)', (col) => col.notNull())
        .addColumn('lease_id', 'varchar(64)')
        .addColumn('lease_until', 'varchar(24)'),
    ).execute()
    const index = db.schema.createIndex('attach_pending_user_idx').on(PENDING_TABLE).columns(['user_key', 'expires_dt'])
    if (dialect !== 'mysql') await index.ifNotExists().execute()
    else {
      // MySQL has no CREATE INDEX IF NOT EXISTS: an existing index (error 1061) is fine.
      await index.execute().catch((err: { errno?: number }) => {
        if (err?.errno !== 1061) throw err
      })
    }
  },

  async down(db: Kysely<any>): Promise<void> {
    await db.schema.dropTable(PENDING_TABLE).ifExists().execute()
  },
}

/**
 * `media` (JSON text, nullable) on `attach_blob`, where it belongs to the bytes, and on `attach_file`,
 * which copies its blob's file facts (type, size, sha256) so that a lookup reads one table and no file.
 * Rows from before stay null ("not known"). Idempotent: a column already there is left alone.
 */
const mediaColumn: Migration = {
  async up(db: Kysely<any>): Promise<void> {
    const tables = await db.introspection.getTables()
    for (const name of [BLOB_TABLE, FILE_TABLE]) {
      if (tables.find((t) => t.name === name)?.columns.some((c) => c.name === 'media')) continue
      await db.schema.alterTable(name).addColumn('media', 'text').execute()
    }
  },

  async down(db: Kysely<any>): Promise<void> {
    for (const name of [FILE_TABLE, BLOB_TABLE]) await db.schema.alterTable(name).dropColumn('media').execute()
  },
}

/**
 * `attach_file.focus_x` / `focus_y`: a record's focal point (0..1 from the top left; both or neither) that
 * cover crops keep inside their box. Idempotent like the others.
 */
const focusColumns: Migration = {
  async up(db: Kysely<any>): Promise<void> {
    const file = (await db.introspection.getTables()).find((t) => t.name === FILE_TABLE)
    for (const column of ['focus_x', 'focus_y']) {
      if (file?.columns.some((c) => c.name === column)) continue
      await db.schema.alterTable(FILE_TABLE).addColumn(column, 'double precision').execute()
    }
  },

  async down(db: Kysely<any>): Promise<void> {
    for (const column of ['focus_x', 'focus_y']) await db.schema.alterTable(FILE_TABLE).dropColumn(column).execute()
  },
}

/**
 * The attach-storage migrations, in order. Names never change once released. Run them with
 * {@link migrateAttachSchema}, never inside a host's migration table.
 */
export const attachMigrations: Readonly<Record<string, Migration>> = {
  '0001_attach_tables': attachTables,
  '0002_blob_tmp_name': blobTmpName,
  '0003_variant_table': variantTable,
  '0004_pending_table': pendingTable,
  '0005_media': mediaColumn,
  '0006_focus': focusColumns,
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
