export { createReference, DEV_SECRET, type CorsSettings, type Reference, type ServerEnv } from './reference.js'
