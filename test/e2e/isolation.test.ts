// A test run leaves a Warren server on the same host alone. Decoys stand for a
// developer's server with default settings: a slot namespace `warren-<n>`, its host veth
// `wv<n>`, host rules commented `warren:<n>`, and VMMs whose command lines point into
// /var/lib/warren/run. A test server starts (recovery and stale cleanup run) and stops, a
// slot pool of the run cleans up, the leak check looks and removes: the decoys stay.
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { readdir, readFile, readlink } from "node:fs/promises";
import { after, before, describe, it } from "node:test";
import { NetnsSlotPool, runCommand } from "../../src/network/index.js";
import { leakCheck, qemuPidsIn, removeLeftovers } from "../helpers/leak-check.js";
import { runEnv, runPoolOptions } from "../helpers/run-env.js";
import { startServer, waitFor } from "../helpers/server.js";

const DEVELOPER_DATA_DIR = "/var/lib/warren";

/** A slot index a default server is unlikely to reach, and free on this host. */
function decoyIndex(): number {
  for (;;) {
    const n = 30_000 + Math.floor(Math.random() * 2_000);
    if (!existsSync(`/run/netns/warren-${n}`) && !existsSync(`/sys/class/net/wv${n}`)) return n;
  }
}

const n = decoyIndex();
const decoy = { netns: `warren-${n}`, veth: `wv${n}`, comment: `warren:${n}` };
const runDir = `${runEnv().dataDir}/run`;
/** Fake VMMs: a process named like QEMU, with a QMP socket path in `dir` on its command line. */
const vmmDirs = {
  developer: `${DEVELOPER_DATA_DIR}/run/decoy-${n}`,
  // Another server whose data dir merely starts like the run's.
  sibling: `${runEnv().dataDir}-other/run/decoy-${n}`,
};
const vmms = new Map<string, ChildProcess>();

function startFakeVmm(dir: string): ChildProcess {
  // Not the test's environment: nothing of the run's marks it as the run's.
  return spawn(
    "/usr/bin/python3",
    ["-c", "import time; time.sleep(3600)", "-qmp", `unix:${dir}/qmp.sock,server=on,wait=off`],
    { argv0: "qemu-system-x86_64", env: { PATH: "/usr/bin:/bin" }, stdio: "ignore" },
  );
}

async function decoyRules(): Promise<string[]> {
  const { stdout } = await runCommand("iptables-save", []);
  // iptables-save quotes comments, or not, depending on its version.
  const pattern = new RegExp(`--comment "?${decoy.comment}"? `);
  return stdout.split("\n").filter((line) => pattern.test(line));
}

/** What is missing of the decoys (empty when all are there). */
async function missingDecoys(): Promise<string[]> {
  const missing: string[] = [];
  if (!existsSync(`/run/netns/${decoy.netns}`)) missing.push(`netns ${decoy.netns}`);
  if (!existsSync(`/sys/class/net/${decoy.veth}`)) missing.push(`link ${decoy.veth}`);
  const rules = await decoyRules();
  if (rules.length !== 2) missing.push(`rules ${decoy.comment} (${rules.length} of 2 left)`);
  for (const [name, vmm] of vmms) {
    if (vmm.exitCode !== null || vmm.signalCode !== null) missing.push(`${name} VMM`);
  }
  return missing;
}

/** A default server's names on the host now (diagnostics: a real one may be running). */
async function developerState(): Promise<string> {
  const netns = (await readdir("/run/netns").catch(() => [] as string[])).filter((x) =>
    /^warren-\d+$/.test(x),
  );
  const links = (await readdir("/sys/class/net")).filter((x) => /^wv\d+$/.test(x));
  const { stdout } = await runCommand("iptables-save", []);
  const rules = stdout.split("\n").filter((l) => /--comment "?warren:\d+/.test(l));
  return `${netns.length} namespaces, ${links.length} veths, ${rules.length} rules`;
}

/** Files a process has open or mapped under `dir`. */
async function filesUnder(pid: number, dir: string): Promise<string[]> {
  const fds = await readdir(`/proc/${pid}/fd`).catch(() => [] as string[]);
  const open = await Promise.all(
    fds.map((fd) => readlink(`/proc/${pid}/fd/${fd}`).catch(() => "")),
  );
  const maps = (await readFile(`/proc/${pid}/maps`, "utf8").catch(() => ""))
    .split("\n")
    .map((line) => line.split(/\s+/).slice(5).join(" "));
  return [...new Set([...open, ...maps])].filter((path) => path.startsWith(`${dir}/`));
}

describe("a test run beside a developer's Warren server", () => {
  before(async () => {
    await runCommand("ip", ["-batch", "-"], {
      input: `netns add ${decoy.netns}\nlink add ${decoy.veth} type veth peer name eth0 netns ${decoy.netns}\n`,
    });
    const comment = ["-m", "comment", "--comment", decoy.comment];
    await runCommand("iptables", ["-w", "-I", "INPUT", "-i", decoy.veth, ...comment, "-j", "DROP"]);
    await runCommand("iptables", [
      "-w",
      "-I",
      "FORWARD",
      "-o",
      decoy.veth,
      ...comment,
      "-j",
      "DROP",
    ]);
    for (const [name, dir] of Object.entries(vmmDirs)) vmms.set(name, startFakeVmm(dir));
    assert.deepEqual(await missingDecoys(), [], "decoys planted");
  });

  after(async () => {
    for (const vmm of vmms.values()) vmm.kill("SIGKILL");
    for (const rule of await decoyRules()) {
      const args = [...rule.slice(3).matchAll(/"([^"]*)"|(\S+)/g)].map((m) => m[1] ?? m[2] ?? "");
      await runCommand("iptables", ["-w", "-D", ...args]).catch(() => {});
    }
    await runCommand("ip", ["-force", "-batch", "-"], {
      input: `link del ${decoy.veth}\nnetns del ${decoy.netns}\n`,
    }).catch(() => {});
    assert.deepEqual(await leakCheck(), []);
  });

  it("a test server starts and stops in the run's data dir, names and block", async (t) => {
    t.diagnostic(`developer's names before: ${await developerState()}`);
    const server = await startServer();
    try {
      assert.equal(server.dataDir, runEnv().dataDir);
      const listening = server.logs.find((l) => l.msg === "server.listening");
      assert.equal(listening?.dataDir, runEnv().dataDir);
      for (const line of server.logs.filter((l) => l.msg === "network.stale_removed")) {
        assert.ok(!JSON.stringify(line).includes(`"${decoy.netns}"`), JSON.stringify(line));
      }
      // Neither the server nor its VMMs (the warm pool's) hold anything of the developer's.
      await waitFor("a warmed VMM", async () => (await qemuPidsIn(runDir)).length > 0, 120_000);
      const own = [server.process.pid ?? 0, ...(await qemuPidsIn(runDir))];
      for (const pid of own) {
        assert.deepEqual(await filesUnder(pid, DEVELOPER_DATA_DIR), [], `pid ${pid}`);
      }
      assert.deepEqual(await missingDecoys(), [], "after the server's start (recovery, cleanup)");
    } finally {
      assert.equal(await server.stop(), 0, "the server exits cleanly");
    }
    assert.deepEqual(await missingDecoys(), [], "after the server stopped");
    t.diagnostic(`developer's names after: ${await developerState()}`);
  });

  it("the run's slot pool cleans up stale slots of its names only", async () => {
    const pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0 });
    try {
      const report = await pool.cleanupStale();
      assert.ok(!report.netns.includes(decoy.netns) && !report.links.includes(decoy.veth));
    } finally {
      await pool.close();
    }
    assert.deepEqual(await missingDecoys(), []);
  });

  it("the leak check neither reports nor removes them", async () => {
    assert.deepEqual(await leakCheck(), []);
    assert.deepEqual(await removeLeftovers(), []);
    assert.deepEqual(await missingDecoys(), []);
  });

  it("recovery spares a VMM whose paths only contain the run dir", async () => {
    // A server whose data dir is /srv<our data dir>: its VMM points into /srv<runDir>/…
    const vmm = startFakeVmm(`/srv${runDir}/decoy-${n}`);
    try {
      const server = await startServer({
        WARREN_POOL_SIZE: "0",
        WARREN_POOL_MAX_PER_TEMPLATE: "0",
      });
      assert.equal(await server.stop(), 0);
      assert.equal(vmm.exitCode ?? vmm.signalCode, null, "the other server's VMM was killed");
    } finally {
      vmm.kill("SIGKILL");
    }
  });
});
