/**
 * `attach-storage/testing`: helpers for testing stores: the conformance suite (needs `vitest`, a test-only
 * dependency) and a save through the handlers for end-to-end tests.
 * @module
 */
export { describeStoreConformance, generatedStream } from './stores/conformance.js'
export type { StoreConformanceOptions, StoreConformanceSetup } from './stores/conformance.js'
export { type SaveThroughHandlerOptions, saveThroughHandler } from './http/save-through-handler.js'
