/**
 * The whole reference server on each remote store, chosen by ATTACH_CONFIG alone: temporary files and
 * saved files in the store, a view streamed from it with a byte range, a resize variant kept in it, and
 * nothing left in it (or on the local disk) once the attachment is deleted.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import sharp from 'sharp'
import type { Store, StoreFactory } from 'attach-storage'
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest'
import { startS3rver } from '../../../packages/store-s3/src/test-server.js'
import { connectionString, startAzurite } from '../../../packages/store-azure/src/test-azurite.js'
import { startTestSshd } from '../../../packages/store-sftp/src/test-sshd.js'
import { startFtpServer } from '../../../packages/store-ftp/src/testing/ftp-server.js'
import { createStore as s3Store } from '@attach-storage/store-s3'
import { createStore as azureStore } from '@attach-storage/store-azure'
import { createStore as sftpStore } from '@attach-storage/store-sftp'
import { createStore as ftpStore } from '@attach-storage/store-ftp'
import { sign, start, walk, type Running } from './helpers.js'

interface RemoteStore {
  /** The store's settings in the spec's kebab-case keys. */
  settings: Record<string, unknown>
  /** camelCase settings for the package's own createStore, to look inside the store. */
  createStore: StoreFactory
  camel: Record<string, unknown>
  stop(): Promise<void>
}

const REMOTES: Record<string, () => Promise<RemoteStore>> = {
  async s3() {
    const s3 = await startS3rver('attach-ref')
    const settings = s3.fileSettings()
    const camel = {
      type: 's3',
      bucket: s3.bucket,
      region: 'us-east-1',
      endpoint: s3.endpoint,
      forcePathStyle: true,
      accessKey: 'S3RVER',
      secretKey: 'S3RVER',
    }
    return { settings, camel, createStore: s3Store, stop: () => s3.close() }
  },
  async azure() {
    const az = await startAzurite()
    const cs = connectionString(az.port)
    return {
      settings: { type: 'azure', 'connection-string': cs, container: 'attach-ref', 'create-container': true },
      camel: { type: 'azure', connectionString: cs, container: 'attach-ref', createContainer: true },
      createStore: azureStore,
      stop: () => az.stop(),
    }
  },
  async sftp() {
    const sshd = await startTestSshd()
    const base = { host: sshd.host, port: sshd.port, username: sshd.username, password: sshd.password, root: 'files' }
    return { settings: { type: 'sftp', ...base }, camel: { type: 'sftp', ...base }, createStore: sftpStore, stop: () => sshd.cleanup() }
  },
  async ftp() {
    const ftp = await startFtpServer()
    const base = { host: ftp.host, port: ftp.port, user: ftp.user, password: ftp.password, root: '/files' }
    return { settings: { type: 'ftp', ...base }, camel: { type: 'ftp', ...base }, createStore: ftpStore, stop: () => ftp.close() }
  },
}

async function keys(store: Store): Promise<string[]> {
  const out: string[] = []
  for await (const e of store.list('')) out.push(e.key)
  return out.sort()
}

for (const [type, startRemote] of Object.entries(REMOTES)) {
  describe(`the reference server on the ${type} store`, () => {
    let remote: RemoteStore
    let srv: Running
    let inside: Store
    let cfgDir: string
    let token: string

    beforeAll(async () => {
      remote = await startRemote()
      cfgDir = await mkdtemp(join(tmpdir(), 'attach-cfg-'))
      const config = join(cfgDir, 'attach.json')
      await writeFile(
        config,
        JSON.stringify({ attach: { stores: { remote: remote.settings }, 'default-store': 'remote', 'tmp-store': 'remote' } }),
      )
      srv = await start({ ATTACH_CONFIG: config })
      inside = await remote.createStore('inspect', remote.camel)
      token = await sign('1')
    })
    afterAll(async () => {
      await inside?.close()
      await srv?.close()
      await remote?.stop()
      if (cfgDir) await rm(cfgDir, { recursive: true, force: true })
    })

    it('uploads, saves, views with a range, resizes and deletes through the store, leaving nothing', async () => {
      const photo = await sharp({ create: { width: 900, height: 600, channels: 3, background: '#2a6' } })
        .jpeg()
        .toBuffer()
      const fd = new FormData()
      fd.set('refDomain', 'demo')
      fd.set('refCategory', 'image')
      fd.set('file', new Blob([new Uint8Array(photo)]), 'photo.jpg')
      const auth = { authorization: `Bearer ${token}` }
      const item = (await (await fetch(`${srv.base}/api/storage/attach/tmp`, { method: 'POST', body: fd, headers: auth })).json()).files[0]
      expect(item.type).toBe('image/jpeg')
      expect(await keys(inside)).toEqual([`_tmp/${item.name}`, `_tmp/${item.name}.meta.json`])

      const saved = await fetch(`${srv.base}/api/storage/attach/demo/9`, {
        method: 'POST',
        body: JSON.stringify({ image: [{ savedName: item.name, displayName: 'photo.jpg' }] }),
        headers: { ...auth, 'content-type': 'application/json' },
      })
      expect(saved.status).toBe(200)
      const rec = (await saved.json()).attachList[0]
      const key = `${rec.savedDir.slice(1)}${rec.savedName}`
      expect(await keys(inside)).toEqual([key])

      const part = await fetch(`${srv.base}/assets/storage/attach/view/${rec.id}`, { headers: { range: 'bytes=100-1099' } })
      expect(part.status).toBe(206)
      expect(Buffer.from(await part.arrayBuffer()).equals(photo.subarray(100, 1100))).toBe(true)
      const whole = await fetch(`${srv.base}${rec.url}`)
      expect(Buffer.from(await whole.arrayBuffer()).equals(photo)).toBe(true)

      const small = await fetch(`${srv.base}/assets/storage/attach/view/${rec.id}?w=300`)
      expect((await sharp(Buffer.from(await small.arrayBuffer())).metadata()).width).toBe(300)
      // Written behind the answer.
      await vi.waitFor(async () => expect(await keys(inside)).toEqual([key, `${rec.savedDir.slice(1)}_v/${rec.id}/300x0`].sort()))

      const del = await fetch(`${srv.base}/api/storage/attach`, {
        method: 'POST',
        body: JSON.stringify([{ id: rec.id }]),
        headers: { ...auth, 'content-type': 'application/json' },
      })
      expect(await del.json()).toEqual({ success: true, count: 1 })
      expect(await keys(inside)).toEqual([])
      expect(await walk(join(srv.dataDir, 'files'))).toEqual([])
      expect(await walk(join(srv.dataDir, 'tmp'))).toEqual([])
      expect((await fetch(`${srv.base}/assets/storage/attach/view/${rec.id}`)).status).toBe(404)
    })
  })
}
