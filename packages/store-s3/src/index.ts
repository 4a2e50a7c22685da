/**
 * `@attach-storage/store-s3`: an attach-storage {@link Store} on Amazon S3 and S3-compatible servers
 * (MinIO, Ceph RGW, Cloudflare R2, Backblaze B2, s3rver, ...), with `@aws-sdk/client-s3` v3.
 *
 * The core loads it for `attach.stores.<name>.type: s3` (`createStore(name, settings)`); hosts may also
 * construct an {@link S3Store} themselves, with a ready `S3Client`, and pass it in `stores`.
 * @module
 */
export { createStore, S3Store, SINGLE_PUT_MAX, type S3StoreOptions } from './s3-store.js'
export { s3Settings, type ChecksumMode, type S3StoreSettings } from './settings.js'
