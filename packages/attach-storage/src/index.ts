/**
 * `attach-storage`: what a host application needs to embed the attachment service: create it, mount
 * its Web handlers, configure domains, categories, filters and access rules, authenticate, and handle
 * its errors. Helpers for other jobs live on subpaths: `attach-storage/list` (the list and pagination
 * helper), `attach-storage/node` (the `node:http` bridge), `attach-storage/store-kit` (for store
 * authors) and `attach-storage/testing` (the store conformance suite). docs/packaging.md lists them.
 * @module
 */

// The service and its handlers.
export { AttachStorage, createAttachStorage, type AttachStorageOptions } from './service/attach-storage.js'
export { createAttachHandler, readJson, type AttachHandler, type FetchHandler } from './http/handler.js'
export {
  BinaryPart,
  jsonSchemaOf,
  LIST_HEADERS_DOC,
  ListConventionQuery,
  openApiDocument,
  withOpenApi,
  type JsonObject,
  type OpenApiOptions,
  type ResponseDoc,
  type RouteDoc,
} from './http/openapi.js'
export { AttachBagAnswer, AttachmentViewAnswer, ErrorAnswer } from './http/answers.js'

// Errors.
export { AttachStorageError, isAttachError, type AttachErrorCode } from './errors.js'

// Configuration.
export type {
  AttachConfigInput,
  CategoryConfig,
  DomainConfig,
  EntityChangeGuard,
  FilterSpec,
  SecureAccessFunction,
} from './config/schema.js'
export { loadConfigFile, mergeSettings } from './config/load.js'
export { Registry } from './registry/registry.js'
export type { AttachFilter, FileProbe, FilterVerdict } from './filters/filters.js'

// What the service takes and answers.
export type {
  AttachBag,
  AttachBagEntry,
  AttachEvents,
  Authenticate,
  AuthUser,
  FileDescription,
  Logger,
  SaveFailure,
} from './service/types.js'
export type { AttachmentView } from './model.js'
export { accessOf, type AccessContext } from './service/types.js'

// Authentication.
export { bearerToken, createJwtVerifier, type JwtOptions } from './service/auth.js'

// Stores and the database.
export type { Store, StoreFactory } from './stores/store.js'
export { openDatabase } from './repository/database.js'
