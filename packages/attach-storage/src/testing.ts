/**
 * `attach-storage/testing`: helpers for testing stores. Needs `vitest` (a test-only dependency).
 * @module
 */
export { describeStoreConformance, generatedStream } from './stores/conformance.js'
export type { StoreConformanceOptions, StoreConformanceSetup } from './stores/conformance.js'
