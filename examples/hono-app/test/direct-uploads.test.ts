/**
 * Direct-to-cloud uploads from a real browser: Debian's Chromium, driven by playwright-core, runs a page
 * of the reference server that asks `attach/presign`, sends the file with a plain `fetch` PUT straight
 * to s3rver (a presigned PutObject) or Azurite (a create+write SAS), both with CORS for the page's
 * origin, then commits it with only its `savedName`. The reference server turns presign on by itself
 * because its store is S3 or Azure.
 */
import { createHash } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { PutBucketCorsCommand, S3Client } from '@aws-sdk/client-s3'
import { BlobServiceClient } from '@azure/storage-blob'
import type { BrowserContext } from 'playwright-core'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startS3rver } from '../../../packages/store-s3/src/test-server.js'
import { connectionString, startAzurite } from '../../../packages/store-azure/src/test-azurite.js'
import { withPresignStore } from '@attach-storage/example-reference'
import { launchChromium, sign, start, type Running } from './helpers.js'

/** What a cloud needs for the test: the store's settings, and a way to allow the page's origin. */
interface Cloud {
  settings: Record<string, unknown>
  allowOrigin(origin: string): Promise<void>
  stop(): Promise<void>
}

const CLOUDS: Record<string, () => Promise<Cloud>> = {
  async s3() {
    const s3 = await startS3rver('attach-browser')
    const client = new S3Client({
      region: 'us-east-1',
      endpoint: s3.endpoint,
      forcePathStyle: true,
      credentials: { accessKeyId: 'S3RVER', secretAccessKey: 'S3RVER' },
    })
    return {
      settings: s3.fileSettings(),
      // The rule docs/direct-uploads.md gives for a bucket.
      allowOrigin: async (origin) => {
        await client.send(
          new PutBucketCorsCommand({
            Bucket: s3.bucket,
            CORSConfiguration: {
              CORSRules: [
                { AllowedOrigins: [origin], AllowedMethods: ['PUT'], AllowedHeaders: ['*'], ExposeHeaders: ['ETag'], MaxAgeSeconds: 600 },
              ],
            },
          }),
        )
      },
      stop: async () => {
        client.destroy()
        await s3.close()
      },
    }
  },
  async azure() {
    const az = await startAzurite()
    const cs = connectionString(az.port)
    return {
      settings: { type: 'azure', 'connection-string': cs, container: 'attach-browser', 'create-container': true },
      // The rule docs/direct-uploads.md gives for a storage account.
      allowOrigin: async (origin) => {
        await BlobServiceClient.fromConnectionString(cs).setProperties({
          cors: [{ allowedOrigins: origin, allowedMethods: 'PUT', allowedHeaders: '*', exposedHeaders: 'ETag', maxAgeInSeconds: 600 }],
        })
      },
      stop: () => az.stop(),
    }
  },
}

/** A 1×1 PNG, with some bytes after it. */
const PNG_BASE64 = 'iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=='

for (const [type, startCloud] of Object.entries(CLOUDS)) {
  describe(`a browser uploads straight to ${type}`, () => {
    let cloud: Cloud
    let srv: Running
    let cfgDir: string
    let browser: BrowserContext

    beforeAll(async () => {
      cloud = await startCloud()
      cfgDir = await mkdtemp(join(tmpdir(), 'attach-browser-'))
      const config = join(cfgDir, 'attach.json')
      // Only the default store is the cloud: temporary files stay local, presigned uploads go to the cloud.
      await writeFile(config, JSON.stringify({ attach: { stores: { cloud: cloud.settings }, 'default-store': 'cloud' } }))
      srv = await start({ ATTACH_CONFIG: config })
      await cloud.allowOrigin(srv.base)
      browser = await launchChromium(join(cfgDir, 'profile'))
    }, 60_000)
    afterAll(async () => {
      await browser?.close()
      await srv?.close()
      await cloud?.stop()
      if (cfgDir) await rm(cfgDir, { recursive: true, force: true })
    })

    it('presign, fetch PUT to the cloud, commit: the record has the file’s name, size, type and bytes', async () => {
      const page = await browser.newPage()
      await page.goto(`${srv.base}/healthz`)
      const token = await sign('21')
      const result = await page.evaluate(
        async ({ token, png }) => {
          const auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' }
          const head = Uint8Array.from(atob(png), (c) => c.charCodeAt(0))
          const bytes = new Uint8Array(head.length + 3000)
          bytes.set(head)
          for (let i = head.length; i < bytes.length; i++) bytes[i] = (i * 7) & 255
          const file = new File([bytes], '사진 1.png', { type: 'image/png' })
          const presigned = await fetch('/api/storage/attach/presign', {
            method: 'POST',
            headers: auth,
            body: JSON.stringify({ refDomain: 'demo', refCategory: 'image', fileName: file.name, size: file.size, type: file.type }),
          })
          const p = await presigned.json()
          const put = await fetch(p.uploadUrl, { method: p.method, headers: p.headers, body: file })
          const saved = await fetch('/api/storage/attach/demo/77', {
            method: 'POST',
            headers: auth,
            body: JSON.stringify({ image: [{ savedName: p.name }] }),
          })
          const digest = new Uint8Array(await crypto.subtle.digest('SHA-256', bytes))
          return {
            presignStatus: presigned.status,
            uploadOrigin: new URL(p.uploadUrl).origin,
            putStatus: put.status,
            savedStatus: saved.status,
            saved: await saved.json(),
            sha256: Array.from(digest, (b) => b.toString(16).padStart(2, '0')).join(''),
            size: bytes.length,
          }
        },
        { token, png: PNG_BASE64 },
      )
      await page.close()
      expect(result.presignStatus).toBe(200)
      expect(result.uploadOrigin).not.toBe(srv.base)
      expect(result.putStatus).toBeGreaterThanOrEqual(200)
      expect(result.putStatus).toBeLessThan(300)
      expect(result.savedStatus, JSON.stringify(result.saved)).toBe(200)
      const rec = result.saved.attachList[0]
      expect(rec).toMatchObject({ displayName: '사진 1.png', fileSize: result.size, fileType: 'image/png', createdBy: 21 })
      const served = await fetch(`${srv.base}${rec.url}`)
      expect(served.status).toBe(200)
      expect(
        createHash('sha256')
          .update(Buffer.from(await served.arrayBuffer()))
          .digest('hex'),
      ).toBe(result.sha256)
    })

    it('a file larger than it declared never becomes a record', async () => {
      const page = await browser.newPage()
      await page.goto(`${srv.base}/healthz`)
      const token = await sign('21')
      const result = await page.evaluate(async (token) => {
        const auth = { authorization: `Bearer ${token}`, 'content-type': 'application/json' }
        const p = await (
          await fetch('/api/storage/attach/presign', {
            method: 'POST',
            headers: auth,
            body: JSON.stringify({ refDomain: 'demo', fileName: 'a.txt', size: 5 }),
          })
        ).json()
        const put = await fetch(p.uploadUrl, { method: p.method, headers: p.headers, body: 'more than five bytes' }).then(
          (r) => r.status,
          () => 0,
        )
        const saved = await fetch('/api/storage/attach/demo/78', {
          method: 'POST',
          headers: auth,
          body: JSON.stringify({ default: [{ savedName: p.name }] }),
        })
        return { put, status: saved.status, body: await saved.json() }
      }, token)
      await page.close()
      expect(result.status).toBe(500)
      // S3 refuses the body at the store (its length is signed); Azure takes it and the commit refuses it.
      expect(result.body.failures[0].code).toBe(type === 's3' ? 'not-found' : 'too-large')
      // s3rver's refusal carries no CORS headers, so the page may only see a failed fetch (status 0).
      if (type === 's3') expect([0, 403]).toContain(result.put)
    })
  })
}

describe('the reference server turns presign on where its store is S3 or Azure', () => {
  const cloud = { type: 's3', bucket: 'b', region: 'r' }
  const disk = { type: 'local' }
  it('picks the temporary store, else the default store, of either type; never overrides presign-store', () => {
    expect(withPresignStore({ stores: { cloud }, 'default-store': 'cloud' })).toMatchObject({ presignStore: 'cloud' })
    expect(withPresignStore({ stores: { a: { type: 'azure' } }, tmpStore: 'a', defaultStore: 'disk' })).toMatchObject({ presignStore: 'a' })
    expect(withPresignStore({ stores: { cloud, disk }, 'default-store': 'disk' })).not.toHaveProperty('presignStore')
    expect(withPresignStore({ stores: { cloud }, 'default-store': 'cloud', 'presign-store': 'x' })).not.toHaveProperty('presignStore')
    expect(withPresignStore({})).not.toHaveProperty('presignStore')
  })
})
