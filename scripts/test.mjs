#!/usr/bin/env node
// The test command. `npm test` (also run by .ci/run) runs both tiers; `npm run test:unit` and
// `npm run test:e2e` run one. Builds first, then runs the tier's *.test.ts files with node's
// test runner, one file at a time (e2e files share the machine's VMs and network).
//
//   unit  src/**/*.test.ts and test/unit/**: no root, no VMs, no network namespaces, no
//         host tools; in-memory fakes stand in for what the orchestrator drives.
//   e2e   test/e2e/**: real VMs, network namespaces, QEMU's tools and the e2b SDK, as root.
//
// Usage: node scripts/test.mjs [unit|e2e] [filter...]; a filter is a path or a substring.
import { spawnSync } from "node:child_process";
import { readdirSync } from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureDeps } from "./ensure-deps.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const TIERS = {
  unit: ["src", "test/unit"],
  e2e: ["test/e2e"],
};

function findTests(dir) {
  return readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return entry.name === "node_modules" ? [] : findTests(path);
    return entry.name.endsWith(".test.ts") ? [path] : [];
  });
}

const args = process.argv.slice(2);
const tiers = args[0] in TIERS ? [args.shift()] : Object.keys(TIERS);
const filters = args;
const plan = tiers.map((tier) => ({
  tier,
  files: TIERS[tier]
    .flatMap((dir) => findTests(join(root, dir)))
    .map((path) => relative(root, path))
    .filter((path) => filters.length === 0 || filters.some((f) => path.includes(f)))
    .sort(),
}));
if (plan.every(({ files }) => files.length === 0)) {
  console.error(`no ${tiers.join(" or ")} test files match ${filters.join(" ")}`);
  process.exit(1);
}

ensureDeps(root);
const build = spawnSync(process.execPath, [join(root, "scripts", "build.mjs")], {
  stdio: "inherit",
  cwd: root,
});
if (build.status !== 0) process.exit(build.status ?? 1);

let failed = false;
for (const { tier, files } of plan) {
  if (files.length === 0) continue;
  process.stderr.write(`test: ${tier} tier, ${files.length} files\n`);
  const result = spawnSync(
    process.execPath,
    ["--import", "tsx", "--test", "--test-concurrency=1", ...files],
    { stdio: "inherit", cwd: root },
  );
  if (result.status !== 0) failed = true;
}
process.exit(failed ? 1 : 0);
