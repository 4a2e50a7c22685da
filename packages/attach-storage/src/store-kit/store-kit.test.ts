import { describe, expect, it } from 'vitest'
import { AttachStorageError } from '../errors.js'
import {
  badKeyError,
  defineStoreSettings,
  notFoundError,
  prefixedKey,
  rangeNotSatisfiable,
  setting,
  settingsError,
  storeFailure,
  storePrefix,
  unprefixedKey,
} from './index.js'

const webdav = defineStoreSettings({
  type: 'webdav',
  required: ['url'],
  secrets: ['password'],
  hints: { username: 'user' },
  entries: {
    url: setting.text(),
    user: setting.text('anonymous'),
    password: setting.text(),
    prefix: setting.prefix(),
    secure: setting.flag(true),
    poolSize: setting.integer(1, 8, 2),
    timeout: setting.duration(30_000, { min: 1000 }),
    partSize: setting.size(8 * 1024 * 1024, 1024 * 1024, 64 * 1024 * 1024),
    mode: setting.oneOf(['fast', 'safe'] as const, 'safe'),
  },
})

const refusal = (fn: () => unknown): AttachStorageError => {
  try {
    fn()
  } catch (err) {
    expect(err).toBeInstanceOf(AttachStorageError)
    expect(err).toMatchObject({ code: 'config-invalid', status: 500 })
    return err as AttachStorageError
  }
  return expect.unreachable('expected config-invalid')
}

describe('defineStoreSettings', () => {
  it('applies the defaults and reads values as a configuration file gives them, kebab or camel', () => {
    expect(webdav.parse('dav', { type: 'webdav', url: 'https://x', cdnUrl: 'https://cdn/' })).toEqual({
      url: 'https://x',
      user: 'anonymous',
      password: undefined,
      prefix: '',
      secure: true,
      poolSize: 2,
      timeout: 30_000,
      partSize: 8 * 1024 * 1024,
      mode: 'safe',
    })
    expect(
      webdav.parse('dav', { url: 'u', 'pool-size': '3', secure: 'false', timeout: '2s', 'part-size': '2MB', prefix: '/a/b', mode: 'fast' }),
    ).toMatchObject({ poolSize: 3, secure: false, timeout: 2000, partSize: 2 * 1024 * 1024, prefix: 'a/b/', mode: 'fast' })
  })

  it('names the missing required settings in the core wording', () => {
    expect(refusal(() => webdav.parse('dav', {})).message).toBe('attach.stores.dav (type webdav) is missing required settings: url')
    expect(refusal(() => webdav.parse('dav', { url: '  ' })).message).toMatch(/missing required settings: url$/)
    expect(webdav.parse('dav', {}, { required: [] }).url).toBeUndefined()
  })

  it('names every problem at once by its setting, with hints for near misses', () => {
    const message = refusal(() =>
      webdav.parse('dav', { url: 'u', username: 'x', 'pool-size': 9, secure: 'yes', timeout: '10ms', prefix: '../up', mode: 'slow' }),
    ).message
    expect(message).toContain('attach.stores.dav: unknown setting "username" (did you mean "user"?)')
    expect(message).toContain('known settings: url, user, password, prefix, secure, pool-size, timeout, part-size, mode')
    expect(message).toContain('attach.stores.dav.pool-size must be an integer from 1 to 8')
    expect(message).toContain('attach.stores.dav.secure must be true or false')
    expect(message).toContain('attach.stores.dav.timeout must be a number of seconds or a duration such as "30s" or "500ms", at least 1 s')
    expect(message).toContain('attach.stores.dav.prefix is not a valid key prefix')
    expect(message).toContain('attach.stores.dav.mode must be one of fast, safe')
  })

  it('never repeats a secret value', () => {
    const err = refusal(() => webdav.parse('dav', { url: 'u', password: 'hunter2-secret', passwrd: 'hunter2-secret', poolSize: 0 }))
    expect(`${err.message}\n${err.stack}\n${JSON.stringify(err)}`).not.toContain('hunter2-secret')
    expect(webdav.secretValues({ url: 'u', password: 'hunter2-secret' })).toEqual(['hunter2-secret'])
    expect(settingsError('dav', 'password', 'is wrong: hunter2-secret', ['hunter2-secret']).message).toBe(
      'attach.stores.dav.password is wrong: ***',
    )
  })

  it('refuses settings that are no object', () => {
    expect(refusal(() => webdav.parse('dav', 'url=x')).message).toMatch(
      /^attach\.stores\.dav \(type webdav\): its settings must be an object/,
    )
  })
})

describe('store errors and keys', () => {
  it('produce the codes and statuses of the Store contract, with the cause kept', () => {
    const cause = new Error('ENOENT')
    expect(notFoundError('s', 'a/b.txt', cause)).toMatchObject({
      code: 'not-found',
      status: 404,
      message: 'No object at key "a/b.txt" in store "s"',
      cause,
    })
    const failure = storeFailure('S store "s": put of "k" failed: token abcd1234 refused', { cause, secrets: ['abcd1234'] })
    expect(failure).toMatchObject({
      code: 'store-failure',
      status: 502,
      message: 'S store "s": put of "k" failed: token *** refused',
      cause,
    })
    expect(rangeNotSatisfiable('k', { start: 10 }, 5)).toMatchObject({
      code: 'range-not-satisfiable',
      status: 416,
      details: { size: 5 },
      message: 'Range 10- is not satisfiable for key "k" of 5 bytes',
    })
    expect(badKeyError('x'.repeat(200), 'too long')).toMatchObject({ code: 'bad-key', status: 400 })
    expect(badKeyError('x'.repeat(200), 'too long').message).toBe(`Invalid storage key "${'x'.repeat(120)}…": too long`)
  })

  it('prefix keys through the key normalizer', () => {
    expect(storePrefix('')).toBe('')
    expect(storePrefix('/')).toBe('')
    expect(storePrefix('/tenant-a/2026')).toBe('tenant-a/2026/')
    expect(() => storePrefix('a/../b')).toThrow(expect.objectContaining({ code: 'bad-key' }))
    expect(prefixedKey('p/', '/demo/a.png')).toBe('p/demo/a.png')
    expect(() => prefixedKey('p/', '../x')).toThrow(expect.objectContaining({ code: 'bad-key', status: 400 }))
    expect(unprefixedKey('p/', 'p/demo/a.png')).toBe('demo/a.png')
    expect(unprefixedKey('p/', 'q/a.png')).toBeUndefined()
  })
})
