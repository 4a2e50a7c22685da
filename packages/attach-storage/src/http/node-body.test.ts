import { Readable } from 'node:stream'
import { describe, expect, it } from 'vitest'
import { nodeBodyOf, streamResponse } from './node-body.js'

const source = (parts: string[]) =>
  Readable.from(
    parts.map((p) => Buffer.from(p)),
    { objectMode: false },
  )

describe('streamResponse', () => {
  it('streams the Node stream as the Web body, exactly, and then no longer offers the Node stream', async () => {
    const res = streamResponse(source(['ab', 'cd', 'ef']), { status: 206, headers: { 'x-a': '1' } })
    expect(nodeBodyOf(res)).toBeInstanceOf(Readable)
    expect(res.status).toBe(206)
    expect(await res.text()).toBe('abcdef')
    expect(nodeBodyOf(res)).toBeUndefined()
  })

  it('starts nothing until somebody reads: the Node stream stays free for a Node adapter to pipe', async () => {
    const stream = source(['x'.repeat(100_000), 'y'])
    const res = streamResponse(stream, {})
    await new Promise((r) => setTimeout(r, 20))
    expect(stream.readableFlowing).not.toBe(true)
    const node = nodeBodyOf(res)!
    let size = 0
    for await (const c of node) size += (c as Buffer).length
    expect(size).toBe(100_001)
  })

  it('passes a source error to the Web reader, and a cancel to the source', async () => {
    const failing = new Readable({
      read() {
        this.destroy(new Error('disk gone'))
      },
    })
    await expect(streamResponse(failing, {}).text()).rejects.toThrow('disk gone')
    const slow = new Readable({ read() {} })
    const res = streamResponse(slow, {})
    const reader = res.body!.getReader()
    slow.push('a')
    expect(Buffer.from((await reader.read()).value!).toString()).toBe('a')
    await reader.cancel()
    expect(slow.destroyed).toBe(true)
  })
})
