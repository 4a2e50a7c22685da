/**
 * `attach-storage`: what a host application needs to embed the attachment service: create it, mount
 * its Web handlers, configure domains, categories, filters and access rules, authenticate, and handle
 * its errors. Helpers for other jobs live on subpaths: `attach-storage/config` (settings files, the
 * registry, the settings tree's parts), `attach-storage/list` (the list and pagination helper),
 * `attach-storage/node` (the `node:http` bridge), `attach-storage/store-kit` (for store authors) and
 * `attach-storage/testing` (the store conformance suite). docs/packaging.md lists them. At most 40
 * names (index.test.ts counts them).
 * @module
 */

// The service and its handlers.
export { AttachStorage, createAttachStorage, type AttachStorageOptions } from './service/attach-storage.js'
export { createAttachHandler, readJson, type AttachHandler, type FetchHandler } from './http/handler.js'
export { createHealthHandlers, type HealthHandlers } from './http/health.js'
export type { Readiness, ReadinessCheck } from './service/health.js'
export type { Instrumentation, RequestReport, StoreCallReport } from './service/instrumentation.js'

// Errors.
export { AttachStorageError, isAttachError, type AttachErrorCode } from './errors.js'

// Configuration (settings files, the Registry and the tree's parts: attach-storage/config).
export type { AttachConfigInput, EntityChangeGuard, SecureAccessFunction } from './config/schema.js'
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
