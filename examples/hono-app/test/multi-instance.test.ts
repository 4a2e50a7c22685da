/**
 * Several stateless instances on one PostgreSQL database and one S3 store (s3rver), and per-domain
 * store selection with two stores at once, all through real listening servers and ATTACH_CONFIG.
 */
import { rm, writeFile, mkdtemp } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import sharp from 'sharp'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { startS3rver, type TestS3Server } from '../../../packages/store-s3/src/test-server.js'
import { pgDatabase, sign, start, walk, type Running } from './helpers.js'

/** Every object key in the bucket, read from s3rver's own directory. */
async function bucketKeys(s3: TestS3Server): Promise<string[]> {
  const root = join(s3.directory, s3.bucket)
  const files = await walk(root)
  return files
    .filter((f) => f.endsWith('._S3rver_object'))
    .map((f) => f.slice(root.length + 1, -'._S3rver_object'.length))
    .sort()
}

describe('two instances on one PostgreSQL database and one S3 store', () => {
  let s3: TestS3Server
  let db: { url: string; drop(): Promise<void> }
  let a: Running
  let b: Running
  let cfgDir: string
  let token: string

  beforeAll(async () => {
    s3 = await startS3rver('attach-shared')
    db = await pgDatabase()
    cfgDir = await mkdtemp(join(tmpdir(), 'attach-cfg-'))
    const config = join(cfgDir, 'attach.json')
    await writeFile(
      config,
      JSON.stringify({
        attach: {
          stores: {
            shared: s3.fileSettings(),
          },
          'default-store': 'shared',
          'tmp-store': 'shared',
        },
      }),
    )
    const env = { ATTACH_DATABASE_URL: db.url, ATTACH_CONFIG: config }
    a = await start(env)
    b = await start(env)
    token = await sign('1')
  })
  afterAll(async () => {
    await a?.close()
    await b?.close()
    await s3?.close()
    await db?.drop()
    if (cfgDir) await rm(cfgDir, { recursive: true, force: true })
  })

  const call = (srv: Running, path: string, init: RequestInit = {}) => {
    const headers = new Headers(init.headers)
    headers.set('authorization', `Bearer ${token}`)
    if (typeof init.body === 'string') headers.set('content-type', 'application/json')
    return fetch(srv.base + path, { ...init, headers })
  }

  it('uploads through one, confirms and views through the other, deletes through the first, leaving nothing', async () => {
    const photo = await sharp({ create: { width: 1200, height: 800, channels: 3, background: '#c33' } })
      .jpeg()
      .toBuffer()
    const fd = new FormData()
    fd.set('refDomain', 'demo')
    fd.set('refCategory', 'image')
    fd.set('file', new Blob([new Uint8Array(photo)]), 'shared.jpg')
    const up = await call(a, '/api/storage/attach/tmp', { method: 'POST', body: fd })
    const item = (await up.json()).files[0]
    expect(item.type).toBe('image/jpeg')
    // The temporary file lives in the shared store, not on instance A's disk.
    expect(await bucketKeys(s3)).toEqual([`_tmp/${item.name}`, `_tmp/${item.name}.meta.json`])
    expect(await walk(join(a.dataDir, 'tmp'))).toEqual([])

    const saved = await call(b, '/api/storage/attach/demo/500', {
      method: 'POST',
      body: JSON.stringify({ image: [{ savedName: item.name, displayName: 'shared.jpg' }] }),
    })
    expect(saved.status).toBe(200)
    const rec = (await saved.json()).attachList[0]
    expect(await bucketKeys(s3)).toEqual([`demo/${rec.savedDir.split('/').slice(2, 4).join('/')}/500/${item.name}`])

    for (const srv of [b, a]) {
      const view = await fetch(`${srv.base}/assets/storage/attach/view/${rec.id}`, { headers: { range: 'bytes=0-3' } })
      expect(view.status).toBe(206)
      expect(Buffer.from(await view.arrayBuffer()).equals(photo.subarray(0, 4))).toBe(true)
    }
    // A resize variant is made by B and stored in the same S3 store; A serves it from there.
    const small = await fetch(`${b.base}/assets/storage/attach/view/${rec.id}?w=300`)
    expect((await sharp(Buffer.from(await small.arrayBuffer())).metadata()).width).toBe(300)
    // Written behind the answer.
    await vi.waitFor(async () => expect((await bucketKeys(s3)).some((k) => k.endsWith(`_v/${rec.id}/300x0`))).toBe(true))
    expect(a.ref.storage.resizer.generated).toBe(0)
    const again = await fetch(`${a.base}/assets/storage/attach/view/${rec.id}?w=300`)
    expect((await sharp(Buffer.from(await again.arrayBuffer())).metadata()).width).toBe(300)
    expect(a.ref.storage.resizer.generated).toBe(0)

    const del = await call(a, '/api/storage/attach', { method: 'POST', body: JSON.stringify([{ id: rec.id }]) })
    expect(await del.json()).toEqual({ success: true, count: 1 })
    expect(await bucketKeys(s3)).toEqual([])
    for (const srv of [a, b]) {
      expect(await walk(join(srv.dataDir, 'files'))).toEqual([])
      expect(await walk(join(srv.dataDir, 'tmp'))).toEqual([])
      expect((await fetch(`${srv.base}/assets/storage/attach/view/${rec.id}`)).status).toBe(404)
    }
  })

  it('answers 404, not 500, for an object deleted behind its back', async () => {
    const fd = new FormData()
    fd.set('refDomain', 'demo')
    fd.set('file', new Blob(['soon gone']), 'gone.txt')
    const item = (await (await call(a, '/api/storage/attach/tmp', { method: 'POST', body: fd })).json()).files[0]
    const rec = (
      await (
        await call(b, '/api/storage/attach/demo/501', { method: 'POST', body: JSON.stringify({ default: [{ savedName: item.name }] }) })
      ).json()
    ).attachList[0]
    await rm(s3.objectFile(`${rec.savedDir.slice(1)}${rec.savedName}`), { force: true })
    const res = await fetch(`${a.base}/assets/storage/attach/view/${rec.id}`)
    expect(res.status).toBe(404)
    expect((await res.json()).code).toBe('not-found')
  })
})

describe('per-domain store selection with two stores at once', () => {
  it('keeps demo files in S3 and board files on the local disk', async () => {
    const s3 = await startS3rver('attach-split')
    const cfgDir = await mkdtemp(join(tmpdir(), 'attach-cfg-'))
    const config = join(cfgDir, 'attach.yaml')
    await writeFile(
      config,
      [
        'attach:',
        '  default-store: disk',
        '  stores:',
        '    disk:',
        '      type: local',
        '    cloud:',
        '      type: s3',
        `      bucket: ${s3.bucket}`,
        '      region: us-east-1',
        `      endpoint: ${s3.endpoint}`,
        '      force-path-style: true',
        '      access-key: S3RVER',
        '      secret-key: S3RVER',
        '  domains:',
        '    demo:',
        '      store: cloud',
        '',
      ].join('\n'),
    )
    const srv = await start({ ATTACH_CONFIG: config })
    try {
      const token = await sign('3')
      const cfg = await (await fetch(`${srv.base}/api/storage/config`, { headers: { authorization: `Bearer ${token}` } })).json()
      expect(cfg.domains.demo.store).toBe('cloud')
      expect(cfg.domains.board.store).toBe('disk')
      // Only a board post's author may attach files to it: the board key is a post of this user.
      const post = await (
        await fetch(`${srv.base}/board`, {
          method: 'POST',
          body: JSON.stringify({ title: 'per-domain stores' }),
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        })
      ).json()
      for (const [domain, key] of [
        ['demo', '1'],
        ['board', String(post.id)],
      ]) {
        const fd = new FormData()
        fd.set('refDomain', domain!)
        fd.set('file', new Blob([`${domain} bytes`]), `${domain}.txt`)
        const item = (
          await (
            await fetch(`${srv.base}/api/storage/attach/tmp`, { method: 'POST', body: fd, headers: { authorization: `Bearer ${token}` } })
          ).json()
        ).files[0]
        const res = await fetch(`${srv.base}/api/storage/attach/${domain}/${key}`, {
          method: 'POST',
          body: JSON.stringify({ default: [{ savedName: item.name }] }),
          headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        })
        const rec = (await res.json()).attachList[0]
        expect(await (await fetch(srv.base + rec.url)).text()).toBe(`${domain} bytes`)
      }
      expect((await bucketKeys(s3)).every((k) => k.startsWith('demo/'))).toBe(true)
      expect((await bucketKeys(s3)).length).toBe(1)
      const local = await walk(join(srv.dataDir, 'files'))
      expect(local.filter((f) => f.includes('/board/')).length).toBe(1)
      expect(local.filter((f) => f.includes('/demo/')).length).toBe(0)
    } finally {
      await srv.close()
      await s3.close()
      await rm(cfgDir, { recursive: true, force: true })
    }
  })
})

/** A TCP proxy that can be cut (every connection reset, new ones refused) and restored. */
async function cuttableProxy(targetPort: number) {
  const net = await import('node:net')
  let down = false
  const sockets = new Set<import('node:net').Socket>()
  const server = net.createServer((client) => {
    if (down) return client.destroy()
    const upstream = net.connect(targetPort, '127.0.0.1')
    sockets.add(client).add(upstream)
    const drop = () => {
      client.destroy()
      upstream.destroy()
      sockets.delete(client)
      sockets.delete(upstream)
    }
    client.on('error', drop).on('close', drop)
    upstream.on('error', drop).on('close', drop)
    client.pipe(upstream).pipe(client)
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  return {
    port: (server.address() as import('node:net').AddressInfo).port,
    cut() {
      down = true
      for (const s of sockets) s.destroy()
    },
    restore() {
      down = false
    },
    close: () => new Promise<void>((r) => server.close(() => r())),
  }
}

describe('the remote store going away', () => {
  it('fails the confirmed save cleanly, keeps nothing half-made, and completes on retry once it is back', async () => {
    const s3 = await startS3rver('attach-faults')
    const proxy = await cuttableProxy(s3.port)
    const cfgDir = await mkdtemp(join(tmpdir(), 'attach-cfg-'))
    const config = join(cfgDir, 'attach.json')
    await writeFile(
      config,
      JSON.stringify({
        attach: {
          stores: {
            cloud: {
              type: 's3',
              bucket: s3.bucket,
              region: 'us-east-1',
              endpoint: `http://127.0.0.1:${proxy.port}`,
              'force-path-style': true,
              'access-key': 'S3RVER',
              'secret-key': 'SECRET-THAT-MUST-NOT-LEAK',
              'max-attempts': 2,
              'connect-timeout': 2,
            },
          },
          'default-store': 'cloud',
        },
      }),
    )
    const logged: string[] = []
    const srv = await start({ ATTACH_CONFIG: config }, logged)
    const token = await sign('4')
    const auth = { authorization: `Bearer ${token}` }
    try {
      const fd = new FormData()
      fd.set('refDomain', 'demo')
      fd.set('file', new Blob(['durable bytes']), 'd.txt')
      const item = (await (await fetch(`${srv.base}/api/storage/attach/tmp`, { method: 'POST', body: fd, headers: auth })).json()).files[0]
      const bag = JSON.stringify({ default: [{ savedName: item.name, displayName: 'd.txt' }] })
      proxy.cut()
      const failed = await fetch(`${srv.base}/api/storage/attach/demo/77`, {
        method: 'POST',
        body: bag,
        headers: { ...auth, 'content-type': 'application/json' },
      })
      expect(failed.status).toBe(500)
      const body = await failed.json()
      expect(body).toMatchObject({ code: 'attach-save-failure', failures: [{ refCategory: 'default', index: 0, displayName: 'd.txt' }] })
      expect(JSON.stringify(body)).not.toContain('SECRET-THAT-MUST-NOT-LEAK')
      // No record without its file; the temporary file is still there for the retry.
      expect(await (await fetch(`${srv.base}/api/storage/attach/demo/77/default/_count`, { headers: auth })).json()).toBe(0)
      expect(await walk(join(srv.dataDir, 'tmp'))).toHaveLength(2)
      // A direct upload while it is down: a clear 5xx JSON error, nothing left behind.
      const d = new FormData()
      d.set('refDomain', 'demo')
      d.set('files', new Blob(['direct']), 'x.txt')
      const direct = await fetch(`${srv.base}/api/storage/attach/direct`, { method: 'POST', body: d, headers: auth })
      expect(direct.status).toBe(502)
      const dj = await direct.json()
      expect(dj.code).toBe('store-failure')
      expect(JSON.stringify(dj)).not.toContain('SECRET')
      expect(await walk(join(srv.dataDir, 'tmp'))).toHaveLength(2)

      proxy.restore()
      const retry = await fetch(`${srv.base}/api/storage/attach/demo/77`, {
        method: 'POST',
        body: bag,
        headers: { ...auth, 'content-type': 'application/json' },
      })
      expect(retry.status).toBe(200)
      const rec = (await retry.json()).attachList[0]
      expect(await (await fetch(srv.base + rec.url)).text()).toBe('durable bytes')
      expect(await walk(join(srv.dataDir, 'tmp'))).toEqual([])
      expect(logged.length).toBeGreaterThan(0)
      expect(logged.join('\n')).not.toContain('SECRET-THAT-MUST-NOT-LEAK')
    } finally {
      await srv.close()
      await proxy.close()
      await s3.close()
      await rm(cfgDir, { recursive: true, force: true })
    }
  })
})
