/**
 * `attach-storage stats`: files and bytes per domain, category and store; variants; temporary files.
 * With `--quota`: the bytes each user holds in uploads not committed yet, against `upload.userQuota`.
 */
import { PREVIEW_JOB } from '../service/previews.js'
import { pendingByUser } from '../service/quota.js'
import { TMP_PREFIX } from '../service/temporary.js'
import { type CliIo, distinctStores, EXIT, formatBytes, type GlobalOptions, openService, report } from './runtime.js'
import { variantOwner } from './walk.js'

export async function statsCommand(options: GlobalOptions & { quota?: boolean }, io: CliIo): Promise<number> {
  const { ctx, close } = await openService(options, io)
  try {
    if (options.quota) {
      const quota = ctx.config.upload.userQuota
      const users = await pendingByUser(ctx)
      const name = (key: string) => (key === '' ? '(no user)' : key)
      report(io, options, { quota, users }, [
        `upload.user-quota: ${quota ? `${quota} bytes (${formatBytes(quota)})` : 'off'}`,
        'user\tpending uploads\tbytes\tof quota',
        ...users.map(
          (u) =>
            `${name(u.userKey)}\t${u.uploads}\t${u.bytes} (${formatBytes(u.bytes)})\t${quota ? `${Math.round((u.bytes / quota) * 100)} %` : '-'}`,
        ),
        ...(users.length ? [] : ['(no pending uploads)']),
      ])
      return EXIT.ok
    }
    const { records, blobs } = await ctx.repo.operations.stats()
    const variants: Array<{ store: string; count: number; bytes: number }> = []
    for (const store of distinctStores(ctx)) {
      const v = { store: store.name, count: 0, bytes: 0 }
      for await (const e of store.list('')) {
        if (!e.key.startsWith(TMP_PREFIX) && variantOwner(e.key) !== undefined) {
          v.count++
          v.bytes += e.size
        }
      }
      variants.push(v)
    }
    const temporary = { count: 0, bytes: 0 }
    for await (const e of ctx.stores.tmpStore.list(TMP_PREFIX)) {
      if (e.key.endsWith('.meta.json')) continue
      temporary.count++
      temporary.bytes += e.size
    }
    // The rows of previews (and media) of PDFs, videos and audio are counted apart from the named variants.
    const rows = await ctx.repo.variants.countByName()
    const named = rows.filter((n) => n.name !== PREVIEW_JOB)
    const previews = rows.find((n) => n.name === PREVIEW_JOB)?.count ?? 0
    report(io, options, { records, blobs, variants, named, previews, temporary }, [
      'domain\tcategory\tstore\tfiles\tbytes',
      ...records.map((r) => `${r.refDomain}\t${r.refCategory}\t${r.store}\t${r.count}\t${r.bytes} (${formatBytes(r.bytes)})`),
      '',
      'store\tstored files\tbytes\tpending\tvariants\tvariant bytes',
      ...distinctStores(ctx).map((s) => {
        const b = blobs.find((x) => x.store === s.name) ?? { count: 0, bytes: 0, pending: 0 }
        const v = variants.find((x) => x.store === s.name)!
        return `${s.name}\t${b.count}\t${b.bytes} (${formatBytes(b.bytes)})\t${b.pending}\t${v.count}\t${v.bytes}`
      }),
      '',
      `named variants made: ${named.length ? named.map((n) => `${n.name} ${n.count}`).join(', ') : 'none'}`,
      `previews and media of PDFs, videos and audio recorded: ${previews}`,
      `temporary files: ${temporary.count}, ${temporary.bytes} bytes (${formatBytes(temporary.bytes)})`,
    ])
    return EXIT.ok
  } finally {
    await close()
  }
}
