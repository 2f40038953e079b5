// WARREN_KSM=on: the host's same-page merging is started, every VMM is spawned mergeable and
// its pages really merge with its siblings', while the server itself stays out of it.
import assert from "node:assert/strict";
import { readdir, readFile, writeFile } from "node:fs/promises";
import { after, it } from "node:test";
import { Sandbox } from "e2b";
import { leakCheck } from "../helpers/leak-check.js";
import { startServer, type TestServer, waitFor } from "../helpers/server.js";

const KSM_RUN = "/sys/kernel/mm/ksm/run";
let server: TestServer | undefined;
const ksmWas = await readFile(KSM_RUN, "utf8").catch(() => undefined);

after(async () => {
  if (server) assert.equal(await server.stop(), 0);
  // The server leaves KSM running on purpose; the host goes back to how the test found it.
  if (ksmWas !== undefined) await writeFile(KSM_RUN, ksmWas.trim());
  assert.deepEqual(await leakCheck(), []);
});

/** `/proc/<pid>/ksm_stat` as numbers and yes/no. */
async function ksmStat(pid: number | string): Promise<Record<string, string>> {
  const text = await readFile(`/proc/${pid}/ksm_stat`, "utf8");
  return Object.fromEntries(
    text
      .trim()
      .split("\n")
      .map((line) => line.split(/:?\s+/) as [string, string]),
  );
}

async function vmmPids(dataDir: string): Promise<number[]> {
  const pids: number[] = [];
  for (const entry of await readdir("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    const cmdline = await readFile(`/proc/${entry}/cmdline`, "utf8").catch(() => "");
    if (cmdline.startsWith("qemu-system") && cmdline.includes(`${dataDir}/run/`))
      pids.push(Number(entry));
  }
  return pids;
}

it("merges identical pages across sandboxes' VMMs when KSM is on", async (t) => {
  if (ksmWas === undefined) {
    t.skip(`this kernel has no KSM (${KSM_RUN} is missing)`);
    return;
  }
  server = await startServer({
    WARREN_KSM: "on",
    WARREN_POOL_SIZE: "0",
    WARREN_POOL_MAX_PER_TEMPLATE: "0",
  });
  assert.equal((await readFile(KSM_RUN, "utf8")).trim(), "1", "the server started KSM");
  const sandboxes = [await Sandbox.create(), await Sandbox.create()];
  try {
    const pids = await vmmPids(server.dataDir);
    assert.equal(pids.length, 2);
    for (const pid of pids) assert.equal((await ksmStat(pid)).ksm_merge_any, "yes");
    assert.equal((await ksmStat(server.process.pid ?? 0)).ksm_merge_any, "no");
    await waitFor(
      "both VMMs to have merged pages",
      async () => {
        const merged = await Promise.all(
          pids.map(async (pid) => Number((await ksmStat(pid)).ksm_merging_pages)),
        );
        return merged.every((pages) => pages > 0);
      },
      120_000,
    );
    for (const sandbox of sandboxes)
      assert.equal(
        (await sandbox.commands.run("echo ok")).stdout,
        "ok\n",
        "merged guests still run",
      );
  } finally {
    await Promise.all(sandboxes.map((sandbox) => sandbox.kill()));
  }
});

it("spawns VMMs unmergeable by default", async () => {
  if (server) assert.equal(await server.stop(), 0);
  server = await startServer({ WARREN_POOL_SIZE: "0", WARREN_POOL_MAX_PER_TEMPLATE: "0" });
  const sandbox = await Sandbox.create();
  try {
    const [pid] = await vmmPids(server.dataDir);
    assert.ok(pid, "the sandbox's VMM is running");
    const stat = await readFile(`/proc/${pid}/ksm_stat`, "utf8").catch(() => "ksm_merge_any: no");
    assert.match(stat, /ksm_merge_any: no/);
  } finally {
    await sandbox.kill();
  }
});
