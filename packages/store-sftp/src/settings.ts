import { readFileSync } from 'node:fs'
import { userInfo } from 'node:os'
import { posix } from 'node:path'
import { defineStoreSettings, redact, setting, settingsError } from 'attach-storage/store-kit'
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

/** The settings of a store of type `sftp`. */
export const sftpSettings = defineStoreSettings({
  type: 'sftp',
  required: ['host'],
  secrets: ['password', 'passphrase', 'privateKey'],
  entries: {
    host: setting.text(),
    port: setting.integer(1, 65535, 22),
    username: setting.text(),
    password: setting.text(),
    privateKey: setting.check(
      (x): x is string | Uint8Array => typeof x === 'string' || x instanceof Uint8Array,
      'must be the key text or the path of a key file',
    ),
    passphrase: setting.text(),
    root: setting.check((x): x is string => typeof x === 'string' && !x.includes('\u0000'), 'must be a path without NUL bytes'),
    hostHash: setting.check(
      (x): x is string | string[] => typeof x === 'string' || (Array.isArray(x) && x.every((h) => typeof h === 'string')),
      'must be a SHA-256 host key fingerprint, or a list of them',
    ),
    poolSize: setting.integer(1, 64, 4),
    connectTimeout: setting.duration(10_000),
    timeout: setting.duration(30_000),
    keepaliveInterval: setting.duration(10_000),
    serverCopy: setting.flag(true),
  },
})

/**
 * Checks the settings of an SFTP store and applies the defaults. Throws `config-invalid` naming the
 * store and the setting; a message never quotes a password, passphrase or key.
 */
export function resolveSettings(name: string, settings: Record<string, unknown>): ResolvedSettings {
  const s = sftpSettings.parse(name, settings)
  // The password, the passphrase and key text (never a key file's path, which messages name).
  const secrets = [s.password, s.passphrase].filter((x): x is string => typeof x === 'string' && x !== '')
  const fail = (key: string | undefined, message: string): never => {
    throw settingsError(name, key, message, secrets)
  }
  const username = s.username ?? currentUser() ?? fail('username', 'is required (the process user has no name)')
  const key = readPrivateKey(s.privateKey, s.passphrase, fail, secrets)
  if (s.password === undefined && key === undefined) fail(undefined, 'needs a password or a private-key to log in')

  let root = s.root === undefined ? '.' : posix.normalize(s.root)
  if (root.length > 1 && root.endsWith('/')) root = root.slice(0, -1)

  return {
    host: s.host!,
    port: s.port,
    username,
    auth: { password: s.password, key, secrets },
    root,
    hostHashes: parseHostHashes(s.hostHash, fail),
    poolSize: s.poolSize,
    connectTimeout: s.connectTimeout,
    timeout: s.timeout,
    keepaliveInterval: s.keepaliveInterval,
    serverCopy: s.serverCopy,
  }
}

function currentUser(): string | undefined {
  try {
    return userInfo().username
  } catch {
    return undefined
  }
}

/** Key text is recognised by its armour; anything else is a file path. */
const KEY_TEXT = /-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----|^PuTTY-User-Key-File-/m

function readPrivateKey(
  value: string | Uint8Array | undefined,
  passphrase: string | undefined,
  fail: (key: string, message: string) => never,
  secrets: string[],
): ParsedKey | undefined {
  if (value === undefined) return undefined
  let data: string | Buffer
  if (value instanceof Uint8Array) {
    data = Buffer.from(value)
    secrets.push(data.toString('utf8').trim())
  } else {
    if (KEY_TEXT.test(value)) {
      data = value
      secrets.push(value.trim())
    } else {
      try {
        data = readFileSync(value)
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? 'error'
        return fail('privateKey', `file ${JSON.stringify(value)} cannot be read (${code})`)
      }
      secrets.push(data.toString('utf8').trim())
    }
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
    return fail('privateKey', `cannot be parsed: ${parsed.message}${hint}`)
  }
  const key = Array.isArray(parsed) ? parsed[0] : parsed
  if (key === undefined || !key.isPrivateKey()) return fail('privateKey', 'holds no private key')
  return key
}

function parseHostHashes(value: string | string[] | undefined, fail: (key: string, message: string) => never): Buffer[] | undefined {
  if (value === undefined) return undefined
  const list = Array.isArray(value) ? value : [value]
  if (list.length === 0) return undefined
  return list.map((item) => {
    const digest = typeof item === 'string' ? parseFingerprint(item) : undefined
    return (
      digest ??
      fail(
        'hostHash',
        `must be a SHA-256 host key fingerprint ("SHA256:" and 43 base64 characters, as ssh-keygen -l prints it, or 64 hex digits); got ${JSON.stringify(item)}`,
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
export const scrub = (text: string, secrets: readonly string[]): string => redact(text, secrets)
