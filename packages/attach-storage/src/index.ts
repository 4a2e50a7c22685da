export {
  AttachStorage,
  cleanDisplayName,
  createAttachStorage,
  describeRecord,
  syntheticDescription,
  type AttachStorageOptions,
  type DirectItem,
  type LookupFilters,
  type ReceivedFile,
  type ServeTarget,
  type TemporaryItem,
} from './service/attach-storage.js'
export type {
  AttachBag,
  AttachBagEntry,
  Authenticate,
  AuthUser,
  FileDescription,
  Logger,
  SaveFailure,
} from './service/types.js'
export { bearerToken, createJwtAuthenticator, createJwtVerifier, userIdOf, type JwtOptions } from './service/auth.js'
export {
  AttachConfigSchema,
  camelizeSettings,
  parseAttachConfig,
  STORE_PACKAGES,
  type AttachConfigInput,
  type AttachConfigParsed,
  type CategoryConfig,
  type DomainConfig,
  type FilterSpec,
  type SecureAccessFunction,
  type EntityChangeGuard,
  type AllowedSize,
} from './config/schema.js'
export { loadConfigFile, mergeSettings } from './config/load.js'
export { parseDuration, parseSize } from './config/units.js'
export {
  AttachStorageError,
  badRequest,
  forbidden,
  isAttachError,
  notFound,
  tooLarge,
  unauthorized,
} from './errors.js'
export type { AttachmentRecord, AttachmentView, BlobRecord, UserId } from './model.js'
export { Registry, type CategoryOptions, type DomainOptions, type RegisteredCategory, type RegisteredDomain } from './registry/registry.js'
export {
  BUILT_IN_FILTERS,
  DEFAULT_REQUEST_FILTERS,
  dimensionFilter,
  imageFilter,
  sizeFilter,
  typeFilter,
  type AttachFilter,
  type FileProbe,
  type FilterVerdict,
} from './filters/filters.js'
export type { ByteRange, PutOptions, Store, StoreFactory, StoreListEntry, StoreStat } from './stores/store.js'
export { LocalStore } from './stores/local-store.js'
export { isNormalKey, isValidKeySegment, joinKey, normalizeKey, normalizePrefix } from './stores/key.js'
export { resolveRange } from './stores/range.js'
export { AttachRepository } from './repository/attach-repository.js'
export { dialectOf, openDatabase, type DatabaseOptions } from './repository/database.js'
export { migrateAttachSchema } from './repository/migrations.js'
export { createAttachHandler, readJson, type AttachHandler, type FetchHandler } from './http/handler.js'
export { contentDisposition } from './http/serve.js'
export { isActiveContent, sniffType } from './media/sniff.js'
export {
  exportAll,
  listResponse,
  parseListRequest,
  runList,
  type ListField,
  type ListFieldType,
  type ListOp,
  type ListProvider,
  type ListRequest,
  type ListResult,
} from './list/list-query.js'
export { createZipStream, isCompressed, uniqueNames, type ZipSource } from './media/zip.js'
export { MAX_DIMENSION, parseResizeRequest, Resizer, type ResizeRequest } from './media/resize.js'
export { EDITOR_DOMAIN, type AttachEventHook, type AttachEvents } from './service/attach-storage.js'
