import pino from "pino";
import pretty from "pino-pretty";
import { loadConfig } from "../shared/config.js";
import { startNodeServer } from "./node-server.js";

/** `npm start` runs this (bundled as dist/server/main.mjs) once the host is set up. */
async function main(): Promise<void> {
  let config: ReturnType<typeof loadConfig>;
  try {
    config = loadConfig();
  } catch (err) {
    process.stderr.write(`warren: ${err instanceof Error ? err.message : String(err)}\n`);
    process.exit(2);
  }
  const logger = pino({ level: config.logLevel, base: undefined }, logOutput(config.logFormat));
  logger.info(
    { config: { ...config, apiKeys: `${config.apiKeys.length} extra` } },
    "server.config",
  );
  const server = await startNodeServer(config, logger);
  let stopping = false;
  for (const signal of ["SIGINT", "SIGTERM"] as const) {
    process.on(signal, () => {
      if (stopping) return;
      stopping = true;
      logger.info({ signal }, "server.stopping");
      server.close().then(
        () => process.exit(0),
        (err: unknown) => {
          logger.error({ err }, "server.close_failed");
          process.exit(1);
        },
      );
    });
  }
  server.ready.catch(() => process.exit(1));
}

/**
 * Where log lines go: stdout, as JSON lines (collectors, journald, the tests), or readable
 * ones for a person at a terminal (WARREN_LOG_FORMAT, auto: by whether stdout is one).
 */
function logOutput(format: "auto" | "pretty" | "json") {
  const readable = format === "pretty" || (format === "auto" && process.stdout.isTTY === true);
  return readable
    ? pretty({ sync: true, colorize: process.stdout.isTTY === true, ignore: "pid,hostname" })
    : undefined;
}

void main();
