import { basename, dirname, join } from "node:path";
import { BashKernel } from "./bash-kernel.js";
import type { KernelStarter } from "./contexts.js";
import { DriverKernel } from "./driver-kernel.js";

/** The command lines that start each driver (kernels/PROTOCOL.md), program first. */
export interface DriverCommands {
  readonly python: readonly string[];
  /** Given `--language javascript|typescript` after these. */
  readonly javascript: readonly string[];
}

/** The drivers as built beside envd's bundle (`<dir>/python/warren_kernel.py`, `<dir>/js-kernel.mjs`). */
export function builtDrivers(dir: string): DriverCommands {
  return {
    python: ["/usr/bin/python3", join(dir, "python", "warren_kernel.py")],
    javascript: [...nodeCommand(), join(dir, "js-kernel.mjs")],
  };
}

/**
 * Starts each language's kernel as root (E2B's kernels run as root), in the context's cwd,
 * with a login-like environment; the sandbox's env vars reach it with each run.
 */
export function kernelStarter(
  drivers: DriverCommands,
  env: () => Record<string, string>,
): KernelStarter {
  const baseEnv = () => ({
    PATH: process.env.PATH ?? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    HOME: "/root",
    USER: "root",
    LOGNAME: "root",
    LANG: "C.UTF-8",
    ...env(),
  });
  const driver = (language: string, cwd: string, [command, ...args]: readonly string[]) =>
    new DriverKernel({ language, command: command as string, args, cwd, env: baseEnv() });
  return (language, cwd) => {
    switch (language) {
      case "bash":
        return new BashKernel({ cwd, env: baseEnv() });
      case "python":
        return driver(language, cwd, drivers.python);
      case "javascript":
      case "typescript":
        return driver(language, cwd, [...drivers.javascript, "--language", language]);
    }
  };
}

/**
 * How to run this Node: in a guest envd runs through the agent drive's own loader
 * (`/.warren/lib/ld-linux-x86-64.so.2 --library-path /.warren/lib /.warren/bin/node`), and
 * `process.execPath` names the loader, not node.
 */
function nodeCommand(): string[] {
  const exec = process.execPath;
  if (!basename(exec).startsWith("ld-linux")) return [exec];
  const lib = dirname(exec);
  return [exec, "--library-path", lib, join(dirname(lib), "bin", "node")];
}
