/**
 * `attach-storage/config`: the settings beyond what a host writes inline on day one: reading a JSON or
 * YAML settings file and merging it with settings in code, the {@link Registry} the `registrar` option
 * is handed, and the types of the settings tree's parts (one domain, one category, one filter-chain
 * entry). The root entry keeps the tree's own type, `AttachConfigInput`. docs/configuration.md has the
 * settings.
 *
 * @example
 * import { createAttachStorage } from 'attach-storage'
 * import { loadConfigFile, mergeSettings } from 'attach-storage/config'
 *
 * const fromFile = await loadConfigFile('./attach.yaml')
 * const storage = await createAttachStorage({ config: mergeSettings({ directory: { baseDir: './data/files' } }, fromFile) })
 * @module
 */
export { loadConfigFile, mergeSettings } from './load.js'
export type { CategoryConfig, DomainConfig, FilterSpec } from './schema.js'
export { Registry } from '../registry/registry.js'
