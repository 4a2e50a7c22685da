/**
 * Resumable uploads with a client nobody here wrote: tus-js-client from Node sends 64 MiB through a TCP
 * relay that cuts the connection near half way; the client asks the server where it stands and goes on
 * from there, and the file the confirmed save makes has the right sha256. The same with the temporary area
 * on S3 (s3rver) and on Azure (Azurite), where the bytes are kept as part objects.
 */
import { createHash, randomBytes } from 'node:crypto'
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { connect, createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import * as tus from 'tus-js-client'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startS3rver } from '../../../packages/store-s3/src/test-server.js'
import { connectionString, startAzurite } from '../../../packages/store-azure/src/test-azurite.js'
import { type Running, sign, start } from './helpers.js'

const MiB = 1024 * 1024

/** A TCP relay to `port` that counts the bytes going up and cuts every connection once, after `cutAt` of them. */
async function relay(
  port: number,
  cutAt: number,
): Promise<{ port: number; sent: () => number; cut: () => boolean; close(): Promise<void> }> {
  let sent = 0
  let cut = false
  const sockets = new Set<Socket>()
  const server: Server = createServer((client) => {
    const upstream = connect(port, '127.0.0.1')
    sockets.add(client).add(upstream)
    const drop = () => {
      client.destroy()
      upstream.destroy()
    }
    client.on('data', (chunk: Buffer) => {
      sent += chunk.length
      if (!cut && sent >= cutAt) {
        cut = true
        drop()
        return
      }
      if (!upstream.write(chunk)) client.pause()
    })
    upstream.on('drain', () => client.resume())
    upstream.on('data', (chunk: Buffer) => client.write(chunk))
    client.on('error', drop).on('close', drop)
    upstream.on('error', drop).on('close', drop)
  })
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()))
  return {
    port: (server.address() as { port: number }).port,
    sent: () => sent,
    cut: () => cut,
    close: () =>
      new Promise<void>((r) => {
        for (const s of sockets) s.destroy()
        server.close(() => r())
      }),
  }
}

describe('tus-js-client from Node', () => {
  let srv: Running
  beforeAll(async () => {
    srv = await start({ ATTACH_MAX_FILE_SIZE: String(128 * MiB) })
  })
  afterAll(async () => {
    await srv?.close()
  })

  it('uploads 64 MiB, resumes after a cut near half way from the offset the server reports, ends with the right sha256', async () => {
    await cutAndResume(srv, 64 * MiB, '500')
  }, 120_000)
})

/** Uploads `size` random bytes with tus-js-client through a relay that cuts once half way, then commits and checks the sha256. */
async function cutAndResume(srv: Running, size: number, refKey: string, chunkSize?: number): Promise<void> {
  const bytes = randomBytes(size)
  const port = Number(new URL(srv.base).port)
  const r = await relay(port, size / 2)
  const token = await sign('7')
  const offsets: number[] = []
  try {
    const url = await new Promise<string>((resolve, reject) => {
      const upload = new tus.Upload(bytes, {
        endpoint: `http://127.0.0.1:${r.port}/api/storage/attach/tus`,
        headers: { authorization: `Bearer ${token}` },
        metadata: { filename: 'big.bin', refDomain: 'demo' },
        retryDelays: [0, 100, 500, 1000],
        ...(chunkSize ? { chunkSize } : {}),
        onAfterResponse: (req, res) => {
          if (req.getMethod() === 'HEAD') offsets.push(Number(res.getHeader('Upload-Offset')))
        },
        onError: reject,
        onSuccess: () => resolve(upload.url!),
      })
      upload.start()
    })
    expect(r.cut()).toBe(true)
    // Resumed once, from where the server stood: the bytes it had kept, close to where the cut came.
    expect(offsets.length).toBe(1)
    const resumedAt = offsets[0]!
    expect(resumedAt).toBeGreaterThan(size / 4)
    expect(resumedAt).toBeLessThanOrEqual(size / 2)
    // Nothing before that offset went twice: the bytes sent in all are the file, the part lost in
    // flight at the cut, and the requests' headers.
    expect(r.sent()).toBeLessThan(size + (size / 2 - resumedAt) + 64 * 1024)
    const name = url.split('/').pop()!
    const saved = await fetch(`${srv.base}/api/storage/attach/demo/${refKey}`, {
      method: 'POST',
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: JSON.stringify({ default: [{ savedName: name }] }),
    })
    expect(saved.status).toBe(200)
    const rec = (await saved.json()).attachList[0]
    expect([rec.displayName, rec.fileSize]).toEqual(['big.bin', size])
    const view = await fetch(`${srv.base}/assets/storage/attach/download/${rec.id}`)
    const hash = createHash('sha256')
    for await (const chunk of view.body as unknown as AsyncIterable<Uint8Array>) hash.update(chunk)
    expect(hash.digest('hex')).toBe(createHash('sha256').update(bytes).digest('hex'))
  } finally {
    await r.close()
  }
}

/** The temporary area on an object store: the settings of the store, and how to stop its server. */
const CLOUDS: Record<string, () => Promise<{ settings: Record<string, unknown>; stop(): Promise<void> }>> = {
  async s3() {
    const s3 = await startS3rver('attach-tus')
    return {
      settings: s3.fileSettings(),
      stop: () => s3.close(),
    }
  },
  async azure() {
    const az = await startAzurite()
    return {
      settings: { type: 'azure', 'connection-string': connectionString(az.port), container: 'attach-tus', 'create-container': true },
      stop: () => az.stop(),
    }
  },
}

for (const [type, startCloud] of Object.entries(CLOUDS)) {
  describe(`tus-js-client with the temporary area on ${type}`, () => {
    let cloud: Awaited<ReturnType<(typeof CLOUDS)[string]>>
    let srv: Running
    let dir: string
    beforeAll(async () => {
      cloud = await startCloud()
      dir = await mkdtemp(join(tmpdir(), 'attach-tus-cloud-'))
      const config = join(dir, 'attach.json')
      await writeFile(
        config,
        JSON.stringify({ attach: { stores: { cloud: cloud.settings }, 'default-store': 'cloud', 'tmp-store': 'cloud' } }),
      )
      srv = await start({ ATTACH_CONFIG: config, ATTACH_MAX_FILE_SIZE: String(64 * MiB) })
    })
    afterAll(async () => {
      await srv?.close()
      await cloud?.stop()
      await rm(dir, { recursive: true, force: true })
    })

    it('uploads 24 MiB in 4 MiB PATCHes kept as part objects, resumes after a cut half way, ends with the right sha256', async () => {
      await cutAndResume(srv, 24 * MiB, `${type}-tus`, 4 * MiB)
    }, 120_000)
  })
}
