#!/usr/bin/env node
// The test command. `npm test` (also run by .ci/run) runs both tiers; `npm run test:unit` and
// `npm run test:e2e` run one. Builds first, then runs the tier's *.test.ts files with node's
// test runner: unit files side by side, e2e files one at a time (they share the run's VMs,
// network and CPUs).
//
//   unit  src/**/*.test.ts and test/unit/**: no root, no VMs, no network namespaces, no
//         host tools; in-memory fakes stand in for what the orchestrator drives.
//   e2e   test/e2e/**: real VMs, network namespaces, QEMU's tools and the e2b SDK, as root,
//         in a sandbox of the run's own (scripts/run-sandbox.mjs), so that a Warren server
//         on the same host is left alone: a data dir made for the run (never
//         /var/lib/warren), a network prefix and an IPv4 block no one else uses, and the
//         guest images in a test cache (/var/cache/warren-test/images), set up once before
//         the files run. The data dir and everything named under the prefix are removed at
//         the end, also on failure or Ctrl-C.
//
// Usage: node scripts/test.mjs [unit|e2e] [filter...]; a filter is a path or a substring.
import { readdirSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureBuilt } from "./ensure-deps.mjs";
import { inRunSandbox, isStopping, runNode } from "./run-sandbox.mjs";

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

ensureBuilt(root);

// Unit files share nothing and run side by side; e2e files share the machine's VMs and CPUs.
const testArgs = (files, concurrency) => [
  "--import",
  "tsx",
  "--test",
  `--test-concurrency=${concurrency}`,
  ...files,
];
let failed = false;
for (const { tier, files } of plan) {
  if (files.length === 0 || isStopping()) continue;
  process.stderr.write(`test: ${tier} tier, ${files.length} files\n`);
  const code =
    tier === "unit"
      ? await runNode(root, testArgs(files, availableParallelism()), process.env)
      : await inRunSandbox(root, { label: "test: e2e run" }, (env) =>
          runNode(root, testArgs(files, 1), env),
        );
  if (code !== 0) failed = true;
}
process.exit(failed || isStopping() ? 1 : 0);
