import type { Logger } from "./logger.js";

/**
 * A process's clean stop: on the first SIGINT or SIGTERM, `close()`, then exit 0 (1 if it
 * failed). Logs `<component>.stopping` and `<component>.close_failed`.
 */
export function exitOnSignals(
  logger: Logger,
  component: string,
  close: () => Promise<unknown>,
): void {
  let stopping = false;
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      if (stopping) return;
      stopping = true;
      logger.info({ signal }, `${component}.stopping`);
      close().then(
        () => process.exit(0),
        (err: unknown) => {
          logger.error({ err }, `${component}.close_failed`);
          process.exit(1);
        },
      );
    });
  }
}
