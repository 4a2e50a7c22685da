/**
 * A self-signed TLS certificate made with node:crypto alone (no openssl CLI): an EC P-256 key and a
 * minimal X.509 v3 certificate (DER written by hand) for `localhost` and `127.0.0.1`. Test-only.
 */
import { generateKeyPairSync, randomBytes, sign } from 'node:crypto'

export interface TestCertificate {
  /** PEM private key (PKCS#8). */
  key: string
  /** PEM certificate, usable as `ca` to trust it. */
  cert: string
}

export function selfSignedCertificate(commonName = 'localhost', ip = '127.0.0.1'): TestCertificate {
  const { privateKey, publicKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' })
  const ecdsaWithSha256 = seq(oid('1.2.840.10045.4.3.2'))
  const name = seq(set(seq(oid('2.5.4.3'), tlv(0x0c, Buffer.from(commonName, 'utf8')))))
  const now = Date.now()
  const serial = randomBytes(8)
  serial[0] = (serial[0] as number) & 0x7f
  const san = seq(tlv(0x82, Buffer.from(commonName, 'ascii')), tlv(0x87, Buffer.from(ip.split('.').map((n) => Number(n)))))
  const extensions = seq(
    seq(oid('2.5.29.19'), tlv(0x01, Buffer.from([0xff])), tlv(0x04, seq(tlv(0x01, Buffer.from([0xff]))))),
    seq(oid('2.5.29.17'), tlv(0x04, san)),
  )
  const tbs = seq(
    tlv(0xa0, tlv(0x02, Buffer.from([2]))),
    tlv(0x02, serial),
    ecdsaWithSha256,
    name,
    seq(utcTime(new Date(now - 86_400_000)), utcTime(new Date(now + 365 * 86_400_000))),
    name,
    publicKey.export({ type: 'spki', format: 'der' }),
    tlv(0xa3, extensions),
  )
  const signature = sign('sha256', tbs, privateKey)
  const certificate = seq(tbs, ecdsaWithSha256, tlv(0x03, Buffer.concat([Buffer.from([0]), signature])))
  return {
    key: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
    cert: pem('CERTIFICATE', certificate),
  }
}

function tlv(tag: number, value: Buffer): Buffer {
  const n = value.length
  let length: Buffer
  if (n < 0x80) length = Buffer.from([n])
  else if (n < 0x100) length = Buffer.from([0x81, n])
  else length = Buffer.from([0x82, n >> 8, n & 0xff])
  return Buffer.concat([Buffer.from([tag]), length, value])
}

const seq = (...items: Buffer[]): Buffer => tlv(0x30, Buffer.concat(items))
const set = (...items: Buffer[]): Buffer => tlv(0x31, Buffer.concat(items))

function oid(dotted: string): Buffer {
  const [a, b, ...rest] = dotted.split('.').map(Number) as [number, number, ...number[]]
  const bytes = [a * 40 + b]
  for (const n of rest) {
    const chunk = [n & 0x7f]
    for (let v = n >> 7; v > 0; v >>= 7) chunk.unshift((v & 0x7f) | 0x80)
    bytes.push(...chunk)
  }
  return tlv(0x06, Buffer.from(bytes))
}

function utcTime(date: Date): Buffer {
  const p = (n: number): string => String(n).padStart(2, '0')
  const text =
    p(date.getUTCFullYear() % 100) +
    p(date.getUTCMonth() + 1) +
    p(date.getUTCDate()) +
    p(date.getUTCHours()) +
    p(date.getUTCMinutes()) +
    p(date.getUTCSeconds()) +
    'Z'
  return tlv(0x17, Buffer.from(text, 'ascii'))
}

function pem(label: string, der: Buffer): string {
  const body = der
    .toString('base64')
    .replace(/(.{64})/g, '$1\n')
    .replace(/\n$/, '')
  return `-----BEGIN ${label}-----\n${body}\n-----END ${label}-----\n`
}
