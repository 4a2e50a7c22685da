/**
 * The parts of `ssh2-sftp-client` (and of the `ssh2` release it depends on) that the store uses, typed
 * here because neither package ships type declarations. Both are CommonJS and loaded with `require`.
 * @module
 */
import type { EventEmitter } from 'node:events'
import { createRequire } from 'node:module'

/** SFTP status codes (draft-ietf-secsh-filexfer-02, section 7) that the store tells apart. */
export const SFTP_STATUS = {
  EOF: 1,
  NO_SUCH_FILE: 2,
  PERMISSION_DENIED: 3,
  FAILURE: 4,
  BAD_MESSAGE: 5,
  NO_CONNECTION: 6,
  CONNECTION_LOST: 7,
  OP_UNSUPPORTED: 8,
} as const

/** File attributes as ssh2 reports them (times in seconds since the epoch). */
export interface SftpAttributes {
  mode: number
  size: number
  uid: number
  gid: number
  atime: number
  mtime: number
}

/** One entry of `readdir`. */
export interface SftpDirEntry {
  filename: string
  longname: string
  attrs: SftpAttributes
}

/** An error of an SFTP request: `code` is the numeric SFTP status. */
export interface SftpStatusError extends Error {
  code?: number | string
}

type Callback<T = void> = (err: SftpStatusError | null | undefined, value: T) => void

/** The SFTP channel of one SSH connection (ssh2's `SFTP` class, client side). */
export interface SftpChannel extends EventEmitter {
  open(path: string, flags: string, callback: Callback<Buffer>): void
  close(handle: Buffer, callback: Callback): void
  read(
    handle: Buffer,
    buffer: Buffer,
    offset: number,
    length: number,
    position: number,
    callback: (err: SftpStatusError | null | undefined, bytesRead: number) => void,
  ): void
  write(handle: Buffer, buffer: Buffer, offset: number, length: number, position: number, callback: Callback): void
  fstat(handle: Buffer, callback: Callback<SftpAttributes>): void
  lstat(path: string, callback: Callback<SftpAttributes>): void
  readdir(path: string, callback: Callback<SftpDirEntry[]>): void
  mkdir(path: string, callback: Callback): void
  rmdir(path: string, callback: Callback): void
  unlink(path: string, callback: Callback): void
  rename(from: string, to: string, callback: Callback): void
  /** `posix-rename@openssh.com`; throws synchronously when the server lacks the extension. */
  ext_openssh_rename(from: string, to: string, callback: Callback): void
  /** `fsync@openssh.com`; throws synchronously when the server lacks the extension. */
  ext_openssh_fsync(handle: Buffer, callback: Callback): void
  /** `copy-data` (OpenSSH 9.0+); `length` 0 copies up to the end. Throws when unsupported. */
  ext_copy_data(
    source: Buffer,
    sourceOffset: number,
    length: number,
    target: Buffer,
    targetOffset: number,
    callback: Callback,
  ): void
}

/** ssh2's `Client`, as far as the store touches it. */
export interface SshConnection extends EventEmitter {
  end(): void
  destroy(): void
}

/** A private key parsed by ssh2 (`utils.parseKey`). */
export interface ParsedKey {
  type: string
  isPrivateKey(): boolean
}

/** One authentication method of ssh2's `authHandler` array. */
export type AuthMethod =
  | { type: 'password'; username: string; password: string }
  | { type: 'publickey'; username: string; key: ParsedKey }

/** The connect options the store passes (ssh2's `ConnectConfig`). */
export interface ConnectOptions {
  host: string
  port: number
  username: string
  authHandler: AuthMethod[]
  readyTimeout: number
  keepaliveInterval: number
  keepaliveCountMax: number
  hostVerifier: (key: Buffer) => boolean
}

/** ssh2-sftp-client's `SftpClient`. */
export interface SftpClientInstance {
  /** The ssh2 connection. */
  readonly client: SshConnection
  /** The SFTP channel, once `connect()` resolved; `undefined` after the connection ended. */
  sftp: SftpChannel | undefined
  connect(options: ConnectOptions): Promise<SftpChannel>
  end(): Promise<boolean>
}

export type SftpClientConstructor = new (
  clientName: string,
  callbacks: { error: (err: Error) => void; end: () => void; close: () => void },
) => SftpClientInstance

const requireHere = createRequire(import.meta.url)

/** `ssh2-sftp-client`'s class. */
export const SftpClient = requireHere('ssh2-sftp-client') as SftpClientConstructor

/**
 * ssh2's key parser, from the very `ssh2` that ssh2-sftp-client depends on (resolved from its own
 * location, not from wherever a hoisted copy happens to be).
 */
export const parseKey: (data: string | Buffer, passphrase?: string) => ParsedKey | ParsedKey[] | Error = (() => {
  const requireFromClient = createRequire(requireHere.resolve('ssh2-sftp-client'))
  const ssh2 = requireFromClient('ssh2') as { utils: { parseKey: typeof parseKey } }
  return ssh2.utils.parseKey
})()

/** POSIX file type bits of `mode`. */
const S_IFMT = 0o170000
const S_IFREG = 0o100000
const S_IFDIR = 0o040000

export const isRegularFile = (attrs: SftpAttributes): boolean => (attrs.mode & S_IFMT) === S_IFREG
export const isDirectory = (attrs: SftpAttributes): boolean => (attrs.mode & S_IFMT) === S_IFDIR
