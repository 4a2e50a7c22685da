/** Input checked by a valibot schema, every refusal a 400 `bad-request` naming where the input went wrong. */
import * as v from 'valibot'
import { badRequest } from './errors.js'

/** `where: message` of a schema's first issue (`where` is the dotted path of the offending value, or `label`). */
export function describeIssue(issue: v.BaseIssue<unknown>, label: string): string {
  const keys = issue.path?.map((p) => String(p.key)) ?? []
  const where = keys.length ? `${label}.${keys.join('.')}` : label
  // A missing member: valibot reports the object's key check, whose message names no rule of ours.
  if (issue.kind === 'schema' && issue.type === 'object' && issue.input === undefined && keys.length) {
    return `${where}: ${keys[keys.length - 1]} is required`
  }
  return `${where}: ${issue.message}`
}

/**
 * Parses `value` with `schema`, or throws 400 `bad-request` whose message names the first problem
 * (`label` names the whole input: `body`, `query`, `path`, `attachContainer`, ...).
 */
export function parseInput<S extends v.GenericSchema>(schema: S, value: unknown, label: string): v.InferOutput<S> {
  const result = v.safeParse(schema, value)
  if (result.success) return result.output
  throw badRequest(describeIssue(result.issues[0], label))
}

/** True for a JSON object (not null, not an array). */
export function isJsonObject(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value)
}

/** A JSON object (an array is refused with `message`, which valibot's `object` alone lets through) with these members. */
export function jsonObject<const E extends v.ObjectEntries>(entries: E, message: string) {
  return v.pipe(v.custom<Record<string, unknown>>(isJsonObject, message), v.object(entries, message))
}
