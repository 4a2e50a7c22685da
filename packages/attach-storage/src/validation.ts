/** Input checked by a valibot schema, every refusal a 400 `bad-request` naming where the input went wrong. */
import * as v from 'valibot'
import { badRequest } from './errors.js'

/** `where: message` of a schema's first issue (`where` is the dotted path of the offending value, or `label`). */
export function describeIssue(issue: v.BaseIssue<unknown>, label: string): string {
  const path = issue.path?.map((p) => String(p.key)).join('.')
  return path ? `${label}.${path}: ${issue.message}` : `${label}: ${issue.message}`
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
