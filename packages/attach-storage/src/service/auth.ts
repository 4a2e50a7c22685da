import {
  createLocalJWKSet,
  createRemoteJWKSet,
  importSPKI,
  jwtVerify,
  type JSONWebKeySet,
  type JWTVerifyGetKey,
  type JWTVerifyOptions,
  type CryptoKey,
} from 'jose'
import { configError } from '../errors.js'
import type { Authenticate, AuthUser } from './types.js'

/** How Bearer JWTs are verified. Give exactly one of `secret`, `publicKey`, `jwks`, `jwksUrl`. */
export interface JwtOptions {
  /** HS256 shared secret. */
  secret?: string | Uint8Array
  /** PEM (SPKI) public key for RS256/ES256/EdDSA tokens; `algorithm` names which. */
  publicKey?: string
  /** Algorithm of `publicKey`. @default 'RS256' */
  algorithm?: string
  /** A JSON Web Key Set held in memory. */
  jwks?: JSONWebKeySet
  /** Address of a JSON Web Key Set, fetched and cached by jose. */
  jwksUrl?: string
  /** Required `iss`. */
  issuer?: string | string[]
  /** Required `aud`. */
  audience?: string | string[]
  /** Tolerated clock skew in seconds. @default 5 */
  clockTolerance?: number
  /**
   * Refuse tokens without an `exp` claim: a token that never expires is a credential that can never be
   * taken back. Set `false` only when the issuer has another way to revoke tokens.
   * @default true
   */
  requireExp?: boolean
}

/** Reads the Bearer token of the `Authorization` header, or undefined. */
export function bearerToken(request: Request): string | undefined {
  const h = request.headers.get('authorization')
  if (!h) return undefined
  const m = /^Bearer[ ]+([A-Za-z0-9\-_.~+/]+=*)$/i.exec(h.trim())
  return m?.[1]
}

/** The user id of a `sub` claim: decimal integers become numbers, other strings stay strings. */
export function userIdOf(sub: string): number | string {
  if (/^(0|[1-9]\d{0,15})$/.test(sub)) {
    const n = Number(sub)
    if (Number.isSafeInteger(n)) return n
  }
  return sub
}

/** How long a verified token is taken as verified without checking its signature again. */
const VERIFIED_FOR_MS = 30_000
/** Most verified tokens kept (the oldest goes first). */
const VERIFIED_MAX = 1000

/**
 * Builds a token verifier from {@link JwtOptions}: `verify(token)` resolves the user or `null` (missing,
 * malformed, expired, wrongly signed, without `sub`, or without `exp` unless `requireExp` is false).
 * A token it verified is taken as verified again, without its signature being checked, until its `exp`
 * and for at most 30 s.
 */
export function createJwtVerifier(options: JwtOptions): (token: string | undefined) => Promise<AuthUser | null> {
  const given = [options.secret, options.publicKey, options.jwks, options.jwksUrl].filter((x) => x !== undefined)
  if (given.length !== 1) throw configError('JWT verification needs exactly one of secret, publicKey, jwks or jwksUrl')
  let key: Promise<Uint8Array | CryptoKey> | undefined
  let getKey: JWTVerifyGetKey | undefined
  const verifyOptions: JWTVerifyOptions = {
    issuer: options.issuer,
    audience: options.audience,
    clockTolerance: options.clockTolerance ?? 5,
    requiredClaims: options.requireExp === false ? [] : ['exp'],
  }
  if (options.secret !== undefined) {
    const secret = typeof options.secret === 'string' ? new TextEncoder().encode(options.secret) : options.secret
    if (secret.length < 16) throw configError('The JWT secret must be at least 16 bytes long')
    key = Promise.resolve(secret)
    verifyOptions.algorithms = ['HS256']
  } else if (options.publicKey !== undefined) {
    const alg = options.algorithm ?? 'RS256'
    key = importSPKI(options.publicKey, alg)
    key.catch(() => undefined)
    verifyOptions.algorithms = [alg]
  } else if (options.jwks !== undefined) {
    getKey = createLocalJWKSet(options.jwks)
  } else {
    getKey = createRemoteJWKSet(new URL(options.jwksUrl!))
  }
  // Tokens verified lately, by their text: a client's next requests skip the signature check (two
  // WebCrypto calls). Kept until the token's `exp` and at most VERIFIED_FOR_MS; refusals are not kept.
  const verified = new Map<string, { user: AuthUser; until: number }>()
  return async (token) => {
    if (!token) return null
    const now = Date.now()
    const known = verified.get(token)
    if (known) {
      if (known.until > now) return known.user
      verified.delete(token)
    }
    try {
      const { payload } = getKey ? await jwtVerify(token, getKey, verifyOptions) : await jwtVerify(token, await key!, verifyOptions)
      if (typeof payload.sub !== 'string' || payload.sub === '') return null
      const user = { id: userIdOf(payload.sub), claims: payload as Record<string, unknown> }
      const until = Math.min(now + VERIFIED_FOR_MS, typeof payload.exp === 'number' ? payload.exp * 1000 : now + VERIFIED_FOR_MS)
      if (until > now) {
        if (verified.size >= VERIFIED_MAX) verified.delete(verified.keys().next().value!)
        verified.set(token, { user, until })
      }
      return user
    } catch {
      return null
    }
  }
}

/** An {@link Authenticate} function that verifies the Bearer JWT of the `Authorization` header. */
export function createJwtAuthenticator(options: JwtOptions): Authenticate {
  const verify = createJwtVerifier(options)
  return (request) => verify(bearerToken(request))
}
