/** Scanning a received file with ClamAV's clamd before it is kept (a category's `scan`, media/clamd.ts). */
import { AttachStorageError } from '../errors.js'
import { ClamdError, clamdScan } from '../media/clamd.js'
import type { RegisteredCategory } from '../registry/registry.js'
import type { ServiceContext } from './context.js'
import { tmpKey } from './temporary.js'
import type { ReceivedFile } from './types.js'
import { discardReceived } from './uploads.js'

/** The refusal item of a file that is not kept. */
type Refusal = { displayName: string; size: number; error: { code: string; message: string } }

/**
 * Streams a received file (in the temporary area) to its category's clamd, when the category scans.
 * Answers nothing for a clean file (or, with `onError: 'accept'`, one clamd gave no verdict on: logged),
 * or the refusal item of an infected one (`infected`, naming the signature) or of one over clamd's
 * `StreamMaxLength` (`too-large`), its file removed and its quota freed. With no verdict, removes the file
 * and throws a 503 `scan-unavailable` whose message says what went wrong (never clamd's address).
 */
export async function scanReceived(ctx: ServiceContext, f: ReceivedFile, category: RegisteredCategory): Promise<Refusal | undefined> {
  let error: Refusal['error'] | undefined
  try {
    error = await scanTemporary(ctx, f.name, f.displayName, category)
  } catch (err) {
    await discardReceived(ctx, [f])
    throw err
  }
  if (!error) return undefined
  await discardReceived(ctx, [f])
  return { displayName: f.displayName, size: f.size, error }
}

/**
 * The scan of the temporary file `name` alone, removing nothing: its refusal (`infected` or `too-large`),
 * nothing when it is clean, unscanned and accepted, or its category does not scan; throws 503
 * `scan-unavailable` when clamd gave no verdict and the category refuses then.
 */
export async function scanTemporary(
  ctx: ServiceContext,
  name: string,
  displayName: string,
  category: RegisteredCategory,
): Promise<Refusal['error'] | undefined> {
  const scan = category.scan
  if (!scan) return undefined
  try {
    const source = (await ctx.stores.tmpStore.get(tmpKey(name))) as AsyncIterable<Uint8Array>
    const verdict = await clamdScan(source, { address: scan.clamd })
    ctx.observe.scan(verdict.infected ? 'infected' : 'clean')
    if (!verdict.infected) return undefined
    ctx.logger.warn(`attach-storage: ${displayName} (${name}) is infected: ${verdict.signature}; not kept`)
    return { code: 'infected', message: `${displayName} is infected: ${verdict.signature}` }
  } catch (err) {
    if (!(err instanceof ClamdError)) throw err
    if (scan.onError === 'accept') {
      ctx.observe.scan('unscanned')
      ctx.logger.warn(`attach-storage: ${displayName} (${name}) kept unscanned (scan.on-error: accept): ${err.message} [${scan.clamd}]`)
      return undefined
    }
    if (err.failure === 'size-limit') {
      ctx.observe.scan('too-large')
      return { code: 'too-large', message: `${displayName} is larger than the virus scanner accepts (clamd's StreamMaxLength)` }
    }
    ctx.observe.scan('unavailable')
    ctx.logger.error(`attach-storage: the virus scan of ${name} failed [${scan.clamd}]:`, err)
    throw new AttachStorageError('scan-unavailable', `The virus scanner is unavailable: ${err.message}`, {
      status: 503,
      cause: err,
      headers: { 'retry-after': '30' },
    })
  }
}
