// The guest services process on a real node (issue 39's blast radius): what serves a
// sandbox's volume over NFS is a process that is neither the server nor the host's root (a
// user namespace of its own over the run's guest id range, WARREN_GUEST_ID_BASE), holding the
// listener in the sandbox's network namespace; `kill -9` of it leaves every VMM running and
// the API answering, and the sandbox's volume works again within seconds.
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { readFileSync, readlinkSync } from "node:fs";
import { after, before, describe, it } from "node:test";
import { Sandbox, Volume } from "e2b";
import { servicesPid as pidOf, slotListeners, vmmPids } from "../helpers/guest-services.js";
import { runGuestIdBase } from "../helpers/run-env.js";
import { useServer, waitFor } from "../helpers/server.js";

const server = useServer();
const servicesPid = () => pidOf(server.process.pid);

/**
 * What a TCP connection from `uid` to `host:port` gives, within 3 s: "connected", an error
 * code, or "timeout" — run as that uid with no groups, as the services process's ids are.
 */
function connectAs(uid: number, host: string, port: number): string {
  const script = `const s = require("node:net").connect(${port}, "${host}");
s.on("connect", () => { console.log("connected"); process.exit(0); });
s.on("error", (e) => { console.log(e.code); process.exit(0); });
setTimeout(() => { console.log("timeout"); process.exit(0); }, 3000);`;
  const run = spawnSync(
    "setpriv",
    [
      "--reuid",
      String(uid),
      "--regid",
      String(uid),
      "--clear-groups",
      process.execPath,
      "-e",
      script,
    ],
    { encoding: "utf8", timeout: 10_000 },
  );
  return run.stdout.trim() || `failed: ${run.stderr}`;
}

/** A status field's values (`Uid:\t1\t1\t1\t1`). */
function status(pid: number, field: string): string[] {
  const line = readFileSync(`/proc/${pid}/status`, "utf8")
    .split("\n")
    .find((l) => l.startsWith(`${field}:`));
  return line?.split(/\s+/).slice(1) ?? [];
}

describe("the guest services process", () => {
  let volume: Volume;
  let sandbox: Sandbox;

  before(async () => {
    process.env.E2B_VOLUME_API_URL = server.url;
    volume = await Volume.create(`services-${Date.now()}`);
    sandbox = await Sandbox.create({ volumeMounts: { "/mnt/vol": volume } });
    await sandbox.commands.run("echo before > /mnt/vol/before.txt");
  });

  after(async () => {
    delete process.env.E2B_VOLUME_API_URL;
    await sandbox?.kill().catch(() => false);
    if (volume) await Volume.destroy(volume.volumeId).catch(() => false);
  });

  it("serves the sandbox's NFS as neither the server nor the host's root", () => {
    const pid = servicesPid();
    assert.notEqual(pid, server.process.pid);
    const base = runGuestIdBase();
    assert.deepEqual(status(pid, "Uid"), Array(4).fill(String(base)), "the range's first id");
    assert.deepEqual(status(pid, "Groups"), [""], "no groups of the host's");
    assert.notEqual(
      readlinkSync(`/proc/${pid}/ns/user`),
      readlinkSync("/proc/self/ns/user"),
      "a user namespace of its own",
    );
    assert.equal(
      readFileSync(`/proc/${pid}/uid_map`, "utf8").trim().split(/\s+/).join(" "),
      `0 ${base} 65536`,
    );
    // The listener in the sandbox's namespace is that process's, and only its.
    assert.deepEqual([...new Set(slotListeners(2049))], [pid]);
    // What the guest wrote is the range's on the host (its user, 1000).
    const hostFile = `${server.dataDir}/volumes/${volume.volumeId}/before.txt`;
    assert.equal(
      execFileSync("stat", ["-c", "%u", hostFile], { encoding: "utf8" }).trim(),
      String(base + 1000),
    );
  });

  it("its ids reach no TCP port of the host's own and no link-local address", () => {
    const base = runGuestIdBase();
    const api = Number(new URL(server.url).port);
    // The API on loopback: refused to the range (its root, a guest's user), open to others.
    assert.equal(connectAs(base, "127.0.0.1", api), "ECONNREFUSED");
    assert.equal(connectAs(base + 1000, "127.0.0.1", api), "ECONNREFUSED");
    assert.equal(connectAs(65534, "127.0.0.1", api), "connected", "nobody else is refused");
    // Cloud metadata: refused at once by the host's rule (what others get depends on the host).
    assert.equal(connectAs(base, "169.254.169.254", 80), "EHOSTUNREACH");
    console.log(`# 169.254.169.254:80 as nobody: ${connectAs(65534, "169.254.169.254", 80)}`);
  });

  it("dies alone: kill -9 leaves every VMM and the API, and the volume works again in seconds", async () => {
    const pid = servicesPid();
    const vmm = vmmPids([sandbox.sandboxId])[0];
    assert.ok(vmm, "the sandbox's VMM runs");
    const killedAt = performance.now();
    process.kill(pid, "SIGKILL");
    await waitFor("the guest services process started again", () => {
      try {
        return servicesPid() !== pid;
      } catch {
        return false;
      }
    });
    assert.equal(
      vmmPids([sandbox.sandboxId])[0],
      vmm,
      "the sandbox's VMM still runs, the same one",
    );
    assert.equal((await fetch(`${server.url}/health`)).status, 200, "the API answers");
    // The guest's hard mount carries on against the new process.
    const wrote = await sandbox.commands.run(
      "echo after > /mnt/vol/after.txt && cat /mnt/vol/before.txt",
      {
        timeoutMs: 60_000,
      },
    );
    assert.equal(wrote.stdout, "before\n");
    const seconds = (performance.now() - killedAt) / 1000;
    console.log(`# the volume answered again ${seconds.toFixed(1)} s after the kill`);
    assert.ok(seconds < 30, `within seconds (${seconds.toFixed(1)} s)`);
    assert.equal(await volume.readFile("/after.txt"), "after\n");
    assert.ok(server.logs.some((l) => l.msg === "guest_services.exited"));
  });
});
