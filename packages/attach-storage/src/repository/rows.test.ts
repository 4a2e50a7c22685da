import { describe, expect, it } from 'vitest'
import { mapRecord, RECORD_COLUMNS, type RecordRow, type RecordValues, recordOfValues } from './rows.js'

/** A row whose every column holds a value of its own, so that a value read from the wrong place shows. */
const row: RecordRow = {
  id: 11,
  ref_domain: 'domain',
  ref_key: 'key',
  ref_category: 'category',
  display_name: 'display.pdf',
  saved_name: 'saved.pdf',
  saved_dir: 'dir/2026',
  file_type: 'application/pdf',
  file_size: 12,
  ext: 'ext',
  fmeta_value: 'fmeta',
  sort: 13,
  created_by: 'user-14',
  created_dt: '2026-11-29T00:00:15.000Z',
  sha256: `${'ab'.repeat(32)}  `,
  store: 'store',
  blob_id: 17,
  focus_x: 0.18,
  focus_y: 0.19,
  media: '{"width":20,"height":21,"placeholder":"p"}',
}

describe('a record from its row', () => {
  it('reads every field from its own column, by name and by place alike', () => {
    const expected = {
      id: 11,
      refDomain: 'domain',
      refKey: 'key',
      refCategory: 'category',
      displayName: 'display.pdf',
      savedName: 'saved.pdf',
      savedDir: 'dir/2026',
      fileType: 'application/pdf',
      fileSize: 12,
      ext: 'ext',
      fmetaValue: 'fmeta',
      sort: 13,
      createdBy: 'user-14',
      createdDt: '2026-11-29T00:00:15.000Z',
      sha256: 'ab'.repeat(32),
      store: 'store',
      blobId: 17,
      focus: { x: 0.18, y: 0.19 },
      media: { width: 20, height: 21, placeholder: 'p' },
    }
    expect(mapRecord(row)).toEqual(expected)
    expect(recordOfValues(RECORD_COLUMNS.map((c) => row[c]) as RecordValues)).toEqual(expected)
  })

  it('answers numbers for integer columns read as bigint or text, and leaves out a half focal point', () => {
    const rec = mapRecord({ ...row, id: 11n as never, file_size: '12' as never, created_by: '14', focus_y: null, ext: null, media: null })
    expect(rec).toMatchObject({ id: 11, fileSize: 12, createdBy: 14, ext: null, media: null })
    expect(rec).not.toHaveProperty('focus')
  })
})
