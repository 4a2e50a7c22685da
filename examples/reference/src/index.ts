export { createReference, DEV_SECRET, type CorsSettings, type Reference, type ServerEnv, withPresignStore } from './reference.js'
export { runReferenceServer, type Listening } from './run-server.js'
export { referenceLogger } from './logger.js'
export { createPage, signDevToken, type PageOptions } from './page.js'
