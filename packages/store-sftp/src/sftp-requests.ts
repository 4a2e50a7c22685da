/**
 * The SFTP requests the store sends on a pooled {@link Connection}, one helper each, and the readings
 * of their failures (status codes, unsupported extensions).
 * @module
 */
import type { Connection } from './pool.js'
import { SFTP_STATUS, type SftpAttributes, type SftpStatusError } from './sftp-client.js'

/** Bytes per `copy-data` request, so that each stays well within the request timeout. */
const COPY_SLICE = 64 * 1024 * 1024

const statusOf = (err: unknown): number | string | undefined => (err as SftpStatusError | null)?.code
export const isNoSuchFile = (err: unknown): boolean => statusOf(err) === SFTP_STATUS.NO_SUCH_FILE
const isUnsupported = (err: unknown): boolean => err instanceof Error && /does not support this extended request/.test(err.message)

export function noop(): void {}

/** The error's message, with the SFTP status code when it has one. */
export function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err)
  const code = statusOf(err)
  return typeof code === 'number' ? `${err.message} (SFTP status ${code})` : err.message
}

export async function lstat(conn: Connection, path: string): Promise<SftpAttributes | undefined> {
  try {
    return await conn.request<SftpAttributes>((cb) => conn.sftp.lstat(path, cb))
  } catch (err) {
    if (isNoSuchFile(err)) return undefined
    throw err
  }
}

export function open(conn: Connection, path: string, flags: 'r' | 'wx'): Promise<Buffer> {
  return conn.request<Buffer>((cb) => conn.sftp.open(path, flags, cb))
}

export function closeQuietly(conn: Connection, handle: Buffer): void {
  if (!conn.broken) conn.request((cb) => conn.sftp.close(handle, cb)).catch(noop)
}

/** `fsync@openssh.com` where the server offers it; a server without it gives no such guarantee. */
export async function fsync(conn: Connection, handle: Buffer): Promise<void> {
  try {
    await conn.request((cb) => conn.sftp.ext_openssh_fsync(handle, cb))
  } catch (err) {
    if (!isUnsupported(err) && statusOf(err) !== SFTP_STATUS.OP_UNSUPPORTED) throw err
  }
}

/**
 * Renames with `posix-rename@openssh.com` (what ssh2-sftp-client's `posixRename` sends), which replaces
 * the target atomically. Servers without the extension get a plain SFTP rename, which refuses an
 * existing target on most servers: the target is then removed first (not atomic there).
 */
export async function posixRename(conn: Connection, from: string, to: string): Promise<void> {
  try {
    await conn.request((cb) => conn.sftp.ext_openssh_rename(from, to, cb))
    return
  } catch (err) {
    if (!isUnsupported(err)) throw err
  }
  try {
    await conn.request((cb) => conn.sftp.rename(from, to, cb))
  } catch (err) {
    if (isNoSuchFile(err)) throw err
    await conn.request((cb) => conn.sftp.unlink(to, cb)).catch(noop)
    await conn.request((cb) => conn.sftp.rename(from, to, cb))
  }
}

/** Server-side copy with `copy-data`; false when the server does not offer it. */
export async function serverCopy(conn: Connection, source: Buffer, target: Buffer, size: number): Promise<boolean> {
  for (let offset = 0; offset < size || offset === 0; offset += COPY_SLICE) {
    const length = Math.min(COPY_SLICE, size - offset)
    if (length === 0) break
    try {
      await conn.request((cb) => conn.sftp.ext_copy_data(source, offset, length, target, offset, cb))
    } catch (err) {
      if (offset === 0 && (isUnsupported(err) || statusOf(err) === SFTP_STATUS.OP_UNSUPPORTED)) return false
      throw err
    }
  }
  return true
}
