#!/usr/bin/env node
// `npm run bench:<name>`: builds, then runs bench/<file>.ts as root in a run sandbox of its
// own (scripts/run-sandbox.mjs), like the e2e tests: its servers and network slots use a
// data dir made for the run, a network prefix and block no one else uses, and the test
// images cache, so a Warren server on the same host is left alone. Results: bench/out/.
//
// Usage: node scripts/bench.mjs <name>; names below.
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { ensureBuilt } from "./ensure-deps.mjs";
import { inRunSandbox, runNode } from "./run-sandbox.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
/** name → [script, needs the guest images] */
const BENCHES = {
  vmm: ["vmm.ts", true],
  warren: ["warren.ts", true],
  chain: ["disk-chain.ts", true],
  slots: ["slot-pool.ts", false],
  templates: ["templates.ts", true],
  load: ["load.ts", true],
  gateway: ["gateway.ts", false],
  "gateway-scale": ["gateway-scale.ts", false],
  "cross-node": ["cross-node.ts", true],
  "resume-split": ["resume-split.ts", true],
  "guest-latency": ["guest-latency.ts", true],
  observability: ["observability.ts", false],
  rl: ["rl.ts", true],
  volumes: ["volumes.ts", true],
  egress: ["egress.ts", false],
  "guest-services": ["guest-services.ts", true],
  reattach: ["reattach.ts", true],
  burst: ["burst.ts", true],
  "old-vs-head": ["old-vs-head.ts", true],
  tti: ["tti.ts", true],
  density: ["density.ts", true],
  "idle-guest": ["idle-guest.ts", true],
  webhooks: ["webhooks.ts", true],
};

const name = process.argv[2];
const bench = BENCHES[name];
if (!bench) {
  process.stderr.write(`usage: node scripts/bench.mjs <${Object.keys(BENCHES).join("|")}>\n`);
  process.exit(2);
}
ensureBuilt(root);
const [script, images] = bench;
const code = await inRunSandbox(root, { hostSetup: images, label: `bench:${name}` }, (env) =>
  runNode(root, ["--import", "tsx", join(root, "bench", script)], env),
);
process.exit(code);
