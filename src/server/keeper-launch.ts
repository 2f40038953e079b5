import { spawn } from "node:child_process";
import { join } from "node:path";
import type { Logger } from "pino";
import { KEEPER_SOCKET_NAME } from "../protocol/index.js";
import { bundleEntry } from "./bundle-entry.js";

/** The keeper's entry, beside the server's bundle (npm run build). */
const KEEPER_ENTRY = bundleEntry("keeper");
/** An auto-started keeper holding no VM, with no server connected, stops after this long. */
export const KEEPER_IDLE_EXIT_MS = 5_000;

export interface KeeperPlace {
  /** `<data>/keeper`: its socket and log. */
  readonly dir: string;
  /** The VMs' runtime directories (its watchdog's fallback). */
  readonly runDir: string;
  /** The VMs' cgroup name (`<prefix>-vms`); unset: VMs run without one (benchmarks). */
  readonly cgroupName?: string;
  readonly logLevel: string;
}

export function keeperSocketPath(dir: string): string {
  return join(dir, KEEPER_SOCKET_NAME);
}

/**
 * Starts a keeper for this server (WARREN_KEEPER=auto): detached, in a session of its own
 * (a terminal's Ctrl-C for the server never reaches it), its output nowhere (it logs to
 * `<dir>/keeper.log`: a pipe to this server would break when the server dies), its
 * environment PATH and the log level only. It outlives the server, and stops on its own once
 * it holds no VM and no server is connected.
 */
export function launchKeeper(place: KeeperPlace, logger: Logger): void {
  const args = [
    "--enable-source-maps",
    KEEPER_ENTRY,
    "--dir",
    place.dir,
    "--run-dir",
    place.runDir,
    "--exit-when-idle-ms",
    String(KEEPER_IDLE_EXIT_MS),
    ...(place.cgroupName ? ["--cgroup", place.cgroupName] : []),
  ];
  const child = spawn(process.execPath, args, {
    detached: true,
    stdio: "ignore",
    cwd: "/",
    env: {
      PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin",
      WARREN_LOG_LEVEL: place.logLevel,
    },
  });
  child.once("error", (err) => logger.error({ err }, "keeper.launch_failed"));
  child.once("exit", (code, signal) => {
    // 3: another keeper took the socket first (it serves); anything else is worth a look.
    if (code !== 0 && code !== 3)
      logger.warn({ code, signal, log: join(place.dir, "keeper.log") }, "keeper.exited");
  });
  child.unref();
  logger.info({ pid: child.pid, dir: place.dir }, "keeper.launched");
}
