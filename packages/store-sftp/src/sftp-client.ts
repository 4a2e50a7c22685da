/**
 * The one module that loads `ssh2-sftp-client` and the `ssh2` release it depends on (both CommonJS,
 * loaded with `require`). ssh2's types come from `@types/ssh2`; ssh2-sftp-client ships none, so the
 * few members of its class the store touches are typed here, in terms of ssh2's.
 * @module
 */
import { createRequire } from 'node:module'
import type {
  Attributes,
  Client,
  ConnectConfig,
  FileEntry,
  ParsedKey,
  PasswordAuthMethod,
  PublicKeyAuthMethod,
  SFTPWrapper,
  utils,
} from 'ssh2'

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
export type SftpAttributes = Attributes

/** One entry of `readdir`. */
export type SftpDirEntry = FileEntry

/** An error of an SFTP request: `code` is the numeric SFTP status. */
export interface SftpStatusError extends Error {
  code?: number | string
}

/** The SFTP channel of one SSH connection (ssh2's `SFTP` class, client side). */
export type SftpChannel = SFTPWrapper

/** ssh2's `Client`. */
export type SshConnection = Client

/** One authentication method of ssh2's `authHandler` array. */
export type AuthMethod = PasswordAuthMethod | PublicKeyAuthMethod

export type { ParsedKey }

/** The connect options the store passes (ssh2's `ConnectConfig`). */
export type ConnectOptions = ConnectConfig & { authHandler: AuthMethod[] }

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
export const parseKey: typeof utils.parseKey = (() => {
  const requireFromClient = createRequire(requireHere.resolve('ssh2-sftp-client'))
  const ssh2 = requireFromClient('ssh2') as { utils: typeof utils }
  return ssh2.utils.parseKey
})()

/** POSIX file type bits of `mode`. */
const S_IFMT = 0o170000
const S_IFREG = 0o100000
const S_IFDIR = 0o040000

export const isRegularFile = (attrs: SftpAttributes): boolean => (attrs.mode & S_IFMT) === S_IFREG
export const isDirectory = (attrs: SftpAttributes): boolean => (attrs.mode & S_IFMT) === S_IFDIR
