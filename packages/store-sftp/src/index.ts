/**
 * `@attach-storage/store-sftp`: a {@link Store} on an SFTP server (OpenSSH or any SFTP v3 server).
 * The core loads it for `attach.stores.<name>.type: sftp` and calls {@link createStore}.
 * @module
 */
export { createStore, SftpStore } from './sftp-store.js'
export { sftpSettings, type SftpStoreOptions } from './settings.js'
export type { PoolStats } from './pool.js'
