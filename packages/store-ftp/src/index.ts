/**
 * FTP and FTPS store of attach-storage: `attach.stores.<name>.type: ftp`.
 *
 * @example
 * import { FtpStore } from '@attach-storage/store-ftp'
 * const store = new FtpStore('remote', {
 *   host: 'ftp.example.com', user: 'attach', password, secure: true, root: '/attach',
 * })
 *
 * @packageDocumentation
 */
export { createStore, FtpStore } from './ftp-store.js'
export { parseFtpSettings, type FtpSettings, type FtpStoreOptions } from './settings.js'
