import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { AttachStorage, createAttachStorage } from '../service/attach-storage.js'
import { loadStoreFactory } from '../service/stores.js'
import { loadConfigFile, mergeSettings } from './load.js'
import { camelizeSettings, parseAttachConfig } from './schema.js'
import { parseDuration, parseSize } from './units.js'

let dir: string
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'attach-config-'))
})
afterAll(async () => {
  await rm(dir, { recursive: true, force: true })
})

const base = () => ({ directory: { baseDir: join(dir, 'files') }, db: { file: join(dir, `${Math.random()}.db`) } })

describe('the settings schema', () => {
  it('reads the spec kebab-case tree and camelCase alike, with defaults', () => {
    const kebab = parseAttachConfig({
      attach: {
        enabled: true,
        'cdn-url': 'https://cdn.example.com/files/',
        'api-prefix': '/api/storage',
        'default-store': 'main',
        directory: { 'base-dir': '/srv/files', 'tmp-dir': '/srv/tmp' },
        stores: { main: { type: 'local', 'base-dir': '/srv/main' } },
        domains: { 'my-domain': { store: 'main', categories: { 'photo-set': { filters: [{ name: 'size', 'max-size': '2MB' }] } } } },
        'tmp-ttl': '2h',
      },
    })
    const camel = parseAttachConfig({
      cdnUrl: 'https://cdn.example.com/files/',
      defaultStore: 'main',
      directory: { baseDir: '/srv/files', tmpDir: '/srv/tmp' },
      stores: { main: { type: 'local', baseDir: '/srv/main' } },
      domains: { 'my-domain': { store: 'main', categories: { 'photo-set': { filters: [{ name: 'size', maxSize: '2MB' }] } } } },
      tmpTtl: 7200,
    })
    expect(kebab).toEqual(camel)
    expect(kebab.stores.main).toEqual({ type: 'local', baseDir: '/srv/main' })
    expect(Object.keys(kebab.domains)).toEqual(['my-domain'])
    expect(kebab.tmpTtl).toBe(7_200_000)
    expect(kebab.assetsPrefix).toBe('/assets/storage')
    expect(kebab.upload.maxFileSize).toBe(100 * 1024 * 1024)
    expect(kebab.db.type).toBe('sqlite')
  })

  it('maps the spec db types jpa/mybatis to the embedded default', () => {
    expect(parseAttachConfig({ db: { type: 'jpa' } }).db.type).toBe('sqlite')
    expect(parseAttachConfig({ db: { type: 'postgres' } }).db.type).toBe('postgres')
  })

  it('rejects a cdn-url without the trailing slash and other bad values, naming the path', () => {
    expect(() => parseAttachConfig({ 'cdn-url': 'https://cdn.example.com' })).toThrow(/attach\.cdnUrl: must end with \//)
    expect(() => parseAttachConfig({ 'cdn-url': 'not a url/' })).toThrow(/cdnUrl/)
    expect(() => parseAttachConfig({ 'tmp-ttl': 'soon' })).toThrow(/tmpTtl/)
    expect(() => parseAttachConfig({ 'time-zone': 'Mars/Olympus' })).toThrow(/timeZone/)
    expect(() => parseAttachConfig({ upload: { 'max-file-size': '12 parsecs' } })).toThrow(/maxFileSize/)
    expect(() => parseAttachConfig({ domains: { 'bad domain': {} } })).toThrow(/domains/)
    expect(() => parseAttachConfig({ 'api-prefix': 'no-slash' })).toThrow(/apiPrefix/)
  })

  it('refuses named variants without a box, out of bounds, of an unknown format or name, and more than 8', async () => {
    const cat = (variants: unknown) => ({ domains: { post: { categories: { image: { variants } } } } })
    expect(() => parseAttachConfig(cat({ thumb: {} }))).toThrow(/variants\.thumb: a variant needs w or h/)
    expect(() => parseAttachConfig(cat({ thumb: { w: 0 } }))).toThrow(/variants\.thumb\.w/)
    expect(() => parseAttachConfig(cat({ thumb: { w: 4097 } }))).toThrow(/variants\.thumb\.w/)
    expect(() => parseAttachConfig(cat({ thumb: { w: 10, format: 'gif' } }))).toThrow(/must be one of webp, avif, jpeg, png/)
    expect(() => parseAttachConfig(cat({ '../x': { w: 10 } }))).toThrow(/must be 1-64 letters/)
    const nine = Object.fromEntries(Array.from({ length: 9 }, (_, i) => [`v${i}`, { w: 10 + i }]))
    expect(() => parseAttachConfig(cat(nine))).toThrow(/at most 8 named variants per category/)
    expect(() => parseAttachConfig({ 'variant-jobs': { queue: 'redis' } })).toThrow(/variantJobs\.queue/)
    expect(() => parseAttachConfig({ 'variant-jobs': { 'job-timeout': 'soon' } })).toThrow(/variantJobs\.jobTimeout/)
    // The registrar's registerCategory() is held to the same rules.
    const registering = (variants: unknown) =>
      createAttachStorage({
        config: {
          db: { type: 'sqlite', file: ':memory:' },
          directory: { baseDir: join(dir, 'v'), tmpDir: join(dir, 'vt') },
          domains: { post: {} },
        },
        registrar: (registry) => {
          registry.registerCategory('post', 'image', { variants: variants as never })
        },
      })
    await expect(registering({ thumb: { h: 5000 } })).rejects.toMatchObject({
      code: 'config-invalid',
      message: expect.stringMatching(/Category "post.image": variants\.thumb\.h/),
    })
    await expect(registering(nine)).rejects.toMatchObject({
      code: 'config-invalid',
      message: expect.stringMatching(/at most 8 named variants/),
    })
  })

  it('keeps names under stores, domains and categories as written', () => {
    expect(camelizeSettings({ stores: { 'my-store': { 'base-dir': 'x' } } })).toEqual({ stores: { 'my-store': { baseDir: 'x' } } })
  })

  it('parses sizes and durations', () => {
    expect(parseSize('500KB')).toBe(512000)
    expect(parseSize('2 MB')).toBe(2 * 1024 * 1024)
    expect(parseSize('1GB')).toBe(1024 ** 3)
    expect(parseSize(3, 'mb')).toBe(3 * 1024 * 1024)
    expect(parseSize(-1)).toBeUndefined()
    expect(parseSize('lots')).toBeUndefined()
    expect(parseDuration('24h')).toBe(86_400_000)
    expect(parseDuration(90)).toBe(90_000)
    expect(parseDuration('x')).toBeUndefined()
  })
})

describe('start-up failures', () => {
  it('a default-store that is not declared lists the declared stores', async () => {
    await expect(
      createAttachStorage({ config: { ...base(), 'default-store': 'nas', stores: { a: { type: 'local' }, b: { type: 'local' } } } }),
    ).rejects.toThrow(/attach\.default-store names store "nas", which is not declared; declared stores: a, b/)
  })
  it("a domain's store that is not declared lists the declared stores", async () => {
    await expect(createAttachStorage({ config: { ...base(), domains: { demo: { store: 'nas' } } } })).rejects.toThrow(
      /attach\.domains\.demo\.store names store "nas", which is not declared; declared stores: local/,
    )
  })
  it('a store without a type', async () => {
    await expect(createAttachStorage({ config: { ...base(), stores: { x: { 'base-dir': '/x' } } } })).rejects.toThrow(
      /attach\.stores\.x: "type" is required/,
    )
  })
  it('a store type with no adapter at all', async () => {
    await expect(createAttachStorage({ config: { ...base(), stores: { x: { type: 'floppy' } } } })).rejects.toThrow(
      /no adapter exists for store type "floppy"/,
    )
  })
  it('a store type whose package is not installed names the package to install', async () => {
    const missing = (spec: string) => {
      const err = new Error(`Cannot find package '${spec}' imported from x`) as NodeJS.ErrnoException
      err.code = 'ERR_MODULE_NOT_FOUND'
      return Promise.reject(err)
    }
    const cases = [
      ['s3', { bucket: 'b', region: 'r' }, '@attach-storage/store-s3'],
      ['azure', { 'connection-string': 'c', container: 'c' }, '@attach-storage/store-azure'],
      ['sftp', { host: 'h' }, '@attach-storage/store-sftp'],
      ['ftp', { host: 'h' }, '@attach-storage/store-ftp'],
    ] as const
    for (const [type, settings, pkg] of cases) {
      await expect(
        createAttachStorage({ config: { ...base(), stores: { remote: { type, ...settings } } }, importModule: missing }),
      ).rejects.toThrow(new RegExp(`run "npm install ${pkg.replace('/', '\\/')}"`))
    }
  })
  it('the real loader reports a package that is not installed by its genuine module error', async () => {
    await expect(loadStoreFactory('@attach-storage/store-none', 'attach.stores.x', 'none')).rejects.toThrow(
      /attach\.stores\.x has type "none", whose adapter is not installed: run "npm install @attach-storage\/store-none"/,
    )
    // An installed package that is no store package is refused too.
    await expect(loadStoreFactory('yaml', 'attach.stores.x', 'yaml')).rejects.toThrow(/does not export createStore/)
  })
  it('required settings of the type missing', async () => {
    const cases = [
      ['s3', {}, /missing required settings: bucket, region/],
      ['s3', { bucket: 'b' }, /missing required settings: region/],
      ['azure', { container: 'c' }, /missing required settings: connection-string/],
      ['sftp', {}, /missing required settings: host/],
      ['ftp', { port: 21 }, /missing required settings: host/],
    ] as const
    for (const [type, settings, re] of cases) {
      await expect(createAttachStorage({ config: { ...base(), stores: { r: { type, ...settings } } } })).rejects.toThrow(re)
    }
  })
  it('a store package that refuses its settings fails the start and releases the stores made before it', async () => {
    const closed: string[] = []
    const fake = (name: string) =>
      ({ name, type: 'fake', close: async () => void closed.push(name) }) as unknown as import('../stores/store.js').Store
    await expect(
      createAttachStorage({
        config: { ...base(), stores: { a: { type: 'fake' }, r: { type: 'sftp', port: 22 } } },
        storeFactories: { fake },
      }),
    ).rejects.toThrow(/^attach\.stores\.r \(type sftp\) is missing required settings: host$/)
    expect(closed).toEqual(['a'])
  })
  it('the spec attach.s3.* keys declare an implicit store "s3"', async () => {
    await expect(createAttachStorage({ config: { ...base(), s3: { bucket: 'b' }, 'default-store': 's3' } })).rejects.toThrow(
      /attach\.stores\.s3 \(type s3\) is missing required settings: region/,
    )
  })
  it('registering before the service has initialised fails with a clear message', async () => {
    const storage = new AttachStorage({ config: base() })
    expect(() => storage.registry.registerDomain('x', { store: 'local' })).toThrow(/before the attach storage service has initialised/)
    expect(() => storage.registry.registerCategory('x', 'y')).toThrow(/before the attach storage service has initialised/)
    expect(() => storage.registry.registerFilter({ name: 'virus', check: () => null })).toThrow(
      /before the attach storage service has initialised/,
    )
    await storage.init()
    expect(storage.registry.registerDomain('x', { store: 'local' }).categories.has('default')).toBe(true)
    await storage.close()
  })
  it('a category naming an unregistered filter, and a domain on an undeclared store, fail in the registrar', async () => {
    await expect(
      createAttachStorage({ config: { ...base(), domains: { d: { categories: { c: { filters: ['virus'] } } } } } }),
    ).rejects.toThrow(/names filter "virus", which is not registered/)
    await expect(createAttachStorage({ config: base(), registrar: (r) => void r.registerDomain('d', { store: 'nas' }) })).rejects.toThrow(
      /declared stores: local/,
    )
  })
  it('uses the OS temporary directory without a base-dir', async () => {
    const storage = new AttachStorage({ config: { db: { file: join(dir, 'os.db') } } })
    await storage.init()
    const local = storage.store('local') as unknown as { baseDir: string }
    expect(local.baseDir).toBe(tmpdir())
    await storage.close()
  })
})

describe('configuration files', () => {
  it('loads JSON and YAML with the top-level attach key, merged over defaults', async () => {
    const json = join(dir, 'a.json')
    const yaml = join(dir, 'a.yaml')
    await writeFile(json, JSON.stringify({ attach: { 'default-store': 'x', stores: { x: { type: 'local', 'base-dir': '/x' } } } }))
    await writeFile(yaml, 'attach:\n  default-store: x\n  stores:\n    x:\n      type: local\n      base-dir: /x\n')
    const a = await loadConfigFile(json)
    expect(a).toEqual(await loadConfigFile(yaml))
    expect(mergeSettings({ defaultStore: 'local', upload: { maxFiles: 3 } }, a)).toEqual({
      defaultStore: 'x',
      upload: { maxFiles: 3 },
      stores: { x: { type: 'local', baseDir: '/x' } },
    })
  })
  it('fails clearly on a missing file, bad syntax and a missing attach key', async () => {
    await expect(loadConfigFile(join(dir, 'none.json'))).rejects.toThrow(/Cannot read the configuration file/)
    await writeFile(join(dir, 'bad.json'), '{')
    await expect(loadConfigFile(join(dir, 'bad.json'))).rejects.toThrow(/not valid JSON/)
    await writeFile(join(dir, 'noattach.yaml'), 'other: 1\n')
    await expect(loadConfigFile(join(dir, 'noattach.yaml'))).rejects.toThrow(/top-level "attach" key/)
  })
})

describe('unknown settings', () => {
  const refused = (tree: unknown) => {
    try {
      parseAttachConfig(tree)
    } catch (err) {
      expect((err as { code?: string }).code).toBe('config-invalid')
      return (err as Error).message
    }
    throw new Error('accepted')
  }
  it('refuses each typo at start with its kebab-case path and the nearest known name, on one line', async () => {
    expect(refused({ attach: { 'tmp-tll': '1h' } })).toBe('unknown setting attach.tmp-tll; did you mean tmp-ttl?')
    expect(refused({ attach: { 'cdn-urll': 'https://cdn.example.com/' } })).toBe('unknown setting attach.cdn-urll; did you mean cdn-url?')
    expect(refused({ attach: { upload: { 'max-file-sise': '5MB' } } })).toBe(
      'unknown setting attach.upload.max-file-sise; did you mean max-file-size?',
    )
    expect(refused({ attach: { domains: { post: { categories: { image: { filter: ['image'] } } } } } })).toBe(
      'unknown setting attach.domains.post.categories.image.filter; did you mean filters?',
    )
    // camelCase from code is named in the file's kebab-case; a name far from every key lists them.
    expect(refused({ resize: { maxVariantz: 3 } })).toBe('unknown setting attach.resize.max-variantz; did you mean max-variants?')
    expect(refused({ signing: { wholly: 1 } })).toBe('unknown setting attach.signing.wholly; known settings: secret, ttl')
    expect(refused({ domains: { d: { categories: { c: { sizes: [{ w: 1, x: 2 }] } } } } })).toMatch(
      /^unknown setting attach\.domains\.d\.categories\.c\.sizes\.0\.x; /,
    )
    expect(refused({ domains: { d: { categories: { c: { variants: { thumb: { w: 1, fromat: 'webp' } } } } } } })).toBe(
      'unknown setting attach.domains.d.categories.c.variants.thumb.fromat; did you mean format?',
    )
    // createAttachStorage() refuses it the same way, before anything starts.
    await expect(createAttachStorage({ config: { ...base(), 'tmp-tll': '1h' } as never })).rejects.toMatchObject({
      code: 'config-invalid',
      message: 'unknown setting attach.tmp-tll; did you mean tmp-ttl?',
    })
    // The core's local store knows its own settings too (the store packages check theirs).
    await expect(
      createAttachStorage({ config: { ...base(), stores: { local: { type: 'local', 'base-dri': '/srv/x' } } } as never }),
    ).rejects.toMatchObject({
      code: 'config-invalid',
      message: 'unknown setting attach.stores.local.base-dri; did you mean base-dir?',
    })
  })
  it('accepts a correct tree, and the open maps stay open', () => {
    const config = parseAttachConfig({
      attach: {
        'tmp-ttl': '2h',
        'cdn-url': 'https://cdn.example.com/',
        upload: { 'max-file-size': '5MB', 'user-quota': 0 },
        save: { 'max-entries': 10 },
        resumable: { enabled: true, 'part-size': '8MB' },
        resize: { 'max-variants': 4, 'memory-ttl': '5m' },
        'variant-jobs': { queue: 'memory', 'pg-boss': { schema: 'jobs', 'anything-goes': 1 } },
        zip: { 'max-bytes': '1GB' },
        signing: { secret: 'a-secret-of-16-chars', ttl: '1h' },
        db: { type: 'sqlite', file: '/tmp/x.db' },
        directory: { 'base-dir': '/srv', 'tmp-dir': '/srv/tmp' },
        stores: { 'Any_Name-1': { type: 's3', bucket: 'b', 'force-path-style': true, 'made-up': 1 } },
        s3: { bucket: 'b', 'not-checked-here': 1 },
        domains: {
          'my-domain': {
            store: 'local',
            'date-field': 'created',
            categories: {
              'photo-set': {
                filters: ['image', { name: 'size', 'max-size': '2MB', 'any-option': 1 }],
                sizes: [{ w: 200 }],
                variants: { 'thumb-1': { w: 100, format: 'webp' } },
                'allow-redirect': true,
              },
            },
          },
        },
      },
    })
    expect(config.variantJobs.pgBoss).toEqual({ schema: 'jobs', anythingGoes: 1 })
    expect(config.stores['Any_Name-1']).toMatchObject({ madeUp: 1 })
    expect(Object.keys(config.domains['my-domain']?.categories ?? {})).toEqual(['photo-set'])
  })
  it('registerCategory() and registerDomain() refuse an unknown option with the nearest known one', async () => {
    await expect(
      createAttachStorage({
        config: base(),
        registrar: (r) => {
          r.registerDomain('post', { store: 'local' })
          r.registerCategory('post', 'image', { filter: ['image'] } as never)
        },
      }),
    ).rejects.toMatchObject({ code: 'config-invalid', message: 'Category "post.image": unknown setting filter; did you mean filters?' })
    await expect(
      createAttachStorage({ config: base(), registrar: (r) => void r.registerDomain('post', { store: 'local', datefield: 'x' } as never) }),
    ).rejects.toMatchObject({ code: 'config-invalid', message: 'Domain "post": unknown setting datefield; did you mean dateField?' })
  })
})
