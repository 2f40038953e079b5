import pino from "pino";
import { loadConfig, loggableConfig } from "../shared/config.js";
import { exitOnSignals } from "../shared/exit-on-signals.js";
import { logDestination } from "../shared/log-destination.js";
import { handleStrayErrors } from "../shared/stray-errors.js";
import { startNodeServer } from "./node-server.js";

/**
 * The node server as a process: settings from the environment, logs on stdout, a clean stop
 * on SIGINT/SIGTERM. `npm start` runs it (bundled as dist/server/main.mjs).
 */
export async function runNodeServer(
  options: Parameters<typeof startNodeServer>[2] = {},
): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (err) {
    process.stderr.write(`warren: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const logger = pino(
    { level: config.logLevel, base: undefined },
    logDestination(config.logFormat),
  );
  // The keeper holds the VMMs: the server's exit loses no sandbox (the next start re-adopts
  // them), so after an error no code path caught it exits, for its supervisor to start it
  // again in a known state.
  handleStrayErrors(logger, "server", "exit");
  logger.info({ config: loggableConfig(config) }, "server.config");
  const server = await startNodeServer(config, logger, options);
  // SIGUSR2: a stop for an upgrade, whatever WARREN_ON_STOP says: running sandboxes are left
  // in the keeper for the next server (deploy/systemd: `systemctl kill -s USR2 warren-node`).
  exitOnSignals(
    logger,
    "server",
    (signal) => server.close(signal === "SIGUSR2" ? { onStop: "detach" } : {}),
    ["SIGUSR2"],
  );
  server.ready.catch(() => process.exit(1));
}
