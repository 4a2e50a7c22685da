import type { ConnectionOptions } from 'node:tls'
import { AttachStorageError, parseDuration } from 'attach-storage'

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

const KNOWN = new Set([
  // Read by the core, not by the store.
  'type',
  'cdnUrl',
  'host',
  'port',
  'user',
  'password',
  'secure',
  'secureOptions',
  'root',
  'poolSize',
  'timeout',
  'idleTimeout',
])

const HINTS: Record<string, string> = {
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
}

/** Validates the settings of an FTP store; throws `config-invalid` naming every problem. */
export function parseFtpSettings(name: string, input: Record<string, unknown> | FtpStoreOptions): FtpSettings {
  const settings = (input ?? {}) as Record<string, unknown>
  const problems: string[] = []
  const where = `attach.stores.${name}`

  for (const key of Object.keys(settings)) {
    if (KNOWN.has(key)) continue
    const hint = HINTS[key]
    problems.push(`unknown setting "${key}"${hint ? ` (did you mean "${hint}"?)` : ''}`)
  }

  const host = settings.host
  if (typeof host !== 'string' || host.trim() === '') {
    problems.push('"host" is required (the FTP server\'s name or address)')
  } else if (/[\s/\\@]/.test(host.trim())) {
    problems.push('"host" must be a bare host name or address (no scheme, path, user or spaces)')
  }

  let secure: boolean | 'implicit' = false
  const s = settings.secure
  if (s === undefined || s === false || s === 'false') secure = false
  else if (s === true || s === 'true' || s === 'explicit') secure = true
  else if (s === 'implicit') secure = 'implicit'
  else problems.push('"secure" must be true, false or "implicit"')

  const port = integer(settings.port, 'port', 1, 65535, secure === 'implicit' ? 990 : 21, problems)
  const poolSize = integer(settings.poolSize, 'poolSize', 2, 64, 4, problems)

  const user = optionalString(settings.user, 'user', problems) ?? 'anonymous'
  const password = optionalString(settings.password, 'password', problems) ?? 'guest'

  let secureOptions: ConnectionOptions = {}
  const so = settings.secureOptions
  if (so !== undefined && so !== null) {
    if (typeof so !== 'object' || Array.isArray(so)) {
      problems.push('"secureOptions" must be an object (tls.connect options)')
    }
    else secureOptions = { ...(so as ConnectionOptions) }
  }

  let root: string | undefined
  const r = settings.root
  if (r !== undefined && r !== null && r !== '') {
    if (typeof r !== 'string') problems.push('"root" must be a string')
    else if (/[\u0000-\u001f\u007f]/.test(r)) problems.push('"root" must not hold control characters')
    else if (r.split('/').some((segment) => segment === '..')) problems.push('"root" must not hold ".." segments')
    else root = normalizeRoot(r)
  }

  const timeout = duration(settings.timeout, 'timeout', 30_000, problems)
  const idleTimeout = duration(settings.idleTimeout, 'idleTimeout', 30_000, problems)

  if (problems.length > 0) {
    throw new AttachStorageError('config-invalid', `FTP store settings ${where} are invalid: ${problems.join('; ')}`, {
      status: 500,
    })
  }
  return {
    host: (host as string).trim(),
    port,
    user,
    password,
    secure,
    secureOptions,
    root,
    poolSize,
    timeout,
    idleTimeout,
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

function integer(
  value: unknown,
  key: string,
  min: number,
  max: number,
  fallback: number,
  problems: string[],
): number {
  if (value === undefined || value === null || value === '') return fallback
  const n = typeof value === 'string' && /^\s*\d+\s*$/.test(value) ? Number(value) : value
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) {
    problems.push(`"${key}" must be an integer from ${min} to ${max}`)
    return fallback
  }
  return n
}

function optionalString(value: unknown, key: string, problems: string[]): string | undefined {
  if (value === undefined || value === null) return undefined
  if (typeof value !== 'string') {
    problems.push(`"${key}" must be a string`)
    return undefined
  }
  if (/[\r\n\u0000]/.test(value)) {
    problems.push(`"${key}" must not hold line breaks or NUL`)
    return undefined
  }
  return value
}

function duration(value: unknown, key: string, fallback: number, problems: string[]): number {
  if (value === undefined || value === null || value === '') return fallback
  const ms = parseDuration(value)
  if (ms === undefined) {
    problems.push(`"${key}" must be a number of seconds or a duration such as "30s" or "500ms"`)
    return fallback
  }
  return ms
}
