// Network slots on this machine: what creating, re-policing and destroying one costs, and
// what the pool saves by handing out a slot it made ahead of need. No VMs, no guests.
// Run: npm run bench:slots (as root; the slots use the run's own names and block).
import { NetnsSlotPool } from "../src/network/index.js";
import { leakCheck } from "../test/helpers/leak-check.js";
import { runPoolOptions } from "../test/helpers/run-env.js";
import { report, type Summary, summarize } from "./lib/report.js";

const N = Number(process.env.BENCH_SLOTS ?? 20);
/** What an unprivileged QEMU would run as: the taps belong to it. */
const TAP_OWNER = { uid: 65534, gid: 65534 };
const POLICY = { allowInternet: false, allowOut: ["198.51.100.0/24"], denyOut: [] };

const rows: Summary[] = [];
const since = (t: number) => performance.now() - t;

// size 0: every acquire creates a slot, every release destroys it.
const bare = new NetnsSlotPool({ ...runPoolOptions(), size: 0, tapOwner: TAP_OWNER });
// N slots made in the background: acquire takes one, release resets and keeps it (maxSlots
// N: no refill runs behind the figures).
const pooled = new NetnsSlotPool({
  ...runPoolOptions(),
  size: N,
  maxSlots: N,
  tapOwner: TAP_OWNER,
});
try {
  const create: number[] = [];
  const policy: number[] = [];
  const reset: number[] = [];
  const destroy: number[] = [];
  for (let i = 0; i < N; i++) {
    let t = performance.now();
    const slot = await bare.acquire();
    create.push(since(t));
    t = performance.now();
    await slot.setPolicy(POLICY);
    policy.push(since(t));
    t = performance.now();
    await bare.release(slot); // size 0: release destroys
    destroy.push(since(t));
  }
  rows.push(summarize("create (acquire, empty pool)", "ms", create));
  rows.push(summarize("setPolicy", "ms", policy));
  rows.push(summarize("destroy (release, full pool)", "ms", destroy));

  await pooled.start();
  const deadline = Date.now() + 120_000;
  while (pooled.stats.idle < N && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
  const hit: number[] = [];
  for (let i = 0; i < N; i++) {
    let t = performance.now();
    const slot = await pooled.acquire();
    hit.push(since(t));
    await slot.setPolicy(POLICY);
    t = performance.now();
    await pooled.release(slot); // resets the policy, keeps the slot
    reset.push(since(t));
  }
  rows.push(summarize("acquire of an idle slot (default policy)", "ms", hit));
  rows.push(summarize("release with a policy reset", "ms", reset));
  const t = performance.now();
  await pooled.cleanupStale();
  rows.push(summarize(`cleanupStale (${pooled.stats.total} own slots)`, "ms", [since(t)]));
} finally {
  await bare.close();
  await pooled.close();
}
const left = await leakCheck();
if (left.length > 0) throw new Error(`slots left behind: ${left.join(", ")}`);
report("slot-pool", rows, { slots: N });
