import { rename, stat } from "node:fs/promises";
import { join } from "node:path";
import pino from "pino";
import { handleStrayErrors } from "../shared/stray-errors.js";
import { VmCgroups } from "../vmm/qemu/cgroups.js";
import { Keeper } from "./keeper.js";
import { parseKeeperArgs } from "./keeper-args.js";
import { ensureKeeperDir, KeeperRunningError } from "./keeper-socket.js";

/**
 * The keeper process (dist/keeper/main.mjs): started by the node server for itself
 * (WARREN_KEEPER=auto: detached, its own session, `--exit-when-idle-ms`) or by a supervisor
 * (a systemd unit). It logs to `<dir>/keeper.log`, never to a server's pipe (a server that
 * dies would take its reader with it). SIGTERM or SIGINT stop it, and its VMMs with it.
 */
const LOG_FILE = "keeper.log";
/** A log past this size is moved to keeper.log.1 at start. */
const LOG_ROTATE_BYTES = 8 * 1024 * 1024;

let args: ReturnType<typeof parseKeeperArgs>;
try {
  args = parseKeeperArgs(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`warren keeper: ${(err as Error).message}\n`);
  process.exit(2);
}
process.chdir("/");
try {
  await ensureKeeperDir(args.dir);
} catch (err) {
  process.stderr.write(`warren keeper: ${(err as Error).message}\n`);
  process.exit(1);
}
const logFile = join(args.dir, LOG_FILE);
const size = (await stat(logFile).catch(() => undefined))?.size ?? 0;
if (size > LOG_ROTATE_BYTES) await rename(logFile, `${logFile}.1`).catch(() => {});
const logger = pino(
  { level: process.env.WARREN_LOG_LEVEL ?? "info", base: { component: "keeper" } },
  args.logToStderr ? pino.destination(2) : pino.destination({ dest: logFile, append: true }),
);
// Its exit is every VMM's: an error no code path caught is logged and it goes on.
handleStrayErrors(logger, "keeper", "continue");
// No terminal: a hangup means nothing to it.
process.on("SIGHUP", () => {});

let keeper: Keeper;
try {
  keeper = await Keeper.start({
    dir: args.dir,
    runDir: args.runDir,
    cgroups: args.cgroup === undefined ? undefined : VmCgroups.detect(args.cgroup),
    idleExitMs: args.exitWhenIdleMs,
    logger,
  });
} catch (err) {
  logger.error({ err }, "keeper.start_failed");
  process.stderr.write(`warren keeper: ${(err as Error).message}\n`);
  process.exit(err instanceof KeeperRunningError ? 3 : 1);
}
for (const signal of ["SIGTERM", "SIGINT"] as const) {
  process.on(signal, () => void keeper.stop(signal));
}
await keeper.stopped;
logger.flush();
process.exit(0);
