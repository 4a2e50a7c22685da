import type { AttachConfigParsed } from '../config/schema.js'
import type { Resizer } from '../media/resize.js'
import type { Registry } from '../registry/registry.js'
import type { AttachRepository } from '../repository/attach-repository.js'
import type { Store } from '../stores/store.js'
import type { Tracer } from '@opentelemetry/api'
import type { Transaction } from 'kysely'
import type { EventHub } from './events.js'
import type { fanOut } from './instrumentation.js'
import type { UrlSigner } from './signing.js'
import type { StoreSet } from './stores.js'
import type { Logger } from './types.js'
import type { VariantQueue } from './variant-queue.js'
import type { PreviewSetup } from './previews.js'

/** A step of the confirmed save at which crash tests stop the process (test-only). */
export type SaveStep = 'reserved' | 'moved' | 'recorded' | 'done' | ResumableStep

/** A step of a resumable upload's completion at which crash tests stop the process (test-only). */
export type ResumableStep = 'tus-assembled' | 'tus-kept'

/**
 * What every use case works over, built once when the service has initialised: the configuration, the
 * registry, the repository, the stores, the logger, the clock and the event hub. The use cases are
 * plain functions of it (`lookup(ctx, ...)`); `AttachStorage` is their facade.
 */
export interface ServiceContext {
  readonly config: AttachConfigParsed
  readonly registry: Registry
  readonly logger: Logger
  /** The clock. */
  readonly now: () => Date
  readonly repo: AttachRepository
  /** Every declared store, their settings, and the temporary store. */
  readonly stores: StoreSet
  readonly resizer: Resizer
  /** PDF and video previews and the media of video, audio and PDFs: the tools found, the kinds on. */
  readonly previews: PreviewSetup
  /** Signs view URLs of guarded records; undefined without `signing.secret`. */
  readonly signer: UrlSigner | undefined
  readonly events: EventHub
  /** ZIP downloads streaming now (bounded by `zip.concurrency`). */
  readonly zipSlots: { running: number }
  /** The host's observers, as one (`observe.active` is false without any). */
  readonly observe: ReturnType<typeof fanOut>
  /** The OpenTelemetry tracer, when an SDK was registered when the service started. */
  readonly tracer: Tracer | undefined
  /**
   * Where named-variant jobs go; undefined when no category names a variant, or in a process that runs
   * no background work (the command-line tool). Set once the registrar has run.
   */
  variantJobs: VariantQueue | undefined
  /**
   * The host's transaction a commit runs in (`commitAttachContainer({trx})`); `repo` then works on it.
   * Undefined everywhere else.
   */
  readonly hostTransaction?: Transaction<any>
  /** Test-only pause points of the confirmed save. */
  readonly testPause: ((step: SaveStep, request: Request | null) => void | Promise<void>) | undefined
  /** A declared store by name (a configuration error when it is not). */
  store(name: string): Store
}
