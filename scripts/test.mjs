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
import { execFileSync, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { availableParallelism, tmpdir } from "node:os";
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
const testArgs = (files, concurrency, failuresFile) => [
  "--import",
  "tsx",
  "--test",
  `--test-concurrency=${concurrency}`,
  "--test-reporter=tap",
  "--test-reporter-destination=stdout",
  `--test-reporter=${join(root, "scripts", "failures-reporter.mjs")}`,
  `--test-reporter-destination=${failuresFile}`,
  ...files,
];
/**
 * Host tools only the e2e tier uses (a real registry and image tools for the OCI tests;
 * test/helpers/registry.ts checks for them; systemd-analyze and kubectl for the deploy/
 * checks in test/e2e/deploy; PostgreSQL for the cluster; Chromium for the dashboard),
 * installed once from Debian's packages.
 * Installing docker-registry does not start its service: policy-rc.d forbids it.
 */
const E2E_PACKAGES = [
  "docker-registry",
  "skopeo",
  "apache2-utils",
  "zstd",
  "e2fsprogs",
  "systemd",
  "kubernetes-client",
  "postgresql",
  // The dashboard's browser test (Playwright drives Debian's Chromium), with a font to draw.
  "chromium",
  "fonts-liberation",
];
/**
 * What the unit tier's code interpreter tests run the Python and R drivers with: the Debian
 * packages the code-interpreter-v1 rootfs has (CODE_INTERPRETER_PACKAGES), on the host's own
 * python3 and Rscript.
 */
const UNIT_PACKAGES = [
  "openssl",
  "python3-ipython",
  "python3-matplotlib",
  "python3-matplotlib-inline",
  "python3-numpy",
  "python3-pandas",
  "python3-pil",
  "python3-scipy",
  "r-base-core",
  "r-cran-jsonlite",
  "r-cran-evaluate",
];
/**
 * Packages whose command may come from another package: a `kubectl` package from another apt
 * repository (Kubernetes' or Google Cloud's) conflicts with Debian's kubernetes-client, and
 * serves as well.
 */
const E2E_COMMANDS = { "kubernetes-client": "kubectl" };

function ensurePackages(tier, packages) {
  const installed = (pkg) =>
    spawnSync("dpkg-query", ["-W", `-f=\${Status}`, pkg]).stdout?.toString() ===
    "install ok installed";
  const onPath = (command) =>
    command !== undefined && spawnSync("sh", ["-c", `command -v ${command}`]).status === 0;
  const missing = packages.filter((pkg) => !installed(pkg) && !onPath(E2E_COMMANDS[pkg]));
  if (missing.length === 0) return;
  process.stderr.write(`test: installing ${tier} host tools: ${missing.join(" ")}\n`);
  // 101: "action forbidden" to invoke-rc.d, so no package starts a daemon while installed.
  const policy = "/usr/sbin/policy-rc.d";
  const ownPolicy = !existsSync(policy);
  if (ownPolicy) writeFileSync(policy, "#!/bin/sh\nexit 101\n", { mode: 0o755 });
  try {
    execFileSync("apt-get", ["update", "-q"], { stdio: "inherit" });
    execFileSync("apt-get", ["install", "-y", "-q", "--no-install-recommends", ...missing], {
      stdio: "inherit",
      env: { ...process.env, DEBIAN_FRONTEND: "noninteractive" },
    });
  } finally {
    if (ownPolicy) rmSync(policy, { force: true });
  }
}

let failed = false;
const failures = mkdtempSync(join(tmpdir(), "warren-test-failures-"));
const summary = [];
for (const { tier, files } of plan) {
  if (files.length === 0 || isStopping()) continue;
  process.stderr.write(`test: ${tier} tier, ${files.length} files\n`);
  ensurePackages(tier, tier === "e2e" ? E2E_PACKAGES : UNIT_PACKAGES);
  const failuresFile = join(failures, tier);
  const code =
    tier === "unit"
      ? await runNode(root, testArgs(files, availableParallelism(), failuresFile), process.env)
      : await inRunSandbox(root, { label: "test: e2e run" }, (env) =>
          runNode(root, testArgs(files, 1, failuresFile), env),
        );
  if (code !== 0) failed = true;
  const lines = existsSync(failuresFile) ? readFileSync(failuresFile, "utf8").trim() : "";
  summary.push(`test: ${tier} tier exited ${code}${lines ? `; failed:\n${lines}` : ""}`);
}
rmSync(failures, { recursive: true, force: true });
process.stderr.write(`${summary.join("\n")}\n`);
process.exit(failed || isStopping() ? 1 : 0);
