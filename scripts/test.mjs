#!/usr/bin/env node
// The test command (`npm test`, also run by .ci/run): builds, then runs every *.test.ts
// under src/ and test/ with node's test runner, one file at a time (tests share fixed
// ports and, later, the machine's VMs). Pass file paths or a substring to run fewer.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureDeps } from "./ensure-deps.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");

function findTests(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === "node_modules" ? [] : findTests(path);
    return entry.name.endsWith(".test.ts") ? [path] : [];
  });
}

const filters = process.argv.slice(2);
const files = ["src", "test"]
  .flatMap((dir) => findTests(join(root, dir)))
  .map((path) => relative(root, path))
  .filter((path) => filters.length === 0 || filters.some((f) => path.includes(f)))
  .sort();
if (files.length === 0) {
  console.error(`no test files match ${filters.join(" ")}`);
  process.exit(1);
}

ensureDeps(root);
const build = spawnSync(process.execPath, [join(root, "scripts", "build.mjs")], {
  stdio: "inherit",
  cwd: root,
});
if (build.status !== 0) process.exit(build.status ?? 1);

const result = spawnSync(
  process.execPath,
  ["--import", "tsx", "--test", "--test-concurrency=1", ...files],
  { stdio: "inherit", cwd: root },
);
process.exit(result.status ?? 1);
