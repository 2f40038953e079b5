import type { Catalog } from "../catalog/index.js";
import type { Logger } from "../shared/index.js";

export interface KilledPurgeOptions {
  /** How long a killed sandbox's secrets are kept after its kill (WARREN_KILLED_RETENTION_MS). */
  readonly retentionMs: number;
  /** Time between sweeps; default: the retention, within 1 min .. 1 h. */
  readonly intervalMs?: number;
  readonly logger: Logger;
}

export interface KilledPurge {
  /** One sweep now; resolves to how many sandboxes it purged (0 when it failed). */
  sweep(): Promise<number>;
  /** No more sweeps; resolves once one in flight is done (before the catalog closes). */
  stop(): Promise<void>;
}

const MINUTE_MS = 60_000;
const HOUR_MS = 60 * MINUTE_MS;

/**
 * Sweeps the catalog at once and then periodically, forgetting the env vars and tokens of
 * sandboxes killed longer than the retention ago (`Catalog.purgeKilledSecrets`): killed rows
 * are history nobody reads secrets from, and a stolen catalog file should not hand out
 * months of API keys clients passed in as env vars. A secret thus lives at most the
 * retention plus one interval. A failed sweep is logged and retried at the next one.
 */
export function startKilledPurge(
  catalog: Pick<Catalog, "purgeKilledSecrets">,
  options: KilledPurgeOptions,
): KilledPurge {
  const { retentionMs, logger } = options;
  const intervalMs = options.intervalMs ?? Math.min(HOUR_MS, Math.max(MINUTE_MS, retentionMs));
  let running: Promise<number> | undefined;

  const purgeOnce = async (): Promise<number> => {
    try {
      const killedBefore = new Date(Date.now() - retentionMs).toISOString();
      const purged = await catalog.purgeKilledSecrets(killedBefore);
      if (purged > 0) logger.info({ purged, killedBefore }, "catalog.killed_secrets_purged");
      return purged;
    } catch (err) {
      logger.warn(
        { err: err instanceof Error ? err.message : String(err) },
        "catalog.killed_purge_failed",
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
