import { createHmac, timingSafeEqual } from 'node:crypto'
import type { ViewSignature } from './types.js'

/** Query parameters of a signed view URL. */
export const SIGNATURE_PARAMS = { expires: 'exp', signature: 'sig' } as const

/**
 * How far past `signing.ttl` an expiry may lie and still be taken, in seconds: the minute {@link
 * UrlSigner.query} rounds up to, plus a minute of clock skew between instances that sign and check.
 */
export const SIGNATURE_SLACK_SECONDS = 120

/** The `exp` and `sig` of a view's query (first values), when both are there; unchecked. */
export function signatureIn(params: URLSearchParams): ViewSignature | undefined {
  const expires = params.get(SIGNATURE_PARAMS.expires)
  const signature = params.get(SIGNATURE_PARAMS.signature)
  return expires !== null && signature !== null ? { expires, signature } : undefined
}

/**
 * Signs and checks short-lived view URLs of guarded attachments: an HMAC-SHA256 over the record id and
 * an expiry (Unix seconds), so an `<img src>` of a private file works without a Bearer token in the URL.
 * A signature names a record, never a slot: a by-reference URL whose slot now holds another record is no
 * longer signed for it. Resized variants of the record are covered by its signature.
 */
export class UrlSigner {
  readonly #key: Buffer
  readonly #ttlSeconds: number
  readonly #now: () => Date

  constructor(secret: string, ttlMs: number, now: () => Date) {
    this.#key = Buffer.from(secret, 'utf8')
    this.#ttlSeconds = Math.max(1, Math.floor(ttlMs / 1000))
    this.#now = now
  }

  #mac(id: number, expires: number): Buffer {
    return createHmac('sha256', this.#key).update(`attach-view:v1:${id}:${expires}`).digest()
  }

  /**
   * The query string (`exp=…&sig=…`) that grants a view of record `id` until the expiry. The expiry is
   * rounded up to the next minute, so the same record signed within one minute gives the same URL (and
   * browser caches can keep it).
   */
  query(id: number): string {
    const now = Math.floor(this.#now().getTime() / 1000)
    return this.queryUntil(id, Math.ceil((now + this.#ttlSeconds) / 60) * 60)
  }

  /** The query string that grants a view of record `id` until `expires` (Unix seconds), as given. */
  queryUntil(id: number, expires: number): string {
    return `${SIGNATURE_PARAMS.expires}=${expires}&${SIGNATURE_PARAMS.signature}=${this.#mac(id, expires).toString('base64url')}`
  }

  /**
   * True when `given` is an unexpired signature for record `id` whose expiry lies at most `signing.ttl`
   * (plus {@link SIGNATURE_SLACK_SECONDS}) ahead: a URL signed with a far expiry (a leaked secret, a
   * longer ttl configured before) is refused.
   */
  verify(id: number, given: ViewSignature): boolean {
    const { expires: exp, signature: sig } = given
    if (!exp || !sig || !/^\d{1,12}$/.test(exp) || !/^[A-Za-z0-9_-]{43}$/.test(sig)) return false
    const expires = Number(exp)
    const now = this.#now().getTime()
    if (expires * 1000 < now || expires * 1000 > now + (this.#ttlSeconds + SIGNATURE_SLACK_SECONDS) * 1000) return false
    const mac = Buffer.from(sig, 'base64url')
    const wanted = this.#mac(id, expires)
    return mac.length === wanted.length && timingSafeEqual(mac, wanted)
  }
}
