import { readFile } from 'node:fs/promises'
import { parse as parseYaml } from 'yaml'
import { configError } from '../errors.js'
import { camelizeSettings } from './schema.js'

/**
 * Reads a JSON or YAML file whose top level is `{"attach": {...}}` (kebab-case keys, as in the spec) and
 * returns the `attach` tree in camelCase, not yet validated (merge it, then give it to the service).
 */
export async function loadConfigFile(path: string): Promise<Record<string, unknown>> {
  let text: string
  try {
    text = await readFile(path, 'utf8')
  } catch (err) {
    throw configError(`Cannot read the configuration file ${path}: ${(err as Error).message}`, err)
  }
  let tree: unknown
  try {
    tree = /\.json$/i.test(path) ? JSON.parse(text) : parseYaml(text)
  } catch (err) {
    throw configError(
      `The configuration file ${path} is not valid ${/\.json$/i.test(path) ? 'JSON' : 'YAML'}: ${(err as Error).message}`,
      err,
    )
  }
  if (!tree || typeof tree !== 'object' || !('attach' in tree)) {
    throw configError(`The configuration file ${path} must have a top-level "attach" key`)
  }
  const attach = (tree as { attach: unknown }).attach
  if (!attach || typeof attach !== 'object' || Array.isArray(attach)) {
    throw configError(`"attach" in ${path} must be an object`)
  }
  return camelizeSettings(attach) as Record<string, unknown>
}

/** Deep-merges plain objects (`over` wins; arrays and other values replace). */
export function mergeSettings<T extends Record<string, unknown>>(base: T, over: Record<string, unknown>): T {
  const out: Record<string, unknown> = { ...base }
  for (const [k, v] of Object.entries(over)) {
    const b = out[k]
    out[k] =
      v && typeof v === 'object' && !Array.isArray(v) && b && typeof b === 'object' && !Array.isArray(b)
        ? mergeSettings(b as Record<string, unknown>, v as Record<string, unknown>)
        : v
  }
  return out as T
}
