// A server restart, through the real e2b SDK, a real server, keeper and guests:
// - a paused sandbox survives a clean stop and resumes with its processes and files;
// - a running sandbox survives `kill -9` of the server: the keeper holds its QEMU (a call in
//   flight fails at once, its command runs on in the guest), and the next server re-adopts
//   it — same sandbox id, same QEMU pid, a loop in the guest counting on through the
//   restart, commands and files working; with a volume mounted (its NFS
//   served again) and a network policy naming a domain (its egress gate reopened); and a
//   stop with WARREN_ON_STOP=detach leaves it running for the next server the same way; and
//   SIGUSR2 does that whatever the setting says (an upgrade), and when the server's mount of
//   its namespace went with it (a systemd unit's mount namespace ends with the unit), the
//   next server mounts the one the keeper holds;
// - `kill -9` of the keeper kills its VMMs within seconds (its watchdog), the server reports
//   the sandbox lost and starts a new keeper for the next create;
// - a sandbox whose VMM is gone when the server comes back is reported lost, and cleaned.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import { Sandbox, Volume } from "e2b";
import { isAlive } from "../../src/shared/process-alive.js";
import { startFakeDns } from "../helpers/fake-dns-server.js";
import { servicesPid, slotListeners } from "../helpers/guest-services.js";
import { leakCheck, qemuPidsOfVm, vmLeftovers } from "../helpers/leak-check.js";
import { runEnv } from "../helpers/run-env.js";
import { startServer, type TestServer, waitFor } from "../helpers/server.js";

const ALLOWED = "198.51.100.7";
const dns = await startFakeDns((name) => (name.endsWith(".allowed.test") ? ALLOWED : undefined));
/** Every server of this file: the test's resolver behind the egress gate. */
const ENV = { WARREN_EGRESS_RESOLVER: `127.0.0.1:${dns.port}` };
/** A loop counting in the guest's memory (a tmpfs file), five times a second. */
const COUNTER =
  "setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > /dev/shm/count; sleep 0.2; done' >/dev/null 2>&1 </dev/null &";

let server: TestServer | undefined;

after(async () => {
  delete process.env.E2B_VOLUME_API_URL;
  if (server) assert.equal(await server.stop(), 0);
  dns.close();
  assert.deepEqual(await leakCheck(), []);
});

/** The QEMU of a sandbox (its runtime dir on its command line). */
async function qemuOf(sandboxId: string): Promise<number> {
  const pids = await qemuPidsOfVm(`${(server as TestServer).dataDir}/run`, sandboxId);
  assert.equal(pids.length, 1, `one QEMU for ${sandboxId}: ${pids.join(", ")}`);
  return pids[0] as number;
}

/** The keeper the current server connected to (its log line). */
function keeperPid(): number {
  const line = server?.logs.findLast((l) => l.msg === "keeper.connected");
  assert.ok(line, "the server connected to a keeper");
  return line.keeperPid as number;
}

/** Points the SDK's volume calls at `started` (each start listens on a port of its own). */
async function useVolumesOf(started: TestServer): Promise<TestServer> {
  process.env.E2B_VOLUME_API_URL = started.url;
  return started;
}

const count = async (sandbox: Sandbox) =>
  Number((await sandbox.commands.run("cat /dev/shm/count")).stdout.trim());

it("resumes a paused sandbox after a restart, process and files intact", async () => {
  server = await startServer(ENV);
  const sandbox = await Sandbox.create({ lifecycle: { onTimeout: "pause" } });
  const sleeper = await sandbox.commands.run("sleep 3600", { background: true, timeoutMs: 0 });
  await sandbox.commands.run("echo survived > /dev/shm/s");
  await sandbox.pause();
  assert.equal(await server.stop(), 0);
  assert.deepEqual(await vmLeftovers(`${server.dataDir}/run`), [], "stopped server leaves no VMM");

  server = await startServer(ENV);
  assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "paused");
  const resumed = await Sandbox.connect(sandbox.sandboxId);
  const out = await resumed.commands.run(`cat /dev/shm/s; ps -o pid= -p ${sleeper.pid}`);
  assert.equal(out.stdout.replace(/\s+/g, " ").trim(), `survived ${sleeper.pid}`);
  await resumed.kill();
});

describe("a running sandbox through a server restart", () => {
  let volume: Volume;
  let sandbox: Sandbox;
  let qemu: number;

  before(async () => {
    server ??= await startServer(ENV);
    process.env.E2B_VOLUME_API_URL = server.url;
    volume = await Volume.create(`restart-${Date.now()}`);
    sandbox = await Sandbox.create({
      timeoutMs: 600_000,
      volumeMounts: { "/mnt/vol": volume },
      network: { allowOut: ["*.allowed.test"], denyOut: ["0.0.0.0/0"] },
    });
    await sandbox.commands.run(COUNTER);
    await sandbox.files.write("/home/user/before.txt", "written before\n");
    await sandbox.commands.run("echo from-guest > /mnt/vol/before.txt");
    qemu = await qemuOf(sandbox.sandboxId);
  });

  after(async () => {
    // By id, through whichever server runs now (the object may name an earlier one's port).
    if (sandbox) await Sandbox.kill(sandbox.sandboxId).catch(() => false);
    if (volume) await Volume.destroy(volume.volumeId).catch(() => false);
  });

  it("runs on through kill -9 of the server, and the next server takes it back", async (t) => {
    const before = await count(sandbox);
    const keeper = keeperPid();
    // A call in flight through the server at the kill: it fails at once, its command goes on.
    const inFlight = sandbox.commands.run("sleep 4; echo slept > /home/user/slept", {
      timeoutMs: 60_000,
    });
    await new Promise((resolve) => setTimeout(resolve, 500));
    const killedAt = performance.now();
    (server as TestServer).process.kill("SIGKILL");
    await assert.rejects(inFlight, "the in-flight call fails");
    t.diagnostic(
      `in-flight call failed ${Math.round(performance.now() - killedAt)} ms after the kill`,
    );
    assert.ok(performance.now() - killedAt < 5_000, "promptly");
    await (server as TestServer).stop();
    await new Promise((resolve) => setTimeout(resolve, 2_000));
    assert.ok(isAlive(qemu), "its QEMU outlived the server");
    assert.ok(isAlive(keeper), "so did the keeper");

    const restarted = performance.now();
    server = await useVolumesOf(await startServer(ENV));
    t.diagnostic(`server start to ready: ${Math.round(performance.now() - restarted)} ms`);
    assert.equal(keeperPid(), keeper, "the same keeper");
    const event = server.logs.find(
      (l) => l.msg === "sandbox.reattached" && l.sandboxId === sandbox.sandboxId,
    );
    assert.ok(event, "the restart re-adopted it");
    t.diagnostic(`re-adoption: ${event.durationMs} ms`);
    assert.equal(await qemuOf(sandbox.sandboxId), qemu, "the same QEMU");

    const info = await Sandbox.getInfo(sandbox.sandboxId);
    assert.equal(info.state, "running");
    const again = await Sandbox.connect(sandbox.sandboxId);
    const after = await count(again);
    // ~10 counts in the 2 s without a server, more through the restart.
    assert.ok(after > before + 8, `the guest counted on: ${before} then ${after}`);
    assert.equal(await again.files.read("/home/user/before.txt"), "written before\n");
    await waitFor(
      "the command whose call was cut to finish in the guest",
      async () => (await again.commands.run("cat /home/user/slept || true")).stdout === "slept\n",
      20_000,
    );
    await again.files.write("/home/user/after.txt", "written after\n");
    assert.equal((await again.commands.run("cat /home/user/after.txt")).stdout, "written after\n");
    sandbox = again;
  });

  it("keeps its volume: served again in its slot", async () => {
    assert.equal((await sandbox.commands.run("cat /mnt/vol/before.txt")).stdout, "from-guest\n");
    await sandbox.commands.run("echo after-restart > /mnt/vol/after.txt");
    // The content API of the new server (its port changed) sees it too.
    assert.equal(
      await (await Volume.connect(volume.volumeId)).readFile("/after.txt"),
      "after-restart\n",
    );
  });

  it("keeps its network policy: the egress gate answers for its domains again", async () => {
    const run = async (command: string) =>
      (await sandbox.commands.run(command, { timeoutMs: 60_000 })).stdout.trim();
    assert.equal(await run("getent hosts api.allowed.test | cut -d' ' -f1"), ALLOWED);
    assert.equal(await run("getent hosts denied.test || echo none"), "none");
    const services = servicesPid((server as TestServer).process.pid);
    assert.deepEqual([...new Set(slotListeners(53, "udp"))], [services], "the new gate's");
  });

  it("a stop with WARREN_ON_STOP=detach leaves it running for the next server", async () => {
    const current = server as TestServer;
    assert.equal(await current.stop(), 0); // started without it: pauses, as it always did
    server = await useVolumesOf(await startServer({ ...ENV, WARREN_ON_STOP: "detach" }));
    assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "paused");
    sandbox = await Sandbox.connect(sandbox.sandboxId); // resumed, its loop with it
    qemu = await qemuOf(sandbox.sandboxId);
    const before = await count(sandbox);
    assert.equal(await server.stop(), 0);
    assert.ok(isAlive(qemu), "its QEMU runs on after a clean stop");
    server = await useVolumesOf(await startServer(ENV));
    assert.equal(await qemuOf(sandbox.sandboxId), qemu, "the same QEMU");
    const again = await Sandbox.connect(sandbox.sandboxId);
    assert.ok((await count(again)) > before);
    assert.equal((await again.commands.run("cat /mnt/vol/after.txt")).stdout, "after-restart\n");
    sandbox = again;
  });

  it("as under systemd: stopped for an upgrade (SIGUSR2) and its namespace's mount gone with the unit, the next server mounts the keeper's", async () => {
    const current = server as TestServer;
    const adopted = current.logs.findLast((l) => l.msg === "network.slot_adopted");
    assert.ok(adopted, "its slot was taken back before");
    const netns = `/run/netns/${runEnv().networkPrefix}-${adopted.slot as number}`;
    const before = await count(sandbox);
    current.process.kill("SIGUSR2"); // a clean stop that detaches, whatever WARREN_ON_STOP says
    // Its own exit, not stop()'s SIGTERM: with both pending, either may be taken first.
    await waitFor("the server stopped by SIGUSR2", () => current.process.exitCode !== null, 60_000);
    assert.equal(await current.stop(), 0);
    assert.ok(current.logs.some((l) => l.msg === "sandbox.detached"));
    // What the end of the node unit's mount namespace does to the mounts it made.
    await promisify(execFile)("umount", ["--lazy", netns]);
    server = await useVolumesOf(await startServer(ENV));
    assert.equal(await qemuOf(sandbox.sandboxId), qemu, "the same QEMU");
    const again = await Sandbox.connect(sandbox.sandboxId);
    assert.ok((await count(again)) > before, "the guest counted on, reached through its slot");
    assert.equal((await again.commands.run("cat /mnt/vol/after.txt")).stdout, "after-restart\n");
    sandbox = again;
  });

  it("kill -9 of the keeper kills its VMMs within 5 s; the sandbox is lost, the next create gets a new keeper", async () => {
    const keeper = keeperPid();
    process.kill(keeper, "SIGKILL");
    await waitFor("the QEMU gone with its keeper", () => !isAlive(qemu), 5_000);
    await waitFor(
      "the sandbox reported lost",
      () =>
        (server as TestServer).logs.some(
          (l) => l.msg === "sandbox.killed" && l.sandboxId === sandbox.sandboxId,
        ),
      10_000,
    );
    const next = await Sandbox.create();
    assert.notEqual(keeperPid(), keeper, "a new keeper");
    assert.equal((await next.commands.run("echo ok")).stdout, "ok\n");
    await next.kill();
  });
});

it("a sandbox whose VMM died while no server ran is reported lost, and cleaned", async () => {
  server ??= await startServer(ENV);
  const sandbox = await Sandbox.create();
  const qemu = await qemuOf(sandbox.sandboxId);
  server.process.kill("SIGKILL");
  await server.stop();
  process.kill(qemu, "SIGKILL");
  // No warm pool: its VMMs, started once the server is ready, would be leftovers to this check.
  server = await startServer({ ...ENV, WARREN_POOL_SIZE: "0", WARREN_POOL_MAX_PER_TEMPLATE: "0" });
  const lost = server.logs.find(
    (l) => l.msg === "sandbox.lost" && l.sandboxId === sandbox.sandboxId,
  );
  assert.ok(lost, "the restart reported the sandbox lost");
  assert.equal(await Sandbox.kill(sandbox.sandboxId), false, "it is gone");
  const leftovers = await vmLeftovers(`${server.dataDir}/run`);
  assert.deepEqual(leftovers, [], "its VMM was killed and its runtime dir removed");
});
