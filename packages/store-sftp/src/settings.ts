import { readFileSync } from 'node:fs'
import { userInfo } from 'node:os'
import { posix } from 'node:path'
import { AttachStorageError, parseDuration } from 'attach-storage'
import { parseKey, type ParsedKey } from './sftp-client.js'

/**
 * Options of {@link SftpStore}: the settings of `attach.stores.<name>` with `type: sftp`, in camelCase
 * (`private-key` in a configuration file is `privateKey` here).
 */
export interface SftpStoreOptions {
  /** Host name or address of the SFTP server. Required. */
  host: string
  /** TCP port. @default 22 */
  port?: number | string
  /** Login name. @default the name of the user running the process */
  username?: string
  /** Password, for password authentication. */
  password?: string
  /**
   * Private key for public-key authentication: the key text (OpenSSH, PEM or PuTTY format) or the path
   * of a file holding it. Read and parsed once, when the store is created.
   */
  privateKey?: string | Uint8Array
  /** Passphrase of an encrypted {@link privateKey}. */
  passphrase?: string
  /**
   * Base directory on the server; every key is resolved under it. A relative path is relative to the
   * login directory. Created on the first write when missing.
   * @default '' (the login directory)
   */
  root?: string
  /**
   * SHA-256 fingerprint(s) of the server's host key, as `ssh-keygen -l -E sha256 -f key.pub` prints them
   * (`SHA256:47DEQpj8…`), or as 64 hex digits. A connection to a server with another key is refused.
   * Absent: any host key is accepted (no protection against a man in the middle).
   */
  hostHash?: string | string[]
  /**
   * Most connections kept open at once. Connections are opened on first use, reused, shared by
   * concurrent operations (SFTP multiplexes requests), and replaced when they break.
   * @default 4
   */
  poolSize?: number | string
  /** Time allowed to connect and authenticate: seconds, or a duration such as `"10s"`. @default 10s */
  connectTimeout?: number | string
  /**
   * Time allowed for any single SFTP request (one read, one write, a stat…): seconds or a duration.
   * A request without an answer by then drops its connection, failing the operations on it. `0` waits
   * forever. @default 30s
   */
  timeout?: number | string
  /** SSH keep-alive interval: seconds or a duration; `0` turns keep-alives off. @default 10s */
  keepaliveInterval?: number | string
  /**
   * Let the server copy (`copy-data` extension, OpenSSH 9.0+) instead of streaming the bytes through
   * this process. Used only when the server offers it. @default true
   */
  serverCopy?: boolean | string
}

/** The validated settings of one store. */
export interface ResolvedSettings {
  host: string
  port: number
  username: string
  auth: AuthSecrets
  root: string
  hostHashes: Buffer[] | undefined
  poolSize: number
  connectTimeout: number
  timeout: number
  keepaliveInterval: number
  serverCopy: boolean
}

/** The secrets, kept apart so that they can be scrubbed from messages. */
export interface AuthSecrets {
  password: string | undefined
  key: ParsedKey | undefined
  /** Every secret string (password, passphrase, key text) for {@link scrub}. */
  secrets: string[]
}

/** Settings the core reads itself and every store may carry. */
const CORE_KEYS = new Set(['type', 'cdnUrl'])
const KNOWN_KEYS = new Set([
  'host',
  'port',
  'username',
  'password',
  'privateKey',
  'passphrase',
  'root',
  'hostHash',
  'poolSize',
  'connectTimeout',
  'timeout',
  'keepaliveInterval',
  'serverCopy',
])

const kebab = (key: string): string => key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`)

/**
 * Checks the settings of an SFTP store and applies the defaults. Throws `config-invalid` naming the
 * store and the setting; a message never quotes a password, passphrase or key.
 */
export function resolveSettings(name: string, settings: Record<string, unknown>): ResolvedSettings {
  const where = `attach.stores.${name} (type sftp)`
  const fail = (message: string, cause?: unknown): never => {
    throw new AttachStorageError('config-invalid', `${where}: ${message}`, { status: 500, cause })
  }
  if (settings === null || typeof settings !== 'object') fail('settings must be an object')

  const unknown = Object.keys(settings).filter((k) => !KNOWN_KEYS.has(k) && !CORE_KEYS.has(k))
  if (unknown.length) {
    fail(
      `unknown settings: ${unknown.map(kebab).join(', ')} (known: ${[...KNOWN_KEYS].map(kebab).join(', ')})`,
    )
  }

  const text = (key: string): string | undefined => {
    const value = settings[key]
    if (value === undefined || value === null) return undefined
    if (typeof value !== 'string') fail(`${kebab(key)} must be a string`)
    return value as string
  }

  const host = text('host')
  if (host === undefined || host.trim() === '') fail('host is required')

  const port = integer(settings.port, 22, 1, 65535) ?? fail(`port must be an integer from 1 to 65535`)
  const poolSize = integer(settings.poolSize, 4, 1, 64) ?? fail(`pool-size must be an integer from 1 to 64`)

  const duration = (key: string, fallback: number): number => {
    const value = settings[key]
    if (value === undefined || value === null) return fallback
    const ms = parseDuration(value)
    return ms ?? fail(`${kebab(key)} must be a number of seconds or a duration such as "30s"`)
  }
  const connectTimeout = duration('connectTimeout', 10_000)
  const timeout = duration('timeout', 30_000)
  const keepaliveInterval = duration('keepaliveInterval', 10_000)

  let serverCopy = true
  if (settings.serverCopy !== undefined && settings.serverCopy !== null) {
    const v = settings.serverCopy
    if (v === true || v === 'true') serverCopy = true
    else if (v === false || v === 'false') serverCopy = false
    else fail('server-copy must be true or false')
  }

  const username = text('username') ?? currentUser() ?? fail('username is required (the process user has no name)')
  if (username === '') fail('username must not be empty')

  const password = text('password')
  const passphrase = text('passphrase')
  const secrets = [password, passphrase].filter((s): s is string => typeof s === 'string' && s !== '')
  const key = readPrivateKey(settings.privateKey, passphrase, fail, secrets)
  if (password === undefined && key === undefined) fail('needs a password or a private-key to log in')

  const rootIn = text('root') ?? ''
  if (rootIn.includes('\u0000')) fail('root must not hold a NUL byte')
  let root = rootIn === '' ? '.' : posix.normalize(rootIn)
  if (root.length > 1 && root.endsWith('/')) root = root.slice(0, -1)

  const hostHashes = parseHostHashes(settings.hostHash, fail)

  return {
    host: host as string,
    port,
    username,
    auth: { password, key, secrets },
    root,
    hostHashes,
    poolSize,
    connectTimeout,
    timeout,
    keepaliveInterval,
    serverCopy,
  }
}

function currentUser(): string | undefined {
  try {
    return userInfo().username
  } catch {
    return undefined
  }
}

function integer(value: unknown, fallback: number, min: number, max: number): number | undefined {
  if (value === undefined || value === null || value === '') return fallback
  const n = typeof value === 'string' && /^\s*\d+\s*$/.test(value) ? Number(value) : value
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) return undefined
  return n
}

/** Key text is recognised by its armour; anything else is a file path. */
const KEY_TEXT = /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----|^PuTTY-User-Key-File-/m

function readPrivateKey(
  value: unknown,
  passphrase: string | undefined,
  fail: (message: string, cause?: unknown) => never,
  secrets: string[],
): ParsedKey | undefined {
  if (value === undefined || value === null || value === '') return undefined
  let data: string | Buffer
  if (value instanceof Uint8Array) {
    data = Buffer.from(value)
    secrets.push(data.toString('utf8').trim())
  } else if (typeof value === 'string') {
    if (KEY_TEXT.test(value)) {
      data = value
      secrets.push(value.trim())
    } else {
      try {
        data = readFileSync(value)
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? 'error'
        return fail(`private-key file ${JSON.stringify(value)} cannot be read (${code})`)
      }
      secrets.push(data.toString('utf8').trim())
    }
  } else {
    return fail('private-key must be the key text or the path of a key file')
  }
  let parsed: ParsedKey | ParsedKey[] | Error
  try {
    parsed = parseKey(data, passphrase)
  } catch {
    parsed = new Error('unreadable key')
  }
  if (parsed instanceof Error) {
    // The parser's messages ("Bad passphrase", "Unsupported key format", …) never quote the key.
    const hint = passphrase === undefined ? ' (is it encrypted? then set passphrase)' : ' (wrong passphrase?)'
    return fail(`private-key cannot be parsed: ${parsed.message}${hint}`)
  }
  const key = Array.isArray(parsed) ? parsed[0] : parsed
  if (key === undefined || !key.isPrivateKey()) return fail('private-key holds no private key')
  return key
}

function parseHostHashes(value: unknown, fail: (message: string) => never): Buffer[] | undefined {
  if (value === undefined || value === null || value === '') return undefined
  const list = Array.isArray(value) ? value : [value]
  if (list.length === 0) return undefined
  return list.map((item) => {
    const digest = typeof item === 'string' ? parseFingerprint(item) : undefined
    return (
      digest ??
      fail(
        `host-hash must be a SHA-256 host key fingerprint ("SHA256:" and 43 base64 characters, as ssh-keygen -l prints it, or 64 hex digits); got ${JSON.stringify(item)}`,
      )
    )
  })
}

/** The 32 digest bytes of a fingerprint written `SHA256:<base64>`, `<base64>` or hex (colons allowed). */
export function parseFingerprint(text: string): Buffer | undefined {
  const s = text.trim()
  const hex = s.replace(/:/g, '')
  if (/^[0-9a-fA-F]{64}$/.test(hex)) return Buffer.from(hex, 'hex')
  const b64 = s.replace(/^SHA256:/i, '')
  if (!/^[A-Za-z0-9+/]{43}=?$/.test(b64)) return undefined
  const bytes = Buffer.from(b64, 'base64')
  return bytes.length === 32 ? bytes : undefined
}

/** A fingerprint as OpenSSH prints it. */
export const formatFingerprint = (digest: Buffer): string => `SHA256:${digest.toString('base64').replace(/=+$/, '')}`

/** `text` with every secret replaced by `***`. */
export function scrub(text: string, secrets: readonly string[]): string {
  let out = text
  for (const secret of secrets) {
    if (secret.length >= 3) out = out.split(secret).join('***')
  }
  return out
}
