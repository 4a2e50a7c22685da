/**
 * The browser bundle's entry: the client, and `<attach-field>` registered on load.
 * `npm run build:browser -w packages/client` writes it minified to dist/attach-storage-client.min.js.
 */
import { defineAttachField } from './attach-field.js'

export * from './index.js'
export { AttachField, defineAttachField, parseSize } from './attach-field.js'

defineAttachField()
