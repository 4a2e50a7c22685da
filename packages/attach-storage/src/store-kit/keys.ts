import { normalizeKey, normalizePrefix } from '../stores/key.js'

/**
 * Normalizes a store's `prefix` setting (the folder of the store inside its bucket, container or
 * directory): `''` for none, otherwise segments that obey the key rules and end with `/`. A missing
 * trailing `/` is added and one leading `/` dropped. Throws `bad-key` for a prefix with `..`, `//`, …
 *
 * @example
 * storePrefix('/tenant-a/2026') // 'tenant-a/2026/'
 * storePrefix('/')              // ''
 */
export function storePrefix(prefix: string): string {
  if (prefix === '' || prefix === '/') return ''
  return normalizePrefix(prefix.endsWith('/') ? prefix : `${prefix}/`)
}

/** The normalized key under a store prefix: what the transport is given. Throws `bad-key` first. */
export function prefixedKey(prefix: string, key: string): string {
  return prefix + normalizeKey(key)
}

/** The store key of a transport name under `prefix`, or `undefined` when the name is not below it. */
export function unprefixedKey(prefix: string, name: string): string | undefined {
  return name.startsWith(prefix) ? name.slice(prefix.length) : undefined
}

/** True when the key normalizer accepts `key` (in any spelling it normalizes); for skipping foreign names in `list`. */
export function isValidKey(key: string): boolean {
  try {
    normalizeKey(key)
    return true
  } catch {
    return false
  }
}
