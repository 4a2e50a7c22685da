/**
 * `attach-storage/store-kit`: what every store package needs besides its transport. Settings declared
 * by a valibot schema per setting (kebab-case and camelCase keys, secrets masked in every message), the
 * errors of the {@link Store} contract (`not-found`, `store-failure`, `range-not-satisfiable`,
 * `bad-key`), and key prefixing through the core's key normalizer. docs/stores/writing-a-store.md
 * shows a store built on it.
 * @module
 */
export {
  defineStoreSettings,
  setting,
  settingsError,
  type SettingSchema,
  type StoreSettings,
  type StoreSettingsOutput,
  type StoreSettingsSpec,
} from './settings.js'
export { badKeyError, isValidRange, notFoundError, quoteKey, rangeNotSatisfiable, redact, storeFailure } from './errors.js'
export { isValidKey, prefixedKey, storePrefix, unprefixedKey } from './keys.js'
export { resolveRange } from '../stores/range.js'
export { AttachStorageError } from '../errors.js'
export { normalizeKey, normalizePrefix, joinKey, isNormalKey, MAX_KEY_LENGTH } from '../stores/key.js'
export { parseDuration, parseSize } from '../config/units.js'
export { isActiveContent } from '../media/sniff.js'
export { writeInto, type WritesInto } from '../stores/store.js'
export type {
  ByteRange,
  PresignGetOptions,
  PresignedPut,
  PresignPutOptions,
  PutOptions,
  Store,
  StoreFactory,
  StoreListEntry,
  StoreStat,
} from '../stores/store.js'
