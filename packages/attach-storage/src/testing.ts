/**
 * `attach-storage/testing`: helpers for testing stores (they need `vitest`, a test-only dependency): the
 * conformance suite, a save through the handlers, and the end-to-end check of `serve: redirect`.
 * @module
 */
export { describeStoreConformance, generatedStream } from './stores/conformance.js'
export type { StoreConformanceOptions, StoreConformanceSetup } from './stores/conformance.js'
export { type SaveThroughHandlerOptions, saveThroughHandler } from './testing/save-through-handler.js'
export { expectRedirectServing, type RedirectServingOptions } from './stores/redirect-conformance.js'
export { type DirectUploadsOptions, expectDirectUploads } from './stores/direct-upload-conformance.js'
