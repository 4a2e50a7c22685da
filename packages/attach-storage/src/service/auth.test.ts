/** The JWT verifier: what it accepts, and that a token verified before is never taken past its `exp`. */
import { SignJWT } from 'jose'
import { afterEach, describe, expect, it, vi } from 'vitest'
import { createJwtVerifier } from './auth.js'

const SECRET = 'a-secret-of-at-least-16-bytes'
const sign = (claims: Record<string, unknown>, exp: number | undefined, secret = SECRET) => {
  const jwt = new SignJWT(claims).setProtectedHeader({ alg: 'HS256' })
  if (exp !== undefined) jwt.setExpirationTime(exp)
  return jwt.sign(new TextEncoder().encode(secret))
}

describe('createJwtVerifier', () => {
  afterEach(() => vi.useRealTimers())

  it('accepts a good token again and again, and refuses it once expired although it was verified before', async () => {
    const verify = createJwtVerifier({ secret: SECRET, clockTolerance: 0 })
    const now = Date.now()
    const token = await sign({ sub: '42' }, Math.floor(now / 1000) + 10)
    expect(await verify(token)).toMatchObject({ id: 42 })
    expect(await verify(token)).toMatchObject({ id: 42 })
    vi.useFakeTimers({ toFake: ['Date'] })
    vi.setSystemTime(now + 11_000)
    expect(await verify(token)).toBeNull()
  })

  it('refuses wrongly signed, expired, sub-less and exp-less tokens, and never keeps a refusal', async () => {
    const verify = createJwtVerifier({ secret: SECRET })
    const inAnHour = Math.floor(Date.now() / 1000) + 3600
    expect(await verify(await sign({ sub: '1' }, inAnHour, 'another-secret-of-16-bytes'))).toBeNull()
    expect(await verify(await sign({ sub: '1' }, Math.floor(Date.now() / 1000) - 60))).toBeNull()
    expect(await verify(await sign({}, inAnHour))).toBeNull()
    const noExp = await sign({ sub: '1' }, undefined)
    expect(await verify(noExp)).toBeNull()
    expect(await verify(noExp)).toBeNull()
    expect(await createJwtVerifier({ secret: SECRET, requireExp: false })(noExp)).toMatchObject({ id: 1 })
    expect(await verify(undefined)).toBeNull()
    expect(await verify('not.a.token')).toBeNull()
  })
})
