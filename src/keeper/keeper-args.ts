import { isAbsolute } from "node:path";

/** The keeper's command line (its server or its unit writes it; nothing else is read). */
export interface KeeperArgs {
  /** `--dir`: its directory (socket, log). */
  readonly dir: string;
  /** `--run-dir`: the VMs' runtime directories (the watchdog's fallback). */
  readonly runDir: string;
  /** `--cgroup`: the VMs' cgroup name (`<prefix>-vms`); unset: VMs run without one. */
  readonly cgroup?: string;
  /** `--exit-when-idle-ms`: stop once idle this long (a keeper a server started for itself). */
  readonly exitWhenIdleMs?: number;
  /** `--log-stderr`: log to stderr instead of `<dir>/keeper.log` (a supervisor's journal). */
  readonly logToStderr: boolean;
}

/** Parses `--name value` pairs; throws naming the first bad one. */
export function parseKeeperArgs(argv: readonly string[]): KeeperArgs {
  const values = new Map<string, string>();
  let logToStderr = false;
  for (let i = 0; i < argv.length; i++) {
    const name = argv[i] as string;
    if (name === "--log-stderr") {
      logToStderr = true;
      continue;
    }
    const value = argv[i + 1];
    if (!["--dir", "--run-dir", "--cgroup", "--exit-when-idle-ms"].includes(name) || !value)
      throw new Error(`unknown or incomplete option ${JSON.stringify(name)}`);
    values.set(name, value);
    i += 1;
  }
  const path = (name: string) => {
    const value = values.get(name);
    if (!value || !isAbsolute(value)) throw new Error(`${name} <absolute path> is required`);
    return value;
  };
  const cgroup = values.get("--cgroup");
  if (cgroup !== undefined && !/^[A-Za-z0-9._-]+$/.test(cgroup))
    throw new Error(`--cgroup ${JSON.stringify(cgroup)} is not a cgroup name`);
  const idle = values.get("--exit-when-idle-ms");
  const exitWhenIdleMs = idle === undefined ? undefined : Number(idle);
  if (exitWhenIdleMs !== undefined && !(Number.isInteger(exitWhenIdleMs) && exitWhenIdleMs >= 0))
    throw new Error(`--exit-when-idle-ms ${JSON.stringify(idle)} is not a number of ms`);
  return {
    dir: path("--dir"),
    runDir: path("--run-dir"),
    ...(cgroup !== undefined && { cgroup }),
    ...(exitWhenIdleMs !== undefined && { exitWhenIdleMs }),
    logToStderr,
  };
}
