/**
 * `@attach-storage/store-azure`: an attach-storage {@link Store} on Azure Blob Storage (block blobs).
 * @module
 */
export { AzureBlobStore, createStore } from './azure-store.js'
export { azureSettings, type AzureBlobStoreOptions } from './settings.js'
