/**
 * `attach-storage variants purge|make --domain D`: drops the stored resize variants of a domain's
 * records, or makes the named variants its categories declare that are not made yet, and the previews
 * and media of its PDFs, videos and audio files that have none (saved before previews were on).
 */
import type { AttachmentRecord } from '../model.js'
import type { ServiceContext } from '../service/context.js'
import { storeKey } from '../service/layout.js'
import { madeVariants, makeNamedVariant, namedVariantsOf } from '../service/variants.js'
import { makePreview, PREVIEW_JOB, previewDone, previewKindOf } from '../service/previews.js'
import { startProgress } from './progress.js'
import { type CliIo, EXIT, forEachConcurrent, type GlobalOptions, openService, report, UsageError } from './runtime.js'
import { PAGE } from './walk.js'

export interface VariantsOptions extends GlobalOptions {
  domain?: string
  /** `make`: only this category. */
  category?: string
  /** `make`: variants made at once. @default 2 */
  concurrency?: number
}

export async function variantsCommand(action: string, options: VariantsOptions, io: CliIo): Promise<number> {
  if (action !== 'purge' && action !== 'make') throw new UsageError(`variants: unknown action "${action}" (purge or make)`)
  if (!options.domain) throw new UsageError(`variants ${action} needs --domain`)
  const { ctx, close } = await openService(options, io)
  try {
    return action === 'purge' ? await purge(ctx, options.domain, options, io) : await make(ctx, options.domain, options, io)
  } finally {
    await close()
  }
}

/** Every live record of a domain, page by page in id order, until Ctrl-C. */
async function* domainRecords(ctx: ServiceContext, domain: string, signal: AbortSignal): AsyncGenerator<AttachmentRecord[]> {
  let after = 0
  for (;;) {
    const page = await ctx.repo.operations.pageDomainRecords(domain, after, PAGE)
    if (page.length) yield page
    if (page.length < PAGE || signal.aborted) return
    after = page[page.length - 1]!.id
  }
}

async function purge(ctx: ServiceContext, domain: string, options: VariantsOptions, io: CliIo): Promise<number> {
  let records = 0
  let removed = 0
  for await (const page of domainRecords(ctx, domain, io.signal)) {
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
  }
  // The named ones are no longer listed; a view or `variants make` makes them again.
  const forgotten = io.signal.aborted ? 0 : await ctx.repo.variants.forgetDomain(domain)
  report(io, options, { domain, records, removed, namedForgotten: forgotten, interrupted: io.signal.aborted }, [
    `removed ${removed} variant(s) of ${records} record(s) of domain ${domain}${io.signal.aborted ? ' (interrupted)' : ''}`,
  ])
  return io.signal.aborted ? EXIT.interrupted : EXIT.ok
}

/** The records among these whose preview job has not run to its end (none made, failed or analysed yet). */
async function previewsWanted(ctx: ServiceContext, records: readonly AttachmentRecord[]): Promise<Set<number>> {
  const kinds = records.filter((r) => {
    const kind = previewKindOf(r.fileType)
    return kind !== undefined && ctx.previews.on(kind)
  })
  if (!kinds.length) return new Set()
  const done = new Set<number>()
  for (const row of await ctx.repo.variants.ofRecords(kinds.map((r) => r.id))) {
    if (row.name === PREVIEW_JOB && previewDone(row.spec)) done.add(row.fileId)
  }
  return new Set(kinds.filter((r) => !done.has(r.id)).map((r) => r.id))
}

async function make(ctx: ServiceContext, domain: string, options: VariantsOptions, io: CliIo): Promise<number> {
  if (!ctx.registry.domains().some((d) => d.name === domain)) throw new UsageError(`variants make: domain "${domain}" is not configured`)
  const registered = ctx.registry.domain(domain)
  if (options.category !== undefined && !registered.categories.has(options.category)) {
    throw new UsageError(`variants make: category "${options.category}" is not configured in domain ${domain}`)
  }
  const previewing = ctx.previews.on('pdf') || ctx.previews.on('video') || ctx.previews.on('audio')
  // Every category when previews are on (a PDF's, a video's or an audio file's preview and media are
  // made wherever it is); else those naming variants.
  const named = [...registered.categories.values()].filter(
    (c) => (previewing || c.variants.size > 0) && (options.category === undefined || c.name === options.category),
  )
  if (!named.length) {
    throw new UsageError(`variants make: no category of domain ${domain} names variants (categories.<name>.variants), and previews are off`)
  }
  const concurrency = options.concurrency ?? 2
  const total = (await ctx.repo.operations.stats()).records
    .filter((r) => r.refDomain === domain && named.some((c) => c.name === r.refCategory))
    .reduce((n, r) => n + r.count, 0)
  const progress = startProgress('variants make', total, io.stderr)
  const counts = { records: 0, made: 0, existing: 0, original: 0, previews: 0, previewsFailed: 0 }
  const problems: Array<{ id: number; name: string; reason: string }> = []
  async function* jobs() {
    for await (const page of domainRecords(ctx, domain, io.signal)) {
      const wanted = page.filter((r) => named.some((c) => c.name === r.refCategory))
      const made = await madeVariants(ctx, wanted)
      const previews = await previewsWanted(ctx, wanted)
      for (const r of wanted) {
        counts.records++
        const variants = namedVariantsOf(ctx, r)
        // A record's preview (and media) first: its named variants are made from it.
        const missing = [
          ...(previews.has(r.id) ? [PREVIEW_JOB] : []),
          ...[...(variants?.keys() ?? [])].filter((n) => !made.get(r.id)?.includes(n)),
        ]
        counts.existing += (variants?.size ?? 0) - missing.filter((n) => n !== PREVIEW_JOB).length
        if (!missing.length) progress.tick(0)
        else yield { r, missing }
      }
    }
  }
  await forEachConcurrent(jobs(), concurrency, io.signal, async ({ r, missing }) => {
    for (const name of missing) {
      try {
        if (name === PREVIEW_JOB) {
          const outcome = await makePreview(ctx, { fileId: r.id, name })
          if (outcome === 'made' || outcome === 'analysed') counts.previews++
          else if (outcome === 'failed') counts.previewsFailed++
          continue
        }
        const outcome = await makeNamedVariant(ctx, { fileId: r.id, name })
        if (outcome === 'made') counts.made++
        else if (outcome === 'original') counts.original++
        else if (outcome === 'exists') counts.existing++
      } catch (err) {
        problems.push({ id: r.id, name, reason: err instanceof Error ? err.message : String(err) })
      }
    }
    progress.tick(r.fileSize)
  })
  progress.stop()
  const interrupted = io.signal.aborted
  report(io, options, { domain, ...counts, problems, interrupted }, [
    `variants make, domain ${domain}: ${counts.made} made, ${counts.original} served by the original (within the box), ${counts.existing} made before, ${counts.previews} preview(s) or media made, ${counts.previewsFailed} file(s) that could not be previewed, over ${counts.records} record(s)${interrupted ? ' (interrupted)' : ''}`,
    ...problems.map((p) => `attachment ${p.id}, variant ${p.name}: ${p.reason}`),
  ])
  return interrupted ? EXIT.interrupted : problems.length ? EXIT.problems : EXIT.ok
}
