import { describe, expect, it } from 'vitest'
import { fileKind, formatDuration, formatPages, mediaLabel, previewOf } from './index.js'
import { badgeOf, rowError } from './media-label.js'

describe('formatDuration', () => {
  it('writes m:ss under an hour and h:mm:ss from an hour on', () => {
    expect(formatDuration(0)).toBe('0:00')
    expect(formatDuration(5_000)).toBe('0:05')
    expect(formatDuration(65_000)).toBe('1:05')
    expect(formatDuration(600_000)).toBe('10:00')
    expect(formatDuration(3_599_000)).toBe('59:59')
    expect(formatDuration(3_600_000)).toBe('1:00:00')
    expect(formatDuration(3_723_000)).toBe('1:02:03')
    expect(formatDuration(36_005_000)).toBe('10:00:05')
  })
  it('rounds to the nearest second; a clip under half a second shows 0:01', () => {
    expect(formatDuration(1_499)).toBe('0:01')
    expect(formatDuration(1_500)).toBe('0:02')
    expect(formatDuration(59_600)).toBe('1:00')
    expect(formatDuration(3_599_700)).toBe('1:00:00')
    expect(formatDuration(40)).toBe('0:01')
  })
  it('answers nothing for a length that is not one', () => {
    expect(formatDuration(-1)).toBe('')
    expect(formatDuration(Number.NaN)).toBe('')
    expect(formatDuration(Number.POSITIVE_INFINITY)).toBe('')
  })
})

describe('formatPages', () => {
  it('counts pages, singular for one, grouped by thousands', () => {
    expect(formatPages(1)).toBe('1 page')
    expect(formatPages(12)).toBe('12 pages')
    expect(formatPages(1204)).toBe('1,204 pages')
  })
  it('answers nothing for a count that is not one', () => {
    expect(formatPages(0)).toBe('')
    expect(formatPages(2.5)).toBe('')
    expect(formatPages(-3)).toBe('')
  })
})

describe('mediaLabel', () => {
  it('labels a video and an audio file by length, a PDF by pages, nothing else', () => {
    expect(mediaLabel({ fileType: 'video/mp4', media: { width: 1920, height: 1080, durationMs: 65_400 } })).toBe('1:05')
    expect(mediaLabel({ fileType: 'audio/mpeg', media: { durationMs: 3_723_000 } })).toBe('1:02:03')
    expect(mediaLabel({ fileType: 'application/pdf', media: { pages: 12 } })).toBe('12 pages')
    expect(mediaLabel({ fileType: 'image/jpeg', media: { width: 10, height: 10 } })).toBe('')
    // Not analysed yet (the background job runs after the save).
    expect(mediaLabel({ fileType: 'video/mp4', media: null })).toBe('')
    expect(mediaLabel(undefined)).toBe('')
  })
})

describe('previewOf', () => {
  it('answers the preview address once it is made, pending while it is not, none otherwise', () => {
    expect(previewOf({ preview: 'made', thumbnailUrl: '/assets/storage/attach/view/3?preview=1' })).toEqual({
      state: 'made',
      url: '/assets/storage/attach/view/3?preview=1',
    })
    expect(previewOf({ preview: 'pending' })).toEqual({ state: 'pending' })
    expect(previewOf({ preview: 'failed' })).toEqual({ state: 'none' })
    expect(previewOf({ preview: 'off' })).toEqual({ state: 'none' })
    // Made but no address given: nothing to show.
    expect(previewOf({ preview: 'made', thumbnailUrl: null })).toEqual({ state: 'none' })
    expect(previewOf({ fileType: 'image/png' })).toEqual({ state: 'none' })
  })
})

describe('fileKind', () => {
  it('names the kind of file a record is', () => {
    expect(
      ['application/pdf', 'video/webm', 'audio/ogg', 'image/heic', 'text/plain', undefined].map((t) => fileKind({ fileType: t })),
    ).toEqual(['pdf', 'video', 'audio', 'image', 'file', 'file'])
  })
})

describe('badgeOf', () => {
  it('says a video’s length and a PDF’s pages, short enough for a 48-pixel thumbnail', () => {
    expect(badgeOf({ media: { width: 640, height: 360, durationMs: 125_000 } })).toBe('2:05')
    expect(badgeOf({ media: { pages: 12 } })).toBe('12 p.')
    expect(badgeOf({ media: { pages: 0 } })).toBe('')
    expect(badgeOf({ media: null })).toBe('')
  })
})

describe('rowError', () => {
  it('says a virus scan’s refusal plainly, naming the signature the server found', () => {
    const infected = { kind: 'filter' as const, status: 200, code: 'infected', message: 'report.pdf is infected: Win.Test.EICAR_HDB-1' }
    expect(rowError(infected)).toEqual({ ...infected, message: 'Refused: a virus was found (Win.Test.EICAR_HDB-1)' })
    // A message of another form is kept whole in the parentheses.
    expect(rowError({ ...infected, message: 'Eicar-Signature' }).message).toBe('Refused: a virus was found (Eicar-Signature)')
    const other = { kind: 'filter' as const, code: 'size', message: 'Larger than 5 MB' }
    expect(rowError(other)).toBe(other)
  })
})
