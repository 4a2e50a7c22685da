/**
 * Type tests of the public API (`expectTypeOf`): what `lookup()` answers and takes, what
 * `commitAttachContainer()` takes, and `openDatabase<DB>()`. `npm run typecheck` (tsc over packages/*\/src)
 * checks them; vitest only runs the empty shells. The checks sit in functions that are never called, so
 * that nothing needs a running service.
 */
import type { Generated, Kysely } from 'kysely'
import { describe, expectTypeOf, it } from 'vitest'
import {
  type AccessContext,
  type AttachBag,
  type AttachmentView,
  type AttachStorage,
  type AttachStorageOptions,
  accessOf,
  openDatabase,
} from '../index.js'
import type { AttachContainer, LookupOptions } from './attach-storage.js'

/** A host's own tables, as Kysely wants them declared. */
interface HostTables {
  board: { id: Generated<number>; title: string; createdDt: string }
}

/** A list request of every record, unpaged. */
const oneList = { paging: false, page: 1, perPage: 100, skipCount: true, sort: [], conds: [] }

describe('lookup()', () => {
  it('answers AttachmentView[] for each category, and refDomain', () => {
    async function check(storage: AttachStorage, request: Request) {
      const bag = await storage.lookup('board', '1', { request })
      expectTypeOf(bag).toEqualTypeOf<AttachBag>()
      expectTypeOf(bag.refDomain).toEqualTypeOf<string>()
      // Any string names a category: under noUncheckedIndexedAccess it may be missing.
      expectTypeOf(bag.images).toEqualTypeOf<AttachmentView[] | undefined>()
      expectTypeOf(bag.images?.[0]?.url).toEqualTypeOf<string | undefined>()
    }
    expectTypeOf(check).toBeFunction()
  })

  it('types the one category asked for exactly', () => {
    async function check(storage: AttachStorage, request: Request) {
      const one = await storage.lookup('board', '1', { category: 'images', filters: { ext: 'png' }, request })
      expectTypeOf(one).toEqualTypeOf<AttachBag<'images'>>()
      expectTypeOf(one.images).toEqualTypeOf<AttachmentView[]>()
      expectTypeOf(one.refDomain).toEqualTypeOf<string>()
      // @ts-expect-error: only the category asked for is there
      one.files
    }
    expectTypeOf(check).toBeFunction()
  })

  it('takes a Request or an access context, and no unknown option', () => {
    async function check(storage: AttachStorage, request: Request, access: AccessContext) {
      await storage.lookup('board', '1')
      await storage.lookup('board', '1', {})
      await storage.lookup('board', '1', { request: access })
      await storage.lookup('board', '1', { request: accessOf({ id: 7 }, request) })
      await storage.lookup('board', '1', { request: null })
      // @ts-expect-error: `categroy` is no option (a typo would look up every category)
      await storage.lookup('board', '1', { categroy: 'images', request })
      // @ts-expect-error: `req` is no option (a typo would leave out every guarded record)
      await storage.lookup('board', '1', { req: request })
      // @ts-expect-error: `filter` is no option (it is `filters`)
      await storage.lookup('board', '1', { filter: { ext: 'png' }, request })
      // @ts-expect-error: filters know ext, extAlt and fmetaValue
      await storage.lookup('board', '1', { filters: { extension: 'png' }, request })
      // @ts-expect-error: the request is a Request or an access context
      await storage.lookup('board', '1', { request: 'Bearer x' })
    }
    expectTypeOf(check).toBeFunction()
    expectTypeOf<LookupOptions['request']>().toEqualTypeOf<Request | AccessContext | null | undefined>()
  })

  it('still compiles in the deprecated positional form', () => {
    async function check(storage: AttachStorage, request: Request) {
      expectTypeOf(await storage.lookup('board', '1', undefined, {}, request)).toEqualTypeOf<AttachBag>()
      expectTypeOf(await storage.lookup('board', '1', 'images', { extAlt: 'webp:png' }, request)).toEqualTypeOf<AttachBag>()
      expectTypeOf(await storage.lookup('board', '1', 'images')).toEqualTypeOf<AttachBag>()
      // @ts-expect-error: the positional form takes no options object after the category
      await storage.lookup('board', '1', 'images', { request })
    }
    expectTypeOf(check).toBeFunction()
  })

  it('count(), listByReferences() and directUrl() take the caller as lookup() does', () => {
    async function check(storage: AttachStorage, request: Request, access: AccessContext) {
      expectTypeOf(await storage.count({ refDomain: 'board', refKey: '1', refCategory: 'images' }, request)).toEqualTypeOf<number>()
      await storage.count({ refDomain: 'board', refKey: '1', refCategory: 'images' }, access)
      const list = await storage.listByReferences({ refDomain: 'board', refKeys: ['1'], list: oneList }, request)
      expectTypeOf(list.rows).toEqualTypeOf<AttachmentView[]>()
      const at = { refDomain: 'board', refKey: '1', refCategory: 'images', index: 0 }
      expectTypeOf(await storage.directUrl(at, request)).toEqualTypeOf<string>()
      await storage.directUrl(at, access)
      // @ts-expect-error: the caller is a Request or an access context
      await storage.directUrl(at, { user: null })
    }
    expectTypeOf(check).toBeFunction()
  })
})

describe('commitAttachContainer()', () => {
  it('takes what a client sends, and an AttachBag a lookup answered', () => {
    async function check(storage: AttachStorage, looked: AttachBag, body: { attachContainer?: AttachContainer }) {
      const user = { id: 7 }
      await storage.commitAttachContainer({ refKey: 1, user, attachContainer: looked })
      await storage.commitAttachContainer({ refKey: 1, user, attachContainer: body.attachContainer })
      await storage.commitAttachContainer({
        refKey: 1,
        user,
        attachContainer: { refDomain: 'board', images: [{ savedName: 'a.png', displayName: 'a.png' }, { id: 3 }], _deleted: [{ id: 2 }] },
      })
      await storage.commitAttachContainer({
        refKey: 1,
        user,
        // @ts-expect-error: an entry's savedName is a string
        attachContainer: { refDomain: 'board', images: [{ savedName: 12 }] },
      })
      await storage.commitAttachContainer({
        refKey: 1,
        user,
        // @ts-expect-error: _deleted lists ids
        attachContainer: { refDomain: 'board', _deleted: [12] },
      })
    }
    expectTypeOf(check).toBeFunction()
    expectTypeOf<AttachBag>().toExtend<AttachContainer>()
    expectTypeOf<AttachBag<'images' | 'files'>>().toExtend<AttachContainer>()
  })
})

describe('openDatabase()', () => {
  it("is typed with the host's tables, and untyped without them", () => {
    async function check(storage: AttachStorage) {
      const db = await openDatabase<HostTables>({ type: 'sqlite', file: ':memory:' })
      expectTypeOf(db).toEqualTypeOf<Kysely<HostTables>>()
      await db.insertInto('board').values({ title: 'Hello', createdDt: '2026-11-27T12:00:00Z' }).execute()
      const row = await db.selectFrom('board').select(['id', 'title']).executeTakeFirstOrThrow()
      expectTypeOf(row).toEqualTypeOf<{ id: number; title: string }>()
      // @ts-expect-error: no such table
      db.insertInto('boards')
      // @ts-expect-error: no such column
      await db.insertInto('board').values({ titel: 'Hello', createdDt: '' }).execute()
      // The service takes the typed instance.
      expectTypeOf(db).toExtend<NonNullable<AttachStorageOptions['db']>>()
      const untyped = await openDatabase({ type: 'sqlite', file: ':memory:' })
      expectTypeOf(untyped).toEqualTypeOf<Kysely<any>>()
      return storage
    }
    expectTypeOf(check).toBeFunction()
  })
})
