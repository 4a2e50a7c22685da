/**
 * The reference server's health answers on real dependencies: an S3 store (s3rver) and a PostgreSQL
 * database, each reached through a TCP relay the test takes down and brings back on the same port.
 */
import { mkdtemp, rm, writeFile } from 'node:fs/promises'
import { connect, createServer, type Server, type Socket } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startS3rver, type TestS3Server } from '../../../packages/store-s3/src/test-server.js'
import { pgDatabase, type Running, start } from './helpers.js'

/** A TCP relay on a fixed port of 127.0.0.1 to `target`, which can be taken down (connections cut, port closed) and brought back. */
async function relay(target: { host: string; port: number }) {
  const sockets = new Set<Socket>()
  let server: Server | undefined
  let port = 0
  const up = async () => {
    server = createServer((client) => {
      const upstream = connect(target.port, target.host)
      sockets.add(client).add(upstream)
      client.pipe(upstream).pipe(client)
      const drop = () => {
        client.destroy()
        upstream.destroy()
        sockets.delete(client)
        sockets.delete(upstream)
      }
      client.on('error', drop).on('close', drop)
      upstream.on('error', drop).on('close', drop)
    })
    await new Promise<void>((r) => server!.listen(port, '127.0.0.1', () => r()))
    port = (server.address() as { port: number }).port
  }
  const down = async () => {
    for (const s of sockets) s.destroy()
    sockets.clear()
    await new Promise<void>((r) => (server ? server.close(() => r()) : r()))
    server = undefined
  }
  await up()
  return { port: () => port, up, down }
}

/** Waits out the readiness answer the server reuses for a second (READINESS_MAX_AGE_MS), so the next /readyz asks again. */
const fresh = () => new Promise((r) => setTimeout(r, 1100))

const status = async (base: string, path: string) => {
  const res = await fetch(base + path)
  return [res.status, (await res.json()) as Record<string, any>] as const
}

describe('GET /healthz and /readyz of the reference server', () => {
  let s3: TestS3Server
  let s3Relay: Awaited<ReturnType<typeof relay>>
  let pgRelay: Awaited<ReturnType<typeof relay>>
  let pg: Awaited<ReturnType<typeof pgDatabase>>
  let srv: Running
  let dir: string
  beforeAll(async () => {
    s3 = await startS3rver('attach-health')
    s3Relay = await relay({ host: '127.0.0.1', port: s3.port })
    pg = await pgDatabase()
    const pgUrl = new URL(pg.url)
    pgRelay = await relay({ host: pgUrl.hostname, port: Number(pgUrl.port) })
    pgUrl.hostname = '127.0.0.1'
    pgUrl.port = String(pgRelay.port())
    dir = await mkdtemp(join(tmpdir(), 'attach-health-'))
    const config = join(dir, 'attach.json')
    await writeFile(
      config,
      JSON.stringify({
        attach: {
          stores: {
            cloud: {
              ...s3.fileSettings(`http://127.0.0.1:${s3Relay.port()}`),
              'max-attempts': 1,
              'connect-timeout': '500ms',
            },
          },
          'default-store': 'cloud',
        },
      }),
    )
    srv = await start({ ATTACH_CONFIG: config, ATTACH_DATABASE_URL: pgUrl.toString() })
  })
  afterAll(async () => {
    await srv?.close()
    await s3Relay?.down()
    await pgRelay?.down()
    await s3?.close()
    await pg?.drop()
    await rm(dir, { recursive: true, force: true })
  })

  it('answers without authentication: healthz 200, readyz 200 with every dependency', async () => {
    expect(await status(srv.base, '/healthz')).toEqual([200, { status: 'ok' }])
    const [code, body] = await status(srv.base, '/readyz')
    expect([code, body.status, body.database.ok, body.stores.cloud.ok]).toEqual([200, 'ready', true, true])
    expect(Object.values(body.stores).every((s) => (s as { ok: boolean }).ok)).toBe(true)
  })

  it('readyz answers 503 while the S3 store is down and 200 after; healthz stays 200', async () => {
    await s3Relay.down()
    await fresh()
    const [code, body] = await status(srv.base, '/readyz')
    expect([code, body.status, body.stores.cloud.ok, body.database.ok]).toEqual([503, 'not-ready', false, true])
    expect(body.stores.cloud.error).toBeTruthy()
    expect(JSON.stringify(body)).not.toContain('S3RVER')
    expect((await status(srv.base, '/healthz'))[0]).toBe(200)
    await s3Relay.up()
    await fresh()
    expect((await status(srv.base, '/readyz'))[0]).toBe(200)
  })

  it('readyz answers 503 while the database is down and 200 after', async () => {
    await pgRelay.down()
    await fresh()
    const [code, body] = await status(srv.base, '/readyz')
    expect([code, body.database.ok, body.stores.cloud.ok]).toEqual([503, false, true])
    await pgRelay.up()
    await fresh()
    // The pool opens a new connection on the next query.
    let last = 0
    for (let i = 0; i < 20 && last !== 200; i++) {
      last = (await status(srv.base, '/readyz'))[0]
      if (last !== 200) await new Promise((r) => setTimeout(r, 100))
    }
    expect(last).toBe(200)
  })
})

describe('the reference server without ffmpeg and poppler', () => {
  let srv: Running
  let dir: string
  const logged: string[] = []
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'attach-no-tools-'))
    const config = join(dir, 'attach.json')
    // Tool paths that do not exist stand for a machine without the packages.
    const missing = Object.fromEntries(['pdftoppm', 'pdfinfo', 'ffmpeg', 'ffprobe'].map((t) => [t, join(dir, 'bin', t)]))
    await writeFile(config, JSON.stringify({ attach: { previews: missing } }))
    srv = await start({ ATTACH_CONFIG: config }, logged)
  })
  afterAll(async () => {
    await srv?.close()
    await rm(dir, { recursive: true, force: true })
  })

  it('starts with one warning, is ready, and says in /readyz which previews are off and why', async () => {
    expect(logged.filter((l) => l.includes('not found'))).toHaveLength(1)
    expect(logged.find((l) => l.includes('not found'))).toMatch(
      /pdfinfo, pdftoppm, ffprobe, ffmpeg not found: previews and media of pdf, video, audio files are off/,
    )
    const [code, body] = await status(srv.base, '/readyz')
    expect([code, body.status]).toEqual([200, 'ready'])
    expect(body.previews).toEqual({
      pdf: 'off: pdfinfo and pdftoppm not found',
      video: 'off: ffprobe and ffmpeg not found',
      audio: 'off: ffprobe not found',
    })
  })
})
