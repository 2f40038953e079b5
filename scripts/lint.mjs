#!/usr/bin/env node
// `npm run lint` (also run by .ci/run): biome (format and lint rules), then the TypeScript
// compiler as a typechecker: tests and the server run through tsx, which does not typecheck.
import { spawnSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureDeps } from "./ensure-deps.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
ensureDeps(root);
for (const [name, bin, args] of [
  ["biome", "@biomejs/biome/bin/biome", ["check", "."]],
  ["tsc", "typescript/bin/tsc", ["--noEmit"]],
  ["tsc (dashboard)", "typescript/bin/tsc", ["--noEmit", "-p", "src/dashboard"]],
]) {
  process.stderr.write(`lint: ${name}\n`);
  const result = spawnSync(process.execPath, [join(root, "node_modules", bin), ...args], {
    stdio: "inherit",
    cwd: root,
  });
  if (result.status !== 0) process.exit(result.status ?? 1);
}
