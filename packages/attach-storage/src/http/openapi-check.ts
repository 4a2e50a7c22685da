/**
 * Test-only: checks a JSON answer against the OpenAPI document, with ajv (JSON Schema 2020-12): the
 * operation of the request's method and path, the response of its status (or `4XX`/`5XX`), the schema
 * of its JSON body. The handler tests' kit runs every JSON answer through it.
 */
import { createConfig, lintFromString } from '@redocly/openapi-core'
import { Ajv2020, type ValidateFunction } from 'ajv/dist/2020.js'
import type { JsonObject } from './openapi.js'

type Operation = { responses?: Record<string, { content?: Record<string, { schema?: JsonObject }> }> }

/** A checker of one document: `check(method, pathname, status, body)` throws on a mismatch. */
export function answerChecker(document: JsonObject) {
  const ajv = new Ajv2020({ strict: false, allErrors: true, validateFormats: false })
  ajv.addSchema({ $id: 'doc', ...document } as JsonObject, 'doc')
  const paths = document.paths as Record<string, Record<string, Operation>>
  // Templates as patterns; literal segments win over parameters (`/attach/tmp` over `/attach/{refDomain}`).
  const templates = Object.keys(paths)
    .map((template) => {
      const parts = template.split('/')
      const pattern = new RegExp(`^${parts.map((p) => (/^\{\w+\}$/.test(p) ? '[^/]+' : literal(p))).join('/')}$`)
      return { template, pattern, literal: parts.filter((p) => !p.startsWith('{')).length }
    })
    .sort((a, b) => b.literal - a.literal)
  const compiled = new Map<string, ValidateFunction>()

  /** The JSON Pointer of the schema of an answer, or undefined when the document names none. */
  function pointerOf(method: string, pathname: string, status: number): string | undefined {
    const m = method.toLowerCase()
    for (const { template, pattern } of templates) {
      if (!pattern.test(pathname)) continue
      const op = paths[template]![m]
      if (!op) continue
      const r = op.responses?.[String(status)] ? String(status) : `${String(status)[0]}XX`
      if (!op.responses?.[r]?.content?.['application/json']?.schema) {
        throw new Error(`${method} ${pathname} answered ${status} JSON, which the document's ${template} does not declare`)
      }
      return `doc#/paths/${pointer(template)}/${m}/responses/${r}/content/application~1json/schema`
    }
    return undefined
  }

  return {
    check(method: string, pathname: string, status: number, body: unknown): void {
      // No operation (an unknown route): every refusal is still the error shape.
      const ref = pointerOf(method, pathname, status) ?? (status >= 400 ? 'doc#/components/schemas/Error' : undefined)
      if (!ref) throw new Error(`${method} ${pathname} answered ${status} JSON, but the document has no such operation`)
      const validate = compiled.get(ref) ?? ajv.compile({ $ref: ref })
      compiled.set(ref, validate)
      if (!validate(body)) {
        throw new Error(
          `${method} ${pathname} answered ${status} JSON that its OpenAPI schema refuses: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(body).slice(0, 2000)}`,
        )
      }
    },
  }
}

const literal = (s: string) => s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')
const pointer = (s: string) => s.replace(/~/g, '~0').replace(/\//g, '~1').replace(/\{/g, '%7B').replace(/\}/g, '%7D')

/** Checks a Response's JSON body (read from a clone) when it is JSON; answers the response. */
export async function checkAnswer(
  checker: ReturnType<typeof answerChecker>,
  request: { method: string; url: string },
  response: Response,
): Promise<Response> {
  if (!/^application\/json\b/i.test(response.headers.get('content-type') ?? '') || request.method === 'HEAD') return response
  const text = await response.clone().text()
  if (text === '') return response
  checker.check(request.method, new URL(request.url).pathname, response.status, JSON.parse(text))
  return response
}

/** Redocly's problems of a document (its `recommended` rules). */
export async function redoclyProblems(document: unknown) {
  // PUT {api-prefix}/attach/ is the spec's path, trailing slash included: the document states it as served.
  const config = await createConfig({ extends: ['recommended'], rules: { 'no-path-trailing-slash': 'off' } })
  const problems = await lintFromString({ source: JSON.stringify(document), absoluteRef: 'openapi.json', config })
  return problems.map((p) => ({ severity: p.severity, rule: p.ruleId, message: p.message, where: p.location[0]?.pointer }))
}
