/**
 * Bounds by construction: every array, string and record that a route of either group (or the bag of
 * `commitAttachContainer()`) accepts has an upper bound. The test walks the schemas of every route table
 * (path, query and body) and the schemas parsed inside handlers, and fails on any value without one, so
 * that the next route cannot forget it. A bound is a `maxLength`-like action in the value's own pipe (no
 * transformation in between), or an anchored regex without an open-ended repeat. A value another layer
 * checks piece by piece says so with `v.metadata({ checkedLater: why })`.
 */
import * as v from 'valibot'
import { describe, expect, it } from 'vitest'
import { AttachBagSchema } from '../../service/bag.js'
import { API_ROUTES, ASSET_ROUTES } from '../handler.js'
import type { Route } from '../router.js'
import { EditorFieldsSchema } from './editor.js'
import { parseMetadata } from './tus.js'
import { boundedArray, boundedString, checkedLater } from './schemas.js'
import { UploadFieldsSchema } from './uploads.js'

type Node = {
  kind: string
  type: string
  pipe?: Node[]
  item?: Node
  items?: Node[]
  entries?: Record<string, Node>
  rest?: Node
  options?: Node[]
  wrapped?: Node
  key?: Node
  value?: Node
  requirement?: unknown
  metadata?: Record<string, unknown>
}

/** Actions that put an upper bound on the value they check. */
const BOUND_ACTIONS = new Set(['max_length', 'length', 'max_size', 'max_entries', 'max_bytes', 'max_graphemes', 'max_words'])
/** Schemas whose values are bounded by their kind. */
const LEAVES = new Set(['number', 'boolean', 'picklist', 'literal', 'enum', 'null', 'undefined', 'nan', 'bigint', 'date', 'void', 'never'])
/** Schemas whose values need a bound of their own. */
const NEEDS_BOUND = new Set(['string', 'array', 'record', 'map', 'set', 'tuple_with_rest', 'object_with_rest', 'blob', 'file'])

/** An anchored pattern without `*`, `+`, `{n,}` or a top-level `|`: it matches strings of bounded length. */
function boundedPattern(re: RegExp): boolean {
  const src = re.source.replace(/\\./g, 'e').replace(/\[[^\]]*\]/g, 'c')
  if (!src.startsWith('^') || !src.endsWith('$')) return false
  if (/[*+]|\{\d*,\}/.test(src)) return false
  let depth = 0
  for (const c of src) {
    if (c === '(' || c === '[') depth++
    else if (c === ')' || c === ']') depth--
    else if (c === '|' && depth === 0) return false
  }
  return true
}

const changesValue = (n: Node): boolean => n.kind === 'transformation' || (n.kind === 'schema' && !!n.pipe?.some(changesValue))
/** A bounding action, or a piped schema before it in the same run that bounds the value and leaves it as it is. */
const isBound = (n: Node): boolean =>
  n.kind === 'validation'
    ? BOUND_ACTIONS.has(n.type) || (n.type === 'regex' && boundedPattern(n.requirement as RegExp))
    : n.kind === 'schema' && !!n.pipe && !changesValue(n) && n.pipe.some(isBound)

/** Every value of `schema` without an upper bound, as dotted paths from `where`. */
function unbounded(schema: unknown, where: string): string[] {
  const out: string[] = []
  visit(schema as Node, where, false)
  return out

  function visit(node: Node, at: string, inherited: boolean): void {
    if (!node.pipe) {
      visitBare(node, at, inherited, false)
      return
    }
    const pipe = node.pipe
    const later = pipe.some((n) => n.kind === 'metadata' && n.metadata?.checkedLater !== undefined)
    // The pipe's items in runs between value changes: a bound anywhere in a run bounds its schemas.
    let start = 0
    for (let i = 0; i <= pipe.length; i++) {
      if (i < pipe.length && !changesValue(pipe[i]!)) continue
      const end = i < pipe.length && pipe[i]!.kind === 'schema' ? i + 1 : i
      const run = pipe.slice(start, end)
      const bounded = (start === 0 && inherited) || run.some(isBound)
      run.forEach((n, k) => {
        if (n.kind !== 'schema') return
        const guard = n.type === 'custom' && run.slice(k + 1).some((m) => m.kind === 'schema')
        if (n.pipe) visit(n, at, bounded)
        else if (!guard) visitBare(n, at, bounded, later)
      })
      start = end
      if (i < pipe.length && pipe[i]!.kind === 'transformation') start = i + 1
    }
  }

  function visitBare(node: Node, at: string, bounded: boolean, later: boolean): void {
    const t = node.type
    if (NEEDS_BOUND.has(t) && !bounded) out.push(`${at} (${t} without an upper bound)`)
    if (LEAVES.has(t) || t === 'string' || t === 'blob' || t === 'file') return
    switch (t) {
      case 'array':
      case 'set':
        visit(node.item ?? (node.value as Node), `${at}[]`, false)
        return
      case 'tuple':
      case 'strict_tuple':
      case 'tuple_with_rest':
        node.items!.forEach((n, i) => {
          visit(n, `${at}[${i}]`, false)
        })
        if (node.rest) visit(node.rest, `${at}[…]`, false)
        return
      case 'loose_tuple':
      case 'loose_object':
        out.push(`${at} (${t} keeps members it does not check)`)
        return
      case 'object':
      case 'strict_object':
      case 'object_with_rest':
        for (const [k, n] of Object.entries(node.entries!)) visit(n, `${at}.${k}`, false)
        if (node.rest) visit(node.rest, `${at}.*`, false)
        return
      case 'record':
      case 'map':
        visit(node.key!, `${at}{key}`, false)
        visit(node.value!, `${at}{value}`, false)
        return
      case 'optional':
      case 'exact_optional':
      case 'nullable':
      case 'nullish':
      case 'non_optional':
      case 'non_nullable':
      case 'non_nullish':
      case 'undefinedable':
        visit(node.wrapped!, at, bounded)
        return
      case 'union':
      case 'variant':
      case 'intersect':
        for (const n of node.options!) visit(n, at, bounded)
        return
      default:
        // unknown, any, custom, lazy, ...: nothing says what they hold, unless another layer checks it.
        if (!later) out.push(`${at} (${t}: nothing bounds it)`)
    }
  }
}

/** The schemas of a route table: path, query and body of each route. */
function routeSchemas(group: string, routes: Route[]): Array<[string, unknown]> {
  return routes.flatMap((r) => {
    const name = `${group} ${r.method} ${r.path || '/'}`
    const parts: Array<[string, unknown]> = []
    if (r.params) parts.push([`${name} params`, r.params])
    if (r.query) parts.push([`${name} query`, r.query])
    if (r.body) parts.push([`${name} body`, r.body])
    return parts
  })
}

describe('bounds by construction', () => {
  const schemas: Array<[string, unknown]> = [
    ...routeSchemas('api', API_ROUTES),
    ...routeSchemas('assets', ASSET_ROUTES),
    ['commitAttachContainer() attachContainer', AttachBagSchema],
    ['multipart upload fields', UploadFieldsSchema],
    ['multipart editor fields', EditorFieldsSchema],
  ]

  it('walks every route table of both groups', () => {
    expect(API_ROUTES.length).toBeGreaterThan(10)
    expect(ASSET_ROUTES.length).toBeGreaterThan(3)
    expect(schemas.length).toBeGreaterThan(20)
  })

  it('finds no array, string or record without an upper bound', () => {
    const found = schemas.flatMap(([name, schema]) => unbounded(schema, name))
    expect(found).toEqual([])
  })

  it('tus Upload-Metadata, read from a header and not by a schema, is bounded too', () => {
    expect(parseMetadata(`filename ${Buffer.from('a.txt').toString('base64')}`)).toEqual({ filename: 'a.txt' })
    expect(() => parseMetadata(`filename ${'QUFB'.repeat(5000)}`)).toThrow(/longer than 16 KiB/)
  })

  it('the walk itself sees what is unbounded, and what bounds it', () => {
    expect(unbounded(v.string(), 's')).toEqual(['s (string without an upper bound)'])
    expect(unbounded(v.array(boundedString(5)), 'a')).toEqual(['a (array without an upper bound)'])
    expect(unbounded(boundedArray(v.string(), 5), 'a')).toEqual(['a[] (string without an upper bound)'])
    expect(unbounded(boundedArray(boundedString(9), 5), 'a')).toEqual([])
    expect(unbounded(v.record(v.string(), v.number()), 'r')).toHaveLength(2)
    expect(unbounded(v.object({ x: v.optional(v.nullable(v.string())) }), 'o')).toEqual(['o.x (string without an upper bound)'])
    expect(unbounded(v.unknown(), 'u')).toEqual(['u (unknown: nothing bounds it)'])
    expect(unbounded(checkedLater(v.unknown(), 'test'), 'u')).toEqual([])
    expect(unbounded(v.looseObject({}), 'l')).toHaveLength(1)
    // A bound before a transformation does not bound what the transformation makes, nor the reverse.
    const split = v.pipe(
      v.string(),
      v.transform((s) => s.split(',')),
      v.maxLength(3),
    )
    expect(unbounded(split, 'q')).toEqual(['q (string without an upper bound)'])
    expect(
      unbounded(
        v.pipe(
          v.string(),
          v.maxLength(99),
          v.transform((s) => s.split(',')),
        ),
        'q',
      ),
    ).toEqual([])
    // Patterns: anchored and without an open repeat bound the string; others do not.
    expect(unbounded(v.pipe(v.string(), v.regex(/^\d{1,15}$/)), 'p')).toEqual([])
    expect(unbounded(v.pipe(v.string(), v.regex(/^\d+$/)), 'p')).toHaveLength(1)
    expect(unbounded(v.pipe(v.string(), v.regex(/^a|b$/)), 'p')).toHaveLength(1)
    expect(unbounded(v.pipe(v.string(), v.regex(/\d{1,3}/)), 'p')).toHaveLength(1)
  })
})
