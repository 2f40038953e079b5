import type { Catalog } from "../catalog/index.js";
import type { Logger } from "../shared/index.js";

export interface PurgeOptions {
  /** How long what is purged is kept (WARREN_KILLED_RETENTION_MS, WARREN_EVENTS_RETENTION_MS). */
  readonly retentionMs: number;
  /** Time between sweeps; default: the retention, within 1 min .. 1 h. */
  readonly intervalMs?: number;
  readonly logger: Logger;
}

export interface Purge {
  /** One sweep now; resolves to how many rows it purged (0 when it failed). */
  sweep(): Promise<number>;
  /** No more sweeps; resolves once one in flight is done (before the catalog closes). */
  stop(): Promise<void>;
}

const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;

/**
 * Killed sandboxes' env vars and tokens, forgotten once killed longer than the retention ago
 * (`Catalog.purgeKilledSecrets`): killed rows are history nobody reads secrets from, and a
 * stolen catalog file should not hand out months of API keys clients passed in as env vars.
 */
export function startKilledPurge(
  catalog: Pick<Catalog, "purgeKilledSecrets">,
  options: PurgeOptions,
): Purge {
  return startPurge((before) => catalog.purgeKilledSecrets(before), options, "killed_secrets");
}

/**
 * Sandboxes' history and lifecycle events (E2B keeps them 7 days), deleted once older than
 * the retention (`Catalog.purgeEvents`): the table would otherwise grow with every sandbox.
 */
export function startEventsPurge(
  catalog: Pick<Catalog, "purgeEvents">,
  options: PurgeOptions,
): Purge {
  return startPurge((before) => catalog.purgeEvents(before), options, "events");
}

/**
 * Sweeps at once and then periodically, purging what is older than the retention: it lives
 * at most the retention plus one interval. A failed sweep is logged
 * (`catalog.<what>_purge_failed`) and retried at the next one.
 */
function startPurge(
  purge: (before: string) => Promise<number>,
  options: PurgeOptions,
  what: string,
): Purge {
  const { retentionMs, logger } = options;
  const intervalMs = options.intervalMs ?? Math.min(HOUR_MS, Math.max(MINUTE_MS, retentionMs));
  let running: Promise<number> | undefined;

  const purgeOnce = async (): Promise<number> => {
    try {
      const before = new Date(Date.now() - retentionMs).toISOString();
      const purged = await purge(before);
      if (purged > 0) logger.info({ purged, before }, `catalog.${what}_purged`);
      return purged;
    } catch (err) {
      logger.warn(
        { err: err instanceof Error ? err.message : String(err) },
        `catalog.${what}_purge_failed`,
      );
      return 0;
    }
  };
  // One sweep at a time: a slow one is not stacked on by the next tick.
  const sweep = (): Promise<number> => {
    running ??= purgeOnce().finally(() => {
      running = undefined;
    });
    return running;
  };

  void sweep();
  // unref: the sweep never keeps a stopping server alive.
  const timer = setInterval(() => void sweep(), intervalMs).unref();
  return {
    sweep,
    async stop() {
      clearInterval(timer);
      await running;
    },
  };
}
