/**
 * Test only (not exported): what the command's tests share. A data directory of the reference server's
 * layout (`attach.db`, `files/`) seeded with files, and a configuration file declaring a second local store.
 */
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { LocalStore } from '../stores/local-store.js'
import { openDataDir, type SeededFile, seedFiles } from './test-seed.js'

/** Seeds `count` files of `size` bytes (default 1000) of `domain` (default demo) into `dataDir`'s local store and SQLite file. */
export async function seedDataDir(
  dataDir: string,
  options: { count: number; size?: number; domain?: string; sparse?: boolean },
): Promise<SeededFile[]> {
  const { db, repo } = await openDataDir(dataDir)
  const store = new LocalStore('local', { baseDir: join(dataDir, 'files') })
  try {
    return await seedFiles(repo, store, { ...options, size: options.size ?? 1000, domain: options.domain ?? 'demo' })
  } finally {
    await db.destroy()
  }
}

/**
 * Writes `attach-{domainStore}.json` in `dataDir`: the stores `local` and `archive` (`{dataDir}/archive`),
 * domain demo on `domainStore`. Answers the file's path.
 */
export function archiveConfig(dataDir: string, domainStore: string): string {
  const file = join(dataDir, `attach-${domainStore}.json`)
  writeFileSync(
    file,
    JSON.stringify({
      attach: {
        stores: { local: { type: 'local' }, archive: { type: 'local', 'base-dir': join(dataDir, 'archive') } },
        domains: { demo: { store: domainStore, categories: { default: {} } } },
      },
    }),
  )
  return file
}
