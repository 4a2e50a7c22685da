/**
 * `commitAttachContainer({trx})` in the host's transaction, on SQLite, PostgreSQL and MySQL: the host's
 * row and the attachment records commit or roll back together; a rollback leaves every temporary file
 * committable (the next attempt succeeds); two transactions committing one temporary file: one wins;
 * `_deleted` in a rolled-back transaction keeps the file; `checkAttachContainer()` answers what the
 * commit does; the sweep tidies what a transaction of the host's own (not `storage.transaction()`) left.
 */
import { existsSync } from 'node:fs'
import { stat } from 'node:fs/promises'
import { join } from 'node:path'
import type { Kysely, Transaction } from 'kysely'
import { afterAll, beforeAll, describe, expect, it } from 'vitest'
import { DIALECTS } from '../../../../test/databases.js'
import { AttachStorageError } from '../errors.js'
import { type Kit, makeKit } from '../testing/handler-kit.js'

const API = '/api/storage'
const USER = { id: 7 }

for (const dialect of DIALECTS) {
  describe(`commit in the host's transaction (${dialect})`, () => {
    let kit: Kit
    let db: Kysely<any>
    let clock = new Date()
    /** The step at which the next save outside a transaction "crashes" (once). */
    let crashAt: string | undefined
    beforeAll(async () => {
      kit = await makeKit(dialect, {
        now: () => clock,
        testPause: (step) => {
          if (step !== crashAt) return
          crashAt = undefined
          throw new Error(`killed at ${step}`)
        },
      })
      db = kit.storage.repository.db
      await db.schema
        .createTable('ticket')
        .ifNotExists()
        .addColumn('id', dialect === 'sqlite' ? 'integer' : 'serial', (c) => c.primaryKey().notNull())
        .addColumn('title', 'varchar(200)', (c) => c.notNull())
        .execute()
    })
    afterAll(() => kit?.cleanup())

    const tmpUpload = async (body: string, name = 'a.txt', user = '7', refCategory = 'default') => {
      const res = await kit.upload(
        `${API}/attach/tmp`,
        [
          ['refDomain', 'demo'],
          ['refCategory', refCategory],
          ['file', new Blob([body]), name],
        ],
        user,
      )
      expect(res.status).toBe(200)
      return (await res.json()).files[0] as { name: string }
    }
    const insertTicket = async (trx: Transaction<any>, title: string): Promise<number> => {
      if (dialect === 'mysql') return Number((await trx.insertInto('ticket').values({ title }).executeTakeFirstOrThrow()).insertId)
      return Number((await trx.insertInto('ticket').values({ title }).returning('id').executeTakeFirstOrThrow()).id)
    }
    const tickets = async (title: string) => db.selectFrom('ticket').selectAll().where('title', '=', title).execute()
    const recordsOf = (refKey: string | number) => kit.storage.repository.listByReference('demo', String(refKey))
    const blobsOf = (name: string) => kit.storage.repository.findBlobsByTmpName(name)
    const tmpFiles = async (name: string) => (await kit.files(kit.tmpDir)).filter((f) => f.includes(name))
    const storedFiles = async (name: string) => (await kit.files()).filter((f) => f.includes(name))
    const bagOf = (...names: string[]) => ({ default: names.map((savedName) => ({ savedName })) })
    /** A ticket and its attachments in one `storage.transaction()`; `after` runs in it once committed. */
    const createTicket = (title: string, bag: unknown, after?: (id: number, trx: Transaction<any>) => Promise<void>) =>
      kit.storage.transaction(async (trx) => {
        const id = await insertTicket(trx, title)
        const views = await kit.storage.commitAttachContainer({
          refDomain: 'demo',
          refKey: id,
          attachContainer: bag as never,
          user: USER,
          trx,
        })
        await after?.(id, trx)
        return { id, views }
      })
    const failureOf = async (p: Promise<unknown>) => {
      const err = await p.then(
        () => undefined,
        (e: unknown) => e,
      )
      expect(err).toBeInstanceOf(AttachStorageError)
      return err as AttachStorageError
    }

    it('commits the ticket and its records together; the temporary files go after the commit', async () => {
      const a = await tmpUpload('first file', 'a.txt')
      const b = await tmpUpload('second file', 'b.txt')
      const { id, views } = await createTicket('together', bagOf(a.name, b.name))
      expect(await tickets('together')).toHaveLength(1)
      expect(views.map((v) => v.savedName)).toEqual([a.name, b.name])
      expect((await recordsOf(id)).map((r) => r.savedName)).toEqual([a.name, b.name])
      expect(await tmpFiles(a.name)).toEqual([])
      expect(await tmpFiles(b.name)).toEqual([])
      expect(await storedFiles(a.name)).toHaveLength(1)
      expect((await blobsOf(a.name)).map((x) => x.refCount)).toEqual([1])
    })

    it('between two local stores the placed copy is a hard link of the temporary file, whatever its size', async () => {
      const a = await tmpUpload('x'.repeat(200_000), 'big.txt')
      await createTicket('linked', bagOf(a.name), async (id, trx) => {
        const [rec] = await kit.storage.repository.within(trx).listByReference('demo', String(id))
        const placed = await stat(join(kit.baseDir, rec!.savedDir, rec!.savedName))
        const temporary = await stat(join(kit.tmpDir, '_tmp', a.name))
        expect(placed.ino).toBe(temporary.ino)
        expect(placed.nlink).toBe(2)
      })
      const [rec] = await recordsOf((await tickets('linked'))[0]!.id)
      expect((await stat(join(kit.baseDir, rec!.savedDir, rec!.savedName))).nlink).toBe(1)
    })

    it('a throw after the commit rolls everything back: no ticket, no record, no blob row; the retry succeeds', async () => {
      const a = await tmpUpload('rolled back', 'r.txt')
      let refKey = 0
      const err = await kit.storage
        .transaction(async (trx) => {
          refKey = await insertTicket(trx, 'rollback')
          await kit.storage.commitAttachContainer({ refDomain: 'demo', refKey, attachContainer: bagOf(a.name), user: USER, trx })
          expect(await kit.storage.repository.within(trx).listByReference('demo', String(refKey))).toHaveLength(1)
          throw new Error('the host changed its mind')
        })
        .catch((e: Error) => e)
      expect(err.message).toBe('the host changed its mind')
      expect(await tickets('rollback')).toEqual([])
      expect(await recordsOf(refKey)).toEqual([])
      expect(await blobsOf(a.name)).toEqual([])
      // The temporary file and its sidecar stay; the copy no row holds went with the rollback.
      expect(await tmpFiles(a.name)).toEqual(expect.arrayContaining([`_tmp/${a.name}`, `_tmp/${a.name}.meta.json`]))
      expect(await storedFiles(a.name)).toEqual([])
      const { id } = await createTicket('rollback-retry', bagOf(a.name))
      expect((await recordsOf(id)).map((r) => r.savedName)).toEqual([a.name])
      expect(await tmpFiles(a.name)).toEqual([])
      expect(await storedFiles(a.name)).toHaveLength(1)
    })

    it('a failing entry fails the whole save before anything is written; the good file stays committable', async () => {
      const good = await tmpUpload('good file', 'good.txt')
      const bogus = `${'0'.repeat(8)}-0000-4000-8000-${'0'.repeat(12)}.txt`
      const err = await failureOf(createTicket('failing-entry', bagOf(good.name, bogus)))
      expect(err.code).toBe('attach-save-failure')
      expect(err.details).toMatchObject({ failureCount: 1, failures: [{ index: 1, code: 'not-found' }] })
      expect(await tickets('failing-entry')).toEqual([])
      expect(await blobsOf(good.name)).toEqual([])
      expect(await storedFiles(good.name)).toEqual([])
      const { id } = await createTicket('failing-entry-retry', bagOf(good.name))
      expect(await recordsOf(id)).toHaveLength(1)
    })

    it('another user’s temporary file fails the save: 403 forbidden listed, no ticket', async () => {
      const theirs = await tmpUpload('not yours', 'x.txt', '8')
      const err = await failureOf(createTicket('forbidden', bagOf(theirs.name)))
      expect(err.details).toMatchObject({ failures: [{ index: 0, code: 'forbidden' }] })
      expect(await tickets('forbidden')).toEqual([])
    })

    it('two transactions committing one temporary file: one wins, the other fails, nothing is lost', async () => {
      const a = await tmpUpload('contended', 'c.txt')
      let release!: () => void
      const held = new Promise<void>((resolve) => {
        release = resolve
      })
      let committedInFirst!: () => void
      const firstCommitted = new Promise<void>((resolve) => {
        committedInFirst = resolve
      })
      const first = createTicket('race-1', bagOf(a.name), async () => {
        committedInFirst()
        await held
      })
      await firstCommitted
      const second = createTicket('race-2', bagOf(a.name)).then(
        () => undefined,
        (e: AttachStorageError) => e,
      )
      if (dialect !== 'sqlite') {
        // The first transaction holds the file: the second is refused at once, 409 conflict.
        const err = await second
        expect(err?.details).toMatchObject({ failures: [{ code: 'conflict' }] })
        // A save outside any transaction is refused the same way: it never commits a file a transaction holds.
        const plain = await failureOf(
          kit.storage.commitAttachContainer({ refDomain: 'demo', refKey: 'race-plain', attachContainer: bagOf(a.name), user: USER }),
        )
        expect(plain.details).toMatchObject({ failures: [{ code: 'conflict' }] })
        expect(await recordsOf('race-plain')).toEqual([])
        release()
        await first
      } else {
        // SQLite runs one transaction at a time: the second waits, then finds the file saved.
        release()
        await first
        const err = await second
        expect(err?.details).toMatchObject({ failures: [{ code: expect.stringMatching(/^(not-found|saved-already)$/) }] })
      }
      expect(await tickets('race-1')).toHaveLength(1)
      expect(await tickets('race-2')).toEqual([])
      expect((await blobsOf(a.name)).map((b) => b.refCount)).toEqual([1])
      expect(await storedFiles(a.name)).toHaveLength(1)
    })

    it('_deleted in a rolled-back transaction keeps the record and its file; committed, the file goes', async () => {
      const a = await tmpUpload('to delete', 'd.txt')
      const { id } = await createTicket('deleting', bagOf(a.name))
      const [rec] = await recordsOf(id)
      const place = join(kit.baseDir, rec!.savedDir, rec!.savedName)
      expect(existsSync(place)).toBe(true)
      const err = await kit.storage
        .transaction(async (trx) => {
          await kit.storage.commitAttachContainer({
            refDomain: 'demo',
            refKey: id,
            attachContainer: { _deleted: [{ id: rec!.id }] },
            user: USER,
            trx,
          })
          throw new Error('undo')
        })
        .catch((e: Error) => e)
      expect(err.message).toBe('undo')
      expect((await recordsOf(id)).map((r) => r.id)).toEqual([rec!.id])
      expect(existsSync(place)).toBe(true)
      await kit.storage.transaction((trx) =>
        kit.storage.commitAttachContainer({
          refDomain: 'demo',
          refKey: id,
          attachContainer: { _deleted: [{ id: rec!.id }] },
          user: USER,
          trx,
        }),
      )
      expect(await recordsOf(id)).toEqual([])
      expect(existsSync(place)).toBe(false)
    })

    it('checkAttachContainer answers what the commit does (in a transaction and without), changing nothing', async () => {
      const bogus = `${'1'.repeat(8)}-0000-4000-8000-${'0'.repeat(12)}.txt`
      const cases: Array<[string, () => Promise<unknown>]> = [
        ['ok', async () => bagOf((await tmpUpload('fine', 'ok.txt')).name)],
        ['not-found', async () => bagOf(bogus)],
        ['forbidden', async () => bagOf((await tmpUpload('theirs', 't.txt', '8')).name)],
        ['filter', async () => ({ image: [{ savedName: (await tmpUpload('plain text', 'p.txt')).name }] })],
        [
          'mixed',
          async () => ({
            default: [{ savedName: (await tmpUpload('fine', 'ok.txt')).name }, { savedName: bogus }, { id: 999999 }],
            _deleted: [{ id: 'x' }],
          }),
        ],
        ['too-many', async () => ({ default: Array.from({ length: 101 }, () => ({ savedName: bogus })) })],
      ]
      const outcome = (e: AttachStorageError | undefined) =>
        e ? { code: e.code, failures: ((e.details?.failures ?? []) as any[]).map((f) => [f.refCategory, f.index, f.code]) } : 'ok'
      for (const [label, make] of cases) {
        for (const mode of ['transaction', 'plain'] as const) {
          const bag = (await make()) as never
          const refKey = `check-${label}-${mode}`
          const before = await kit.files(kit.tmpDir)
          const check = await kit.storage.checkAttachContainer({ refDomain: 'demo', refKey, attachContainer: bag, user: USER })
          expect(await kit.files(kit.tmpDir), label).toEqual(before)
          expect(await recordsOf(refKey), label).toEqual([])
          const input = { refDomain: 'demo', refKey, attachContainer: bag, user: USER }
          const committed = await (mode === 'transaction'
            ? kit.storage.transaction((trx) => kit.storage.commitAttachContainer({ ...input, trx }))
            : kit.storage.commitAttachContainer(input)
          ).then(
            () => undefined,
            (e: AttachStorageError) => e,
          )
          const checked = check.ok ? 'ok' : { code: check.code, failures: check.failures.map((f) => [f.refCategory, f.index, f.code]) }
          expect(outcome(committed), `${label} ${mode}`).toEqual(checked)
          if (label === 'ok') expect(check.ok).toBe(true)
          else expect(check.ok, label).toBe(false)
        }
      }
    })

    it('after a commit interrupted once its file moved: the check and the commit agree (resumed, or moved back for another reference)', async () => {
      for (const target of ['int-same', 'int-other']) {
        const a = await tmpUpload(`interrupted ${target}`, 'i.txt')
        crashAt = 'moved'
        await failureOf(
          kit.storage.commitAttachContainer({ refDomain: 'demo', refKey: 'int-same', attachContainer: bagOf(a.name), user: USER }),
        )
        expect(await tmpFiles(a.name)).toEqual([`_tmp/${a.name}.meta.json`]) // the file is at its place, under a pending blob
        const check = await kit.storage.checkAttachContainer({
          refDomain: 'demo',
          refKey: target,
          attachContainer: bagOf(a.name),
          user: USER,
        })
        expect(check, target).toEqual({ ok: true })
        // In a transaction that file belongs to the interrupted commit: conflict, nothing changed.
        const inTrx = await failureOf(createTicket(`int-trx-${target}`, bagOf(a.name)))
        expect(inTrx.details).toMatchObject({ failures: [{ code: 'conflict' }] })
        await kit.storage.commitAttachContainer({ refDomain: 'demo', refKey: target, attachContainer: bagOf(a.name), user: USER })
        expect((await recordsOf(target)).map((r) => r.savedName)).toContain(a.name)
      }
    })

    it('checkAttachContainer without a refKey (an entity not inserted yet): new files pass, records of no entity fail', async () => {
      const fresh = await tmpUpload('for a new entity', 'n.txt')
      expect(await kit.storage.checkAttachContainer({ refDomain: 'demo', attachContainer: bagOf(fresh.name), user: USER })).toEqual({
        ok: true,
      })
      const check = await kit.storage.checkAttachContainer({
        refDomain: 'demo',
        attachContainer: { default: [{ savedName: fresh.name }], _deleted: [{ id: 1 }] },
        user: USER,
      })
      expect(check).toMatchObject({
        ok: false,
        code: 'attach-save-failure',
        failures: [{ refCategory: '_deleted', index: 0, code: 'not-found' }],
      })
    })

    it("fires 'saved' once the transaction committed, never for one that rolled back", async () => {
      const seen: string[] = []
      const off = kit.storage.on('saved', (e) => {
        seen.push(...e.records.map((r) => r.savedName))
      })
      try {
        const a = await tmpUpload('event rolled back', 'e1.txt')
        await createTicket('event-rollback', bagOf(a.name), async () => {
          throw new Error('no')
        }).catch(() => undefined)
        await kit.storage.drainEvents()
        expect(seen).toEqual([])
        await createTicket('event-commit', bagOf(a.name), async () => {
          // Still inside the transaction: nothing announced yet.
          await new Promise((r) => setTimeout(r, 10))
          expect(seen).toEqual([])
        })
        await kit.storage.drainEvents()
        expect(seen).toEqual([a.name])
      } finally {
        off()
      }
    })

    it("the sweep tidies what the host's own transactions left: a committed file's temporary copy, a rollback's copy", async () => {
      const a = await tmpUpload('host committed', 'hc.txt')
      const b = await tmpUpload('host rolled back', 'hr.txt')
      let refKey = 0
      // A transaction of the host's own (not storage.transaction()): nothing tidies after it.
      await db.transaction().execute(async (trx) => {
        refKey = await insertTicket(trx, 'own-trx')
        await kit.storage.commitAttachContainer({ refDomain: 'demo', refKey, attachContainer: bagOf(a.name), user: USER, trx })
      })
      await db
        .transaction()
        .execute(async (trx) => {
          const id = await insertTicket(trx, 'own-trx-rollback')
          await kit.storage.commitAttachContainer({ refDomain: 'demo', refKey: id, attachContainer: bagOf(b.name), user: USER, trx })
          throw new Error('rolled back')
        })
        .catch(() => undefined)
      expect(await tmpFiles(a.name)).toEqual([`_tmp/${a.name}`, `_tmp/${a.name}.meta.json`, `_tmp/${a.name}.placed.json`])
      expect(await storedFiles(b.name)).toHaveLength(1)
      await kit.storage.sweep()
      // Committed: the temporary file goes, the stored one stays. Rolled back: the copy goes, the temporary file stays.
      expect(await tmpFiles(a.name)).toEqual([])
      expect(await storedFiles(a.name)).toHaveLength(1)
      expect(await recordsOf(refKey)).toHaveLength(1)
      expect(await storedFiles(b.name)).toEqual([])
      expect(await tmpFiles(b.name)).toEqual([`_tmp/${b.name}`, `_tmp/${b.name}.meta.json`, `_tmp/${b.name}.placed.json`])
      // Once expired, the sweep removes the rest.
      clock = new Date(Date.now() + 30 * 86_400_000)
      try {
        await kit.storage.sweep()
      } finally {
        clock = new Date()
      }
      expect(await tmpFiles(b.name)).toEqual([])
    })
  })
}
