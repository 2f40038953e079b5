import type { Logger } from "./logger.js";

/**
 * A process's clean stop: on the first SIGINT or SIGTERM (or one of `more`), `close(signal)`,
 * then exit 0 (1 if it failed). Logs `<component>.stopping` and `<component>.close_failed`.
 */
export function exitOnSignals(
  logger: Logger,
  component: string,
  close: (signal: NodeJS.Signals) => Promise<unknown>,
  more: readonly NodeJS.Signals[] = [],
): void {
  let stopping = false;
  for (const signal of ["SIGINT", "SIGTERM", ...more] as NodeJS.Signals[]) {
    process.on(signal, () => {
      if (stopping) return;
      stopping = true;
      logger.info({ signal }, `${component}.stopping`);
      close(signal).then(
        () => process.exit(0),
        (err: unknown) => {
          logger.error({ err }, `${component}.close_failed`);
          process.exit(1);
        },
      );
    });
  }
}
