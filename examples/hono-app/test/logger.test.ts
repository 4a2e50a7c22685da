import { Writable } from 'node:stream'
import { referenceLogger } from '@attach-storage/example-reference'
import { pino } from 'pino'
import { describe, expect, it } from 'vitest'

describe('the reference server logger (pino)', () => {
  it('writes JSON lines: the message, the level, an Error as err with its stack, other arguments as args', () => {
    const lines: string[] = []
    const sink = new Writable({
      write(chunk, _enc, done) {
        lines.push(...String(chunk).trim().split('\n'))
        done()
      },
    })
    const logger = referenceLogger({ LOG_LEVEL: 'info' }, pino({ level: 'info' }, sink))
    logger.info('attach-storage: ready', { stores: 2 })
    logger.warn('attach-storage: could not remove a temporary file', new Error('EBUSY'), 'tmp/a.bin')
    logger.error('attach-storage: sweep failed', new Error('disk gone'))
    const entries = lines.map((l) => JSON.parse(l))
    expect(entries.map((e) => [e.level, e.msg])).toEqual([
      [30, 'attach-storage: ready'],
      [40, 'attach-storage: could not remove a temporary file'],
      [50, 'attach-storage: sweep failed'],
    ])
    expect(entries[0].args).toEqual([{ stores: 2 }])
    expect(entries[1].err.message).toBe('EBUSY')
    expect(entries[1].err.stack).toContain('Error: EBUSY')
    expect(entries[1].args).toEqual(['tmp/a.bin'])
    expect(entries[2].err.message).toBe('disk gone')
  })
})
