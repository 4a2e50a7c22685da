/**
 * The internals of basic-ftp that retrieve.ts drives (its `FTPContext`, which basic-ftp documents as
 * internal). basic-ftp is pinned to one exact version; these checks fail loudly when an upgrade moves
 * any of them, before a ranged `get` breaks in subtle ways.
 */
import { existsSync, readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import { dirname, join } from 'node:path'
import { Socket } from 'node:net'
import { TLSSocket } from 'node:tls'
import { Client, FTPError, FTPContext } from 'basic-ftp'
import { describe, expect, it } from 'vitest'

const require = createRequire(import.meta.url)
const installed = (): string => {
  const main = require.resolve('basic-ftp')
  let dir = dirname(main)
  while (!existsSync(join(dir, 'package.json')) || !readFileSync(join(dir, 'package.json'), 'utf8').includes('"name": "basic-ftp"')) {
    dir = dirname(dir)
  }
  return (JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { version: string }).version
}

describe('basic-ftp internals that retrieve.ts relies on', () => {
  it('basic-ftp is pinned to one exact version, and that version is installed', () => {
    const pkg = JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as {
      dependencies: Record<string, string>
    }
    const pinned = pkg.dependencies['basic-ftp']
    expect(pinned, 'basic-ftp must stay pinned (no ^ or ~): retrieve.ts drives its internals').toMatch(/^\d+\.\d+\.\d+$/)
    expect(installed(), 'the installed basic-ftp differs from the pinned one; re-check retrieve.ts').toBe(pinned)
  })

  it('a Client exposes prepareTransfer, send, closed and its FTPContext as `ftp`', () => {
    const client = new Client(1000)
    try {
      expect(typeof client.prepareTransfer).toBe('function')
      expect(typeof client.send).toBe('function')
      expect(client.ftp).toBeInstanceOf(FTPContext)
      expect(typeof client.closed).toBe('boolean')
    } finally {
      client.close()
    }
  })

  it('the FTPContext has handle(command, handler), closeWithError, a control socket and a dataSocket accessor', () => {
    const client = new Client(1000)
    try {
      const ftp = client.ftp
      expect(typeof ftp.handle).toBe('function')
      expect(ftp.handle.length).toBe(2)
      expect(typeof ftp.closeWithError).toBe('function')
      expect(ftp.socket).toBeInstanceOf(Socket)
      expect(typeof ftp.socket.setTimeout).toBe('function')
      const accessor = Object.getOwnPropertyDescriptor(FTPContext.prototype, 'dataSocket')
      expect(typeof accessor?.get).toBe('function')
      expect(typeof accessor?.set).toBe('function')
    } finally {
      client.close()
    }
  })

  it('setting dataSocket to undefined removes the listeners of the old data socket and destroys it', () => {
    const client = new Client(1000)
    try {
      const data = new Socket()
      client.ftp.dataSocket = data
      expect(client.ftp.dataSocket).toBe(data)
      data.on('data', () => {})
      client.ftp.dataSocket = undefined
      expect(client.ftp.dataSocket).toBeUndefined()
      expect(data.destroyed).toBe(true)
      expect(data.listenerCount('data')).toBe(0)
    } finally {
      client.close()
    }
  })

  it('FTPError carries the reply code', () => {
    const err = new FTPError({ code: 550, message: '550 No such file' })
    expect(err).toBeInstanceOf(Error)
    expect(err.code).toBe(550)
  })

  it("a TLS data socket keeps the TCP socket it wraps as `_parent` (node's, used for the cut-off's reset)", () => {
    const tcp = new Socket()
    const tls = new TLSSocket(tcp)
    try {
      expect((tls as unknown as { _parent?: unknown })._parent).toBe(tcp)
      expect(typeof tcp.resetAndDestroy).toBe('function')
    } finally {
      tls.destroy()
      tcp.destroy()
    }
  })
})
