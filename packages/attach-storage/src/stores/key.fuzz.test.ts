/**
 * Property-based tests (fast-check) of the key normalizer: whatever string comes in, it either throws
 * `bad-key` (400) or answers a key that stays inside a store's base, and normalizing is idempotent.
 */
import { posix, resolve, sep } from 'node:path'
import fc from 'fast-check'
import { describe, expect, it } from 'vitest'
import { AttachStorageError } from '../errors.js'
import { isNormalKey, joinKey, MAX_KEY_LENGTH, MAX_SEGMENT_LENGTH, normalizeKey, normalizePrefix } from './key.js'

const SEED = Number(process.env.FUZZ_SEED ?? Date.now() % 2 ** 31)
// Printed so that a failing run can be replayed with FUZZ_SEED=<seed>.
console.info(`key.fuzz: seed ${SEED}`)
const params = (numRuns: number) => ({ seed: SEED, numRuns })

/** Pieces an attacker would combine: traversal, separators, encodings, controls, unicode look-alikes. */
const PIECES = [
  '/',
  '//',
  '.',
  '..',
  '...',
  '\\',
  '%',
  '%2e',
  '%2f',
  '%00',
  '\u0000',
  '\n',
  '\r',
  '\t',
  '\u007f',
  ':',
  'C:',
  ' ',
  '  ',
  '-',
  '_',
  '@',
  '+',
  '=',
  ',',
  'a',
  'Z',
  '9',
  'demo',
  '2026',
  'x.png',
  '.hidden',
  'a.',
  'a ',
  '\u2024',
  '\u2025',
  '\uff0e',
  '\u2215',
  '\uff0f',
  '\u00e9',
  '\u{1f600}',
  '\ud800',
  '~',
  '*',
  '?',
  '"',
  '<',
  '>',
  '|',
]

const piecewise = fc.array(fc.constantFrom(...PIECES), { maxLength: 24 }).map((p) => p.join(''))
const segmentish = fc.stringMatching(/^[A-Za-z0-9._@+=, -]{1,12}$/)
const structured = fc
  .tuple(fc.boolean(), fc.array(fc.oneof(segmentish, fc.constantFrom('.', '..', '', ' ', 'a.', '.a')), { minLength: 1, maxLength: 8 }))
  .map(([lead, segs]) => (lead ? '/' : '') + segs.join('/'))
const long = fc
  .tuple(fc.integer({ min: 200, max: 1100 }), fc.constantFrom('a', 'a/', 'ab/', '/'))
  .map(([n, unit]) => unit.repeat(Math.ceil(n / unit.length)).slice(0, n))
const anyKey = fc.oneof(
  fc.string({ unit: 'binary', maxLength: 40 }),
  fc.string({ unit: 'grapheme', maxLength: 40 }),
  piecewise,
  structured,
  long,
)

const BASE = resolve('/srv/attach-base')

function isBadKey(err: unknown): boolean {
  return err instanceof AttachStorageError && err.code === 'bad-key' && err.status === 400 && typeof err.message === 'string'
}

/** The invariants of an accepted key. */
function checkSafe(key: string): void {
  expect(typeof key).toBe('string')
  expect(key.length).toBeGreaterThan(0)
  expect(key.length).toBeLessThanOrEqual(MAX_KEY_LENGTH)
  expect(key.startsWith('/')).toBe(false)
  expect(key.endsWith('/')).toBe(false)
  // biome-ignore lint/suspicious/noControlCharactersInRegex: checks that a key has no control characters
  expect(key).not.toMatch(/[\\%:\u0000-\u001f\u007f]/)
  expect(key).toMatch(/^[\x20-\x7e]+$/)
  for (const segment of key.split('/')) {
    expect(segment).not.toBe('')
    expect(segment.startsWith('.')).toBe(false)
    expect(segment.length).toBeLessThanOrEqual(MAX_SEGMENT_LENGTH)
    expect(segment).not.toMatch(/[. ]$/)
  }
  // Joined to a base, it stays inside it and names itself (no normalisation moves it).
  expect(posix.normalize(key)).toBe(key)
  const full = resolve(BASE, key)
  expect(full.startsWith(BASE + sep)).toBe(true)
  expect(
    full
      .slice(BASE.length + 1)
      .split(sep)
      .join('/'),
  ).toBe(key)
}

describe('normalizeKey under fuzzing', () => {
  it('throws bad-key or answers a safe key, idempotently (3000 cases)', () => {
    fc.assert(
      fc.property(anyKey, (input) => {
        let key: string
        try {
          key = normalizeKey(input)
        } catch (err) {
          expect(isBadKey(err), String(err)).toBe(true)
          return
        }
        checkSafe(key)
        // Only one leading "/" is ever removed, nothing else changes.
        expect(input === key || input === `/${key}`).toBe(true)
        expect(normalizeKey(key)).toBe(key)
        expect(normalizeKey(`/${key}`)).toBe(key)
        expect(isNormalKey(key)).toBe(true)
      }),
      params(3000),
    )
  })

  it('normalizePrefix throws bad-key or answers "" or a safe folder prefix, idempotently (2000 cases)', () => {
    fc.assert(
      fc.property(
        fc.oneof(
          anyKey,
          anyKey.map((k) => `${k}/`),
        ),
        (input) => {
          let prefix: string
          try {
            prefix = normalizePrefix(input)
          } catch (err) {
            expect(isBadKey(err), String(err)).toBe(true)
            return
          }
          expect(normalizePrefix(prefix)).toBe(prefix)
          if (prefix === '') return
          expect(prefix.endsWith('/')).toBe(true)
          checkSafe(prefix.slice(0, -1))
        },
      ),
      params(2000),
    )
  })

  it('joinKey of any parts throws bad-key or answers a safe key, idempotently (2000 cases)', () => {
    fc.assert(
      fc.property(fc.array(anyKey, { minLength: 1, maxLength: 4 }), (parts) => {
        let key: string
        try {
          key = joinKey(...parts)
        } catch (err) {
          expect(isBadKey(err), String(err)).toBe(true)
          return
        }
        checkSafe(key)
        expect(normalizeKey(key)).toBe(key)
        expect(joinKey(key)).toBe(key)
      }),
      params(2000),
    )
  })

  it('refuses any key holding a ".." segment, a backslash, NUL or "%" (1000 cases)', () => {
    const poison = fc.constantFrom('..', '\\', '\u0000', '%', '%2e%2e', ':')
    fc.assert(
      fc.property(segmentish, poison, segmentish, fc.boolean(), (a, p, b, slashes) => {
        const input = slashes ? `${a}/${p}/${b}` : `${a}${p}${b}`
        if (p === '..' && !slashes) return // "a..b" is a plain name
        expect(() => normalizeKey(input)).toThrow(AttachStorageError)
      }),
      params(1000),
    )
  })
})
