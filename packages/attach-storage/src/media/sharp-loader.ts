/**
 * sharp, loaded at its first use rather than at start-up. Its JavaScript and libvips' bindings hold about
 * 2.5 MB of the V8 heap, and a server that only serves or stores files never needs them: every full
 * collection has less to mark (a long view streams enough bytes to trigger one every few MiB).
 * @module
 */
import type sharpType from 'sharp'

export type SharpLib = typeof sharpType

let loading: Promise<SharpLib> | undefined

/** The sharp module, imported once; every caller waits on the same import. */
export function loadSharp(): Promise<SharpLib> {
  loading ??= import('sharp').then((m) => m.default)
  return loading
}
