/**
 * A tus PATCH the client cuts off half way, on the reference server (local temporary area and s3rver):
 * a client going away is not a server error, so it is logged on one line at info or below, without a
 * stack, and the bytes that arrived stay for the resume.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { connect } from 'node:net'
import type { AddressInfo } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { serve } from '@hono/node-server'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startS3rver, type TestS3Server } from '../../../packages/store-s3/src/test-server.js'
import { createReferenceApp } from '../src/app.js'
import { SECRET, sign } from './helpers.js'

interface Line {
  level: 'info' | 'warn' | 'error'
  text: string
  stack: boolean
}

/** Sends a PATCH declaring `declared` bytes, writes `sent` of them, then destroys the socket. */
async function cutPatch(port: number, path: string, token: string, declared: number, sent: number): Promise<void> {
  const socket = connect(port, '127.0.0.1')
  await new Promise<void>((r) => socket.once('connect', () => r()))
  socket.write(
    `PATCH ${path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\nTus-Resumable: 1.0.0\r\n` +
      `Content-Type: application/offset+octet-stream\r\nUpload-Offset: 0\r\nContent-Length: ${declared}\r\n\r\n`,
  )
  await new Promise<void>((r) => socket.write(Buffer.alloc(sent, 7), () => r()))
  await new Promise((r) => setTimeout(r, 300))
  socket.destroy()
  await new Promise((r) => setTimeout(r, 500))
}

for (const where of ['local', 's3rver'] as const) {
  describe(`a tus PATCH cut off by its client (${where} temporary area)`, () => {
    let dataDir: string
    let s3: TestS3Server | undefined
    let close: () => Promise<void>
    let port: number
    const lines: Line[] = []

    beforeAll(async () => {
      dataDir = await mkdtemp(join(tmpdir(), 'attach-cutoff-'))
      const env: Record<string, string> = { ATTACH_DATA_DIR: dataDir, ATTACH_JWT_SECRET: SECRET }
      if (where === 's3rver') {
        s3 = await startS3rver('attach-cutoff')
        const config = join(dataDir, 'attach.json')
        await writeFile(config, JSON.stringify({ attach: { stores: { remote: s3.fileSettings() }, 'tmp-store': 'remote' } }))
        env.ATTACH_CONFIG = config
      }
      const log =
        (level: Line['level']) =>
        (...args: unknown[]) =>
          lines.push({
            level,
            text: args.map((a) => (a instanceof Error ? a.message : String(a))).join(' '),
            stack: args.some((a) => a instanceof Error && typeof a.stack === 'string'),
          })
      const ref = await createReferenceApp(env, { info: log('info'), warn: log('warn'), error: log('error') })
      const server = serve({ fetch: ref.app.fetch, port: 0, hostname: '127.0.0.1' })
      await new Promise<void>((r) => server.once('listening', () => r()))
      port = (server.address() as AddressInfo).port
      close = async () => {
        await new Promise<void>((r) => server.close(() => r()))
        await ref.close()
      }
    })
    afterAll(async () => {
      await close?.()
      await s3?.close()
      await rm(dataDir, { recursive: true, force: true })
    })

    it('logs one line at info, no error and no stack, and keeps what arrived for the resume', async () => {
      const token = await sign('5')
      const base = `http://127.0.0.1:${port}/api/storage/attach/tus`
      const created = await fetch(base, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${token}`,
          'tus-resumable': '1.0.0',
          'upload-length': String(4 * 1024 * 1024),
          'upload-metadata': `filename ${Buffer.from('cut.bin').toString('base64')},refDomain ${Buffer.from('demo').toString('base64')}`,
        },
      })
      expect(created.status).toBe(201)
      const path = new URL(created.headers.get('location')!, base).pathname
      lines.length = 0
      await cutPatch(port, path, token, 4 * 1024 * 1024, 2 * 1024 * 1024)
      const head = await fetch(`http://127.0.0.1:${port}${path}`, {
        method: 'HEAD',
        headers: { authorization: `Bearer ${token}`, 'tus-resumable': '1.0.0' },
      })
      expect(head.status).toBe(200)
      expect(Number(head.headers.get('upload-offset'))).toBeLessThan(4 * 1024 * 1024)
      expect(lines.filter((l) => l.level !== 'info')).toEqual([])
      expect(lines.filter((l) => l.stack)).toEqual([])
      const cut = lines.filter((l) => l.text.includes(path.split('/').pop()!))
      expect(cut).toHaveLength(1)
      expect(cut[0]!.text).not.toContain('\n')
    })
  })
}
