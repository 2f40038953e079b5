import { basename, dirname, join } from "node:path";
import { BashKernel } from "./bash-kernel.js";
import type { KernelStarter } from "./contexts.js";
import { DriverKernel } from "./driver-kernel.js";
import { type DriverCommand, spawnDriver } from "./driver-process.js";
import type { Language } from "./languages.js";
import { PythonZygote } from "./python-zygote.js";

/** The command lines that start each driver (kernels/PROTOCOL.md), program first. */
export interface DriverCommands {
  /** Given the kernels' socket name after these (warren_zygote.py). */
  readonly pythonZygote: readonly string[];
  /** Given `--language javascript|typescript` after these. */
  readonly javascript: readonly string[];
  readonly r: readonly string[];
}

/**
 * The drivers as built beside envd's bundle (`<dir>/python/warren_zygote.py`,
 * `<dir>/js-kernel.mjs`, `<dir>/r/warren_kernel.R`).
 */
export function builtDrivers(dir: string): DriverCommands {
  return {
    pythonZygote: ["/usr/bin/python3", join(dir, "python", "warren_zygote.py")],
    javascript: [...nodeCommand(), join(dir, "js-kernel.mjs")],
    // --vanilla: no site or user profile decides what a context starts with.
    r: ["/usr/bin/Rscript", "--vanilla", join(dir, "r", "warren_kernel.R")],
  };
}

/**
 * Starts each language's kernel as root (E2B's kernels run as root), in the context's cwd,
 * with a login-like environment; the sandbox's env vars reach it with each run. Python's
 * are forked from a zygote (python-zygote.ts), started with the first.
 */
export function kernelStarter(
  drivers: DriverCommands,
  env: () => Record<string, string>,
  /** Where forked Python kernels connect back to envd (python-zygote.ts). */
  kernelSocket: string,
): KernelStarter {
  const baseEnv = () => ({
    PATH: process.env.PATH ?? "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    HOME: "/root",
    USER: "root",
    LOGNAME: "root",
    LANG: "C.UTF-8",
    ...env(),
  });
  const zygote = new PythonZygote(drivers.pythonZygote, baseEnv, kernelSocket);
  return {
    start(language, cwd) {
      switch (language) {
        case "bash":
          return new BashKernel({ cwd, env: baseEnv() });
        case "python":
          return new DriverKernel(language, zygote.fork(cwd, baseEnv()));
        case "javascript":
        case "typescript":
          return spawned(language, [...drivers.javascript, "--language", language], cwd, "request");
        case "r":
          return spawned(language, drivers.r, cwd, "SIGINT");
      }
    },
    close: () => zygote.close(),
  };

  function spawned(
    language: Language,
    [command, ...args]: readonly string[],
    cwd: string,
    interruptBy: DriverCommand["interruptBy"],
  ): DriverKernel {
    const driver = spawnDriver({
      command: command as string,
      args,
      cwd,
      env: baseEnv(),
      interruptBy,
    });
    return new DriverKernel(language, driver);
  }
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
