// Installs the locked dependencies when node_modules is missing or older than the lockfile,
// so that `npm start` and `npm test` work straight from a fresh clone. Built-ins only.
import { spawnSync } from "node:child_process";
import { existsSync, statSync } from "node:fs";
import { dirname, join } from "node:path";

export function ensureDeps(root) {
  const marker = join(root, "node_modules", ".package-lock.json");
  const lock = join(root, "package-lock.json");
  if (existsSync(marker) && statSync(marker).mtimeMs >= statSync(lock).mtimeMs) return;
  process.stderr.write("setup: installing npm dependencies (npm ci)\n");
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  // Native modules without a reachable prebuilt (better-sqlite3: its binaries live on GitHub)
  // compile against the running Node's own headers instead of downloading them.
  const prefix = dirname(dirname(process.execPath));
  const env = existsSync(join(prefix, "include", "node", "node_api.h"))
    ? { ...process.env, npm_config_nodedir: prefix }
    : process.env;
  const result = spawnSync(npm, ["ci", "--no-audit", "--no-fund"], {
    cwd: root,
    stdio: "inherit",
    env,
  });
  if (result.status !== 0) {
    process.stderr.write("setup: npm ci failed\n");
    process.exit(result.status ?? 1);
  }
}

/** The locked dependencies, then the build (agent bundle, native addons): what tests and benches run. */
export function ensureBuilt(root) {
  ensureDeps(root);
  const build = spawnSync(process.execPath, [join(root, "scripts", "build.mjs")], {
    stdio: "inherit",
    cwd: root,
  });
  if (build.status !== 0) process.exit(build.status ?? 1);
}
