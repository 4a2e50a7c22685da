/**
 * The reference server scans category demo/scanned when ATTACH_CLAMD is set (contract, "Media"), with a
 * real clamd on the tests' own one-signature database; without ATTACH_CLAMD there is no such category.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { startClamd, TEST_SIGNATURE, TEST_VIRUS_MARKER, type TestClamd } from '../../../packages/attach-storage/src/testing/clamd-kit.js'
import { sign, start, type Running } from './helpers.js'

async function upload(srv: Running, category: string, content: string, name: string): Promise<Response> {
  const fd = new FormData()
  fd.append('refDomain', 'demo')
  fd.append('refCategory', category)
  fd.append('file', new Blob([content], { type: 'text/plain' }), name)
  return fetch(`${srv.base}/api/storage/attach/tmp`, { method: 'POST', body: fd, headers: { authorization: `Bearer ${await sign('1')}` } })
}

describe('the reference server and ATTACH_CLAMD', () => {
  let clamd: TestClamd
  let scanning: Running
  let plain: Running
  beforeAll(async () => {
    clamd = await startClamd()
    scanning = await start({ ATTACH_CLAMD: clamd.tcp })
    plain = await start({})
  })
  afterAll(async () => {
    await scanning?.close()
    await plain?.close()
    await clamd?.stop()
  })

  it('demo/scanned refuses an infected file with infected and keeps a clean one', async () => {
    const bad = await upload(scanning, 'scanned', `x ${TEST_VIRUS_MARKER} x`, 'evil.txt')
    expect(bad.status).toBe(200)
    expect((await bad.json()).files[0].error).toEqual({ code: 'infected', message: `evil.txt is infected: ${TEST_SIGNATURE}` })
    const good = await upload(scanning, 'scanned', 'nothing to see', 'fine.txt')
    expect((await good.json()).files[0].name).toMatch(/\.txt$/)
  })

  it('without ATTACH_CLAMD there is no demo/scanned', async () => {
    const res = await upload(plain, 'scanned', 'text', 'a.txt')
    expect(res.status).toBe(400)
    expect((await res.json()).code).toBe('unknown-category')
  })
})
