/** The reference server of the contract (examples/hono-app) as a server under test, and its API. */
import { mkdtemp, rm } from 'node:fs/promises'
import { join } from 'node:path'
import { startServer, type Server } from './proc.js'
import { JWT_SECRET, jsonCall, token, uploadMultipart, type MultipartFile } from './http.js'

export interface Reference extends Server {
  dataDir: string
  bearer: string
  /** Temporary upload of files (fileMap parts) into demo/default; answers the temporary items. */
  tmpUpload(paths: Array<string | { path: string; name: string }>): Promise<Array<{ name: string; size: number; type: string }>>
  /** Temporary upload then confirmed save under demo/<refKey>/default; answers the saved records. */
  save(
    paths: Array<string | { path: string; name: string }>,
    refKey?: string,
  ): Promise<Array<{ id: number; fileType: string; fileSize: number; displayName: string }>>
}

let keys = 0

/**
 * Starts `examples/<app>/src/server.ts` (the Hono app by default; the contract gives the other adapters the
 * same environment) on a fresh data directory, removed on stop.
 */
export async function startReference(
  base: string,
  maxFileSize: number,
  app = 'hono-app',
  label = 'attach-storage',
  env: Record<string, string> = {},
  nodeArgs: string[] = [],
): Promise<Reference> {
  const dataDir = await mkdtemp(join(base, 'ref-'))
  let server: Server
  try {
    server = await startServer(
      label,
      `examples/${app}/src/server.ts`,
      {
        ATTACH_DATA_DIR: dataDir,
        ATTACH_JWT_SECRET: JWT_SECRET,
        ATTACH_MAX_FILE_SIZE: String(maxFileSize),
        ...env,
      },
      [],
      { profile: true, nodeArgs },
    )
  } catch (err) {
    await rm(dataDir, { recursive: true, force: true })
    throw err
  }
  const bearer = await token('1')
  const tmpUpload: Reference['tmpUpload'] = async (paths) => {
    const files: MultipartFile[] = paths.map((p) =>
      typeof p === 'string' ? { field: 'fileMap', path: p } : { field: 'fileMap', path: p.path, name: p.name },
    )
    const r = await uploadMultipart(`${server.base}/api/storage/attach/tmp`, { refDomain: 'demo', refCategory: 'default' }, files, {
      authorization: `Bearer ${bearer}`,
    })
    if (r.status !== 200) throw new Error(`temporary upload: ${r.status} ${r.body?.toString().slice(0, 500)}`)
    return JSON.parse(r.body!.toString()).files
  }
  return {
    ...server,
    dataDir,
    bearer,
    tmpUpload,
    async save(paths, refKey = `bench${++keys}`) {
      const items = await tmpUpload(paths)
      const names = paths.map((p) => (typeof p === 'string' ? p.split('/').pop()! : p.name))
      const body = { default: items.map((it, i) => ({ savedName: it.name, displayName: names[i] })) }
      const r = await jsonCall(`${server.base}/api/storage/attach/demo/${refKey}`, 'POST', body, bearer)
      return r.attachList
    },
    async stop() {
      await server.stop()
      await rm(dataDir, { recursive: true, force: true })
    },
  }
}
