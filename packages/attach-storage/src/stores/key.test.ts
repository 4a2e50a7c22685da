import { describe, expect, it } from 'vitest'
import { AttachStorageError } from '../errors.js'
import { isValidKeySegment, joinKey, MAX_KEY_LENGTH, normalizeKey, normalizePrefix } from './key.js'

function expectBadKey(fn: () => unknown): void {
  let caught: unknown
  try {
    fn()
  } catch (err) {
    caught = err
  }
  expect(caught).toBeInstanceOf(AttachStorageError)
  expect(caught).toMatchObject({ code: 'bad-key', status: 400 })
}

describe('normalizeKey', () => {
  it.each([
    ['demo/2026/11/42/abc.png', 'demo/2026/11/42/abc.png'],
    ['/demo/2026/11/42/abc.png', 'demo/2026/11/42/abc.png'],
    ['a', 'a'],
    ['5b9c0d2e-8f1a.tar.gz', '5b9c0d2e-8f1a.tar.gz'],
    ['with space+plus=eq,comma@at_x-y.txt', 'with space+plus=eq,comma@at_x-y.txt'],
    ['a..b/c...d', 'a..b/c...d'],
    ['-leading-dash', '-leading-dash'],
    ['_/@/+/=/-', '_/@/+/=/-'],
  ])('accepts %j', (key, expected) => {
    expect(normalizeKey(key)).toBe(expected)
  })

  it.each([
    ['empty', ''],
    ['only a slash', '/'],
    ['parent segment', '../x'],
    ['parent in the middle', 'a/../../x'],
    ['parent at the end', 'a/..'],
    ['bare parent', '..'],
    ['absolute parent', '/../x'],
    ['current segment', './a'],
    ['current in the middle', 'a/./b'],
    ['bare current', '.'],
    ['empty segment', 'a//b'],
    ['double leading slash (absolute after stripping one)', '//etc/passwd'],
    ['trailing slash', 'a/'],
    ['backslash', 'a\\b'],
    ['backslash traversal', '..\\x'],
    ['windows drive', 'C:\\windows'],
    ['colon', 'c:x'],
    ['NUL', 'a\u0000b'],
    ['NUL at the end', 'a.png\u0000.txt'],
    ['newline', 'a\nb'],
    ['tab', 'a\tb'],
    ['DEL', 'a\u007fb'],
    ['percent-encoded dots', '%2e%2e/x'],
    ['percent-encoded slash', '..%2fx'],
    ['percent-encoded backslash', '..%5cx'],
    ['double-encoded dots', '%252e%252e/x'],
    ['mixed-case encoding', '%2E%2E/x'],
    ['any percent', '100%.txt'],
    ['hidden file', '.env'],
    ['hidden directory', 'a/.git/config'],
    ['partial-looking name', 'a/.b.png.1234.partial'],
    ['trailing dot', 'a/b.'],
    ['trailing space', 'a/b '],
    ['leading space', ' a'],
    ['unicode', 'ä.png'],
    ['fullwidth dots', '\uff0e\uff0e/x'],
    ['question mark', 'a?b'],
    ['hash', 'a#b'],
    ['star', 'a*'],
    ['quote', 'a"b'],
    ['angle brackets', '<a>'],
    ['pipe', 'a|b'],
  ])('rejects %s (%j)', (_label, key) => {
    expectBadKey(() => normalizeKey(key))
  })

  it('limits the length to MAX_KEY_LENGTH characters (after the leading slash)', () => {
    const segment = 'a'.repeat(200)
    const key = Array.from({ length: 6 }, () => segment)
      .join('/')
      .slice(0, MAX_KEY_LENGTH)
    expect(key).toHaveLength(MAX_KEY_LENGTH)
    expect(normalizeKey(key)).toBe(key)
    expect(normalizeKey(`/${key}`)).toBe(key)
    expectBadKey(() => normalizeKey(`${key}b`))
    expectBadKey(() => normalizeKey('a/'.repeat(100_000)))
  })

  it('limits a segment to 255 characters', () => {
    expect(normalizeKey('a'.repeat(255))).toHaveLength(255)
    expectBadKey(() => normalizeKey('a'.repeat(256)))
  })

  it('rejects non-strings', () => {
    expectBadKey(() => normalizeKey(undefined as unknown as string))
    expectBadKey(() => normalizeKey(42 as unknown as string))
  })

  it('keeps control characters out of the error message', () => {
    expect(() => normalizeKey('a\u0000b\nc')).toThrow(/"a\\u0000b\\nc"/)
  })
})

describe('isValidKeySegment', () => {
  it('accepts generated names and refuses dot-files, dots, separators', () => {
    expect(isValidKeySegment('abc.png')).toBe(true)
    for (const bad of ['', '.', '..', '.x', 'a/b', 'a\\b', 'a%2e', 'b.', 'x ', 'a'.repeat(256)]) {
      expect(isValidKeySegment(bad)).toBe(false)
    }
  })
})

describe('normalizePrefix', () => {
  it.each([
    ['', ''],
    ['/', ''],
    ['demo/', 'demo/'],
    ['/demo/2026/', 'demo/2026/'],
    ['a b/c+d/', 'a b/c+d/'],
  ])('accepts %j', (prefix, expected) => {
    expect(normalizePrefix(prefix)).toBe(expected)
  })

  it.each([
    ['no trailing slash', 'demo'],
    ['no trailing slash, nested', 'demo/2026'],
    ['parent', '../'],
    ['parent nested', 'a/../../'],
    ['absolute parent', '/../'],
    ['current', './'],
    ['empty segment', 'a//b/'],
    ['double slash only', '//'],
    ['backslash', 'a\\b/'],
    ['NUL', 'a\u0000/'],
    ['percent', '%2e%2e/'],
    ['hidden', '.git/'],
  ])('rejects %s (%j)', (_label, prefix) => {
    expectBadKey(() => normalizePrefix(prefix))
  })
})

describe('joinKey', () => {
  it('joins savedDir-style parts', () => {
    expect(joinKey('/demo/2026/11/42/', 'abc.png')).toBe('demo/2026/11/42/abc.png')
    expect(joinKey('demo', '2026', 'a.png')).toBe('demo/2026/a.png')
    expect(joinKey('demo/', '/a.png')).toBe('demo/a.png')
    expect(joinKey('', 'demo', '', 'a.png')).toBe('demo/a.png')
    expect(joinKey('/', 'a.png')).toBe('a.png')
  })

  it('still rejects traversal and empty results', () => {
    expectBadKey(() => joinKey('demo', '..', 'x'))
    expectBadKey(() => joinKey('demo/../..', 'x'))
    expectBadKey(() => joinKey('demo', '../x'))
    expectBadKey(() => joinKey('demo//', 'x'))
    expectBadKey(() => joinKey('//demo', 'x'))
    expectBadKey(() => joinKey('demo', 'a\\b'))
    expectBadKey(() => joinKey('demo', '%2e%2e', 'x'))
    expectBadKey(() => joinKey())
    expectBadKey(() => joinKey('', '/'))
  })
})
