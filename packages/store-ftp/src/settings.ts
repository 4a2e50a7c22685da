import type { ConnectionOptions } from 'node:tls'
import { defineStoreSettings, setting } from 'attach-storage/store-kit'

/**
 * Options of {@link FtpStore}: the settings of `attach.stores.<name>` with `type: ftp` (kebab-case in
 * a configuration file, camelCase here).
 *
 * @example
 * // attach.yaml
 * // stores: { remote: { type: ftp, host: ftp.example.com, user: attach, secure: true, root: /srv/attach } }
 * new FtpStore('remote', {
 *   host: 'ftp.example.com',
 *   user: 'attach',
 *   password: process.env.FTP_PASSWORD,
 *   secure: true,
 *   root: '/srv/attach',
 * })
 */
export interface FtpStoreOptions {
  /** Host name or IP address of the FTP server. Required. */
  host: string
  /**
   * TCP port of the control connection.
   * @default 21 (990 when `secure` is `'implicit'`)
   */
  port?: number | string
  /**
   * Login name.
   * @default 'anonymous'
   */
  user?: string
  /**
   * Login password. Never written to an error message or a log.
   * @default 'guest' (the anonymous convention)
   */
  password?: string
  /**
   * FTPS: `true` (or `'explicit'`) upgrades the control connection with `AUTH TLS` and protects every data
   * connection (`PROT P`); `'implicit'` speaks TLS from the first byte (legacy, usually port 990);
   * `false` is plain FTP, which sends the password in clear text.
   * @default false
   */
  secure?: boolean | 'implicit' | 'explicit' | 'true' | 'false'
  /**
   * TLS options of `tls.connect()` for FTPS, e.g. `{ ca: pem }` to trust a private CA, or
   * `{ rejectUnauthorized: false }` for a self-signed test server (never in production).
   */
  secureOptions?: ConnectionOptions
  /**
   * Directory on the server under which every key lives (`root` + `/` + key). Relative paths (and the
   * default) are taken from the login directory, found once with `PWD`. Created on the first write.
   * @default the login directory
   */
  root?: string
  /**
   * Number of control connections kept open. FTP carries one transfer per control connection, so this
   * bounds the concurrent operations of this store; the others wait for a free connection. At least 2:
   * `copy` reads over one connection while it writes over another.
   * @default 4
   */
  poolSize?: number | string
  /**
   * How long the server may stay silent (connecting, answering a command, or during a transfer while we
   * are ready for data) before the connection is dropped and the operation fails. A number of seconds
   * or a duration string (`"30s"`, `"500ms"`); `0` disables it.
   * @default "30s"
   */
  timeout?: number | string
  /**
   * How long an unused pooled connection stays open; then it is closed (and a new one opened when
   * needed), so that servers' idle limits (often 60 to 300 s) never hit a connection we are about to
   * use. A number of seconds or a duration string; `0` keeps idle connections open.
   * @default "30s"
   */
  idleTimeout?: number | string
}

/** The validated settings. */
export interface FtpSettings {
  host: string
  port: number
  user: string
  password: string
  secure: boolean | 'implicit'
  secureOptions: ConnectionOptions
  /** `undefined`: the login directory. Otherwise normalized, without a trailing `/` (the root is `''`). */
  root: string | undefined
  poolSize: number
  /** Milliseconds; 0: none. */
  timeout: number
  /** Milliseconds. */
  idleTimeout: number
}

// biome-ignore lint/suspicious/noControlCharactersInRegex: CR, LF and NUL would break an FTP command line
const text = (x: unknown): x is string => typeof x === 'string' && !/[\r\n\u0000]/.test(x)

/** The settings of a store of type `ftp`. */
export const ftpSettings = defineStoreSettings({
  type: 'ftp',
  required: ['host'],
  secrets: ['password'],
  entries: {
    host: setting.check(
      (x): x is string => typeof x === 'string' && !/[\s/\\@]/.test(x.trim()),
      'must be a bare host name or address (no scheme, path, user or spaces)',
    ),
    port: setting.integer(1, 65535, undefined),
    user: setting.check(text, 'must be a string without line breaks or NUL'),
    password: setting.check(text, 'must be a string without line breaks or NUL'),
    secure: setting.check(
      (x): x is boolean | 'true' | 'false' | 'implicit' | 'explicit' =>
        typeof x === 'boolean' || x === 'true' || x === 'false' || x === 'implicit' || x === 'explicit',
      'must be true, false or "implicit"',
    ),
    secureOptions: setting.check(
      (x): x is ConnectionOptions => typeof x === 'object' && x !== null && !Array.isArray(x),
      'must be an object (tls.connect options)',
    ),
    root: setting.check(
      // biome-ignore lint/suspicious/noControlCharactersInRegex: an FTP path must not hold control characters
      (x): x is string => typeof x === 'string' && !/[\u0000-\u001f\u007f]/.test(x) && !x.split('/').some((segment) => segment === '..'),
      'must be a directory path without control characters and without ".." segments',
    ),
    poolSize: setting.integer(2, 64, 4),
    timeout: setting.duration(30_000),
    idleTimeout: setting.duration(30_000),
  },
  hints: {
    username: 'user',
    pass: 'password',
    hostname: 'host',
    basePath: 'root',
    baseDir: 'root',
    prefix: 'root',
    tls: 'secure',
    ftps: 'secure',
    pool: 'poolSize',
    connections: 'poolSize',
  },
})

/** Validates the settings of an FTP store; throws `config-invalid` naming every problem. */
export function parseFtpSettings(name: string, input: Record<string, unknown> | FtpStoreOptions): FtpSettings {
  const s = ftpSettings.parse(name, input ?? {})
  const secure = s.secure === 'implicit' ? 'implicit' : s.secure === true || s.secure === 'true' || s.secure === 'explicit'
  return {
    host: s.host!.trim(),
    port: s.port ?? (secure === 'implicit' ? 990 : 21),
    user: s.user ?? 'anonymous',
    password: s.password ?? 'guest',
    secure,
    secureOptions: { ...s.secureOptions },
    root: s.root === undefined ? undefined : normalizeRoot(s.root),
    poolSize: s.poolSize,
    timeout: s.timeout,
    idleTimeout: s.idleTimeout,
  }
}

/**
 * `/a//b/` → `/a/b`; `/` → `''` (the server's root directory); `a/./b/` → `a/b` (relative to the login
 * directory); `.` → undefined (the login directory itself).
 */
function normalizeRoot(root: string): string | undefined {
  const parts = root.split('/').filter((p) => p !== '' && p !== '.')
  if (root.startsWith('/')) return parts.length > 0 ? `/${parts.join('/')}` : ''
  return parts.length > 0 ? parts.join('/') : undefined
}
