import type { Catalog, EventRow } from "../catalog/index.js";
import type { LifecycleType } from "../protocol/index.js";
import type { Logger } from "../shared/index.js";
import { phase } from "../shared/phases.js";
import {
  type EventFields,
  type EventName,
  type EventSpec,
  LIFECYCLE_EVENTS,
  type LifecycleEvent,
} from "./events.js";

export interface LifecycleEventsOptions {
  /** The emitting component's logger: the lines are its own. */
  readonly logger: Logger;
  /** Where the sandboxes' history is kept (the catalog's events table). */
  readonly catalog: Pick<Catalog, "recordEvent">;
}

export type EventListener = (event: LifecycleEvent) => void;

/** What lifecycle events can be followed on: the orchestrator, the template builds. */
export interface EventSource {
  /** Calls `listener` with each event as it is emitted; returns the unsubscribe. */
  onEvent(listener: EventListener): () => void;
}

/** An event in a sandbox's history is recorded before the emitting operation goes on. */
export type Emitted<N extends EventName> = (typeof LIFECYCLE_EVENTS)[N] extends {
  readonly history: object;
}
  ? Promise<void>
  : undefined;

/** The table's entries as `emit` reads them, whatever the event. */
const SPECS: { readonly [N in EventName]: EventSpec<EventFields[N]> } = LIFECYCLE_EVENTS;

/**
 * Emits the lifecycle events of `events.ts`: each one's log line (its name, its level, its
 * fields), its entry in the sandbox's history where the table says so, and a call to every
 * subscriber. Recording never fails the operation that emits (a failure is logged).
 */
export class LifecycleEvents implements EventSource {
  readonly #o: LifecycleEventsOptions;
  readonly #listeners = new Set<EventListener>();

  constructor(options: LifecycleEventsOptions) {
    this.#o = options;
  }

  emit<N extends EventName>(name: N, fields: EventFields[N]): Emitted<N> {
    const spec = SPECS[name] as EventSpec<unknown>;
    if (spec.level) this.#o.logger[spec.level](fields as Record<string, unknown>, name);
    const event = { name, fields } as LifecycleEvent;
    for (const listener of this.#listeners) {
      try {
        listener(event);
      } catch (err) {
        this.#o.logger.error({ err, event: name }, "events.listener_failed");
      }
    }
    const history = spec.history as HistoryOf | undefined;
    if (!history) return undefined as Emitted<N>;
    const { sandboxId } = fields as { sandboxId: string };
    const lifecycle =
      typeof history.lifecycle === "function" ? history.lifecycle(fields) : history.lifecycle;
    return phase("orchestrator.history", () =>
      this.#record({
        at: new Date().toISOString(),
        sandboxId,
        kind: history.kind ?? name,
        detail: history.detail(fields),
        ...(lifecycle && { lifecycle }),
      }),
    ) as Emitted<N>;
  }

  onEvent(listener: EventListener): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async #record(event: EventRow): Promise<void> {
    try {
      await this.#o.catalog.recordEvent(event);
    } catch (err) {
      const { sandboxId, kind } = event;
      this.#o.logger.warn({ err, sandboxId, kind }, "catalog.event_failed");
    }
  }
}

type HistoryOf = {
  readonly kind?: string;
  readonly detail: (fields: unknown) => Record<string, unknown>;
  readonly lifecycle?: LifecycleType | ((fields: unknown) => LifecycleType | false);
};
