/** Where the command reads its configuration: the reference server's environment, or `--config`. */
import { dirname, join, resolve } from 'node:path'
import { loadConfigFile, mergeSettings } from '../config/load.js'

/** The environment variables the command reads (the reference server's). */
export interface CliEnv {
  ATTACH_DATA_DIR?: string
  ATTACH_CONFIG?: string
  ATTACH_DATABASE_URL?: string
  [key: string]: string | undefined
}

/** The settings tree (camelCase, not validated yet) and where the command keeps its own state. */
export interface CliSettings {
  settings: Record<string, unknown>
  /** The folder of the configuration file, else the data directory: copy-store's journals live there. */
  stateDir: string
}

/**
 * Builds the settings as the reference server does: `ATTACH_DATA_DIR` (default `./.data`) holds the
 * SQLite file, `files/` and `tmp/`; the `--config` file (else `ATTACH_CONFIG`), in the `{"attach": {...}}`
 * shape, is merged over that; `ATTACH_DATABASE_URL` replaces the SQLite file.
 */
export async function resolveSettings(configFile: string | undefined, env: CliEnv, cwd = process.cwd()): Promise<CliSettings> {
  const dataDir = resolve(cwd, env.ATTACH_DATA_DIR ?? './.data')
  let settings: Record<string, unknown> = {
    directory: { baseDir: join(dataDir, 'files'), tmpDir: join(dataDir, 'tmp') },
    db: { type: 'sqlite', file: join(dataDir, 'attach.db') },
  }
  const file = configFile ?? env.ATTACH_CONFIG
  if (file) settings = mergeSettings(settings, await loadConfigFile(resolve(cwd, file)))
  const url = env.ATTACH_DATABASE_URL
  if (url) settings.db = { type: url.startsWith('mysql') ? 'mysql' : 'postgres', url }
  return { settings, stateDir: file ? dirname(resolve(cwd, file)) : dataDir }
}
