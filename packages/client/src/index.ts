/**
 * `@attach-storage/client`: talks to attach-storage from a browser or Node 20: temporary uploads with
 * progress, abort and retry, the confirmed save, lookup, delete, ZIP download, and the builder of the
 * `attachContainer` a host's entity save commits. The `<attach-field>` element is `@attach-storage/client/element`.
 * @module
 */
export {
  AttachClient,
  errorFromBody,
  readUploadAnswer,
  type ClientError,
  type ClientOptions,
  type Result,
  type SaveResult,
  type TemporaryFile,
  type UploadOptions,
} from './client.js'
export { fileKind, formatDuration, formatPages, mediaLabel, previewOf, type WithPreview } from './media-label.js'
export { placeholderDataUrl, type WithMedia } from './placeholder.js'
export { srcsetOf, type SrcsetOptions, type VariantBox, type WithVariants } from './srcset.js'
export { AttachContainerBuilder, limiter, mergeContainers, type AttachContainer, type ListedFile } from './container.js'
export type { AttachBag, AttachBagEntry, AttachmentView, SaveFailure } from 'attach-storage'
