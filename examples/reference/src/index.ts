export { createReference, DEV_SECRET, type CorsSettings, type Reference, type ServerEnv } from './reference.js'
export { runReferenceServer, type Listening } from './run-server.js'
