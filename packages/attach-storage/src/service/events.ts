import type { AttachEventHook, AttachEvents, Logger } from './types.js'

/**
 * The service's events: hooks run after the fact is durable, without delaying the request; a hook that
 * throws is logged and undoes nothing.
 */
export class EventHub {
  readonly #hooks = new Map<keyof AttachEvents, Set<AttachEventHook<any>>>()
  readonly #pending = new Set<Promise<void>>()
  readonly #logger: Logger

  constructor(logger: Logger) {
    this.#logger = logger
  }

  /** Registers a hook; returns a function that removes it. */
  on<E extends keyof AttachEvents>(event: E, hook: AttachEventHook<E>): () => void {
    let set = this.#hooks.get(event)
    if (!set) {
      set = new Set()
      this.#hooks.set(event, set)
    }
    set.add(hook)
    return () => set.delete(hook)
  }

  /** Starts every hook of `event` with `payload`. */
  emit<E extends keyof AttachEvents>(event: E, payload: AttachEvents[E]): void {
    for (const hook of this.#hooks.get(event) ?? []) {
      const p: Promise<void> = Promise.resolve()
        .then(() => hook(payload))
        .catch((err) => this.#logger.error(`attach-storage: a "${event}" hook failed`, err))
        .finally(() => this.#pending.delete(p))
      this.#pending.add(p)
    }
  }

  /** Resolves once every hook started so far has finished. */
  async drain(): Promise<void> {
    while (this.#pending.size) await Promise.all([...this.#pending])
  }
}
