/** `attach-storage variants purge --domain D`: drops the stored resize variants of a domain's records. */
import { storeKey } from '../service/layout.js'
import { type CliIo, EXIT, type GlobalOptions, openService, report, UsageError } from './runtime.js'
import { PAGE } from './walk.js'

export async function variantsCommand(action: string, options: GlobalOptions & { domain?: string }, io: CliIo): Promise<number> {
  if (action === 'make') {
    throw new UsageError('variants make: no named variants are configured in this version; variants are made on first view')
  }
  if (action !== 'purge') throw new UsageError(`variants: unknown action "${action}" (purge or make)`)
  if (!options.domain) throw new UsageError('variants purge needs --domain')
  const { ctx, close } = await openService(options, io)
  try {
    let records = 0
    let removed = 0
    let after = 0
    for (;;) {
      const page = await ctx.repo.pageDomainRecords(options.domain, after, PAGE)
      for (const r of page) {
        if (io.signal.aborted) break
        const store = ctx.stores.stores.get(r.store)
        if (!store) continue
        records++
        for await (const e of store.list(`${storeKey(r.savedDir, '')}_v/${r.id}/`)) {
          await store.delete(e.key)
          removed++
        }
      }
      if (page.length < PAGE || io.signal.aborted) break
      after = page[page.length - 1]!.id
    }
    // Variants the running service still counts are made again on the next view.
    report(io, options, { domain: options.domain, records, removed }, [
      `removed ${removed} variant(s) of ${records} record(s) of domain ${options.domain}`,
    ])
    return io.signal.aborted ? EXIT.interrupted : EXIT.ok
  } finally {
    await close()
  }
}
