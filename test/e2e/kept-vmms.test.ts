// A pause keeps its VMM stopped for a while (WARREN_PAUSE_KEEP_MS): through the real SDK,
// a resume soon after continues that VMM (no restore) with everything the guest had, a
// second pause and a fork stand on it as on a restored one, and a kept VMM given up (here:
// room for the next one, WARREN_PAUSE_KEEP_MAX=1) takes its QEMU with it, the sandbox then
// resuming from its snapshot.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { describe, it } from "node:test";
import { Sandbox } from "e2b";
import { useServer, waitFor } from "../helpers/server.js";

const server = useServer({
  WARREN_LOG_LEVEL: "info", // api.request lines, with each operation's phases
  WARREN_PAUSE_KEEP_MS: "120000",
  WARREN_PAUSE_KEEP_MAX: "1",
});

/** QEMU processes whose command line names the sandbox (its runtime directory). */
function qemusOf(sandboxId: string): number[] {
  return readdirSync("/proc")
    .filter((entry) => /^\d+$/.test(entry))
    .filter((pid) => {
      try {
        const cmdline = readFileSync(`/proc/${pid}/cmdline`, "utf8");
        return cmdline.startsWith("qemu-system") && cmdline.includes(sandboxId);
      } catch {
        return false;
      }
    })
    .map(Number);
}

/** The phases of the server's `api.request` line for the sandbox's connect number `nth`. */
async function connectPhases(sandboxId: string, nth: number): Promise<Record<string, number>> {
  const connects = () =>
    server.logs.filter(
      (l) =>
        l.msg === "api.request" &&
        l.sandboxId === sandboxId &&
        String(l.route).endsWith("/connect"),
    );
  // The line is written as the response goes out: it may trail the SDK's return a little.
  await waitFor(`connect ${nth} of ${sandboxId} logged`, () => connects().length >= nth);
  return (connects()[nth - 1]?.phases ?? {}) as Record<string, number>;
}

describe("paused sandboxes' kept VMMs", () => {
  it("a resume continues the kept VMM: same QEMU, same processes and files, clock set", async () => {
    const sandbox = await Sandbox.create({ timeoutMs: 600_000 });
    try {
      const sleeper = await sandbox.commands.run("sleep 3600", { background: true, timeoutMs: 0 });
      await sandbox.commands.run("echo memory > /dev/shm/m && echo disk > /home/user/d");
      const [qemu] = qemusOf(sandbox.sandboxId);
      assert.ok(qemu, "the sandbox's QEMU runs");

      await sandbox.pause();
      assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "paused");
      assert.deepEqual(qemusOf(sandbox.sandboxId), [qemu], "kept, stopped");
      assert.equal(await sandbox.isRunning(), false, "a paused sandbox does not answer");
      await new Promise((resolve) => setTimeout(resolve, 2_000)); // the guest clock falls behind

      await sandbox.connect();
      assert.deepEqual(qemusOf(sandbox.sandboxId), [qemu], "the same QEMU");
      const phases = await connectPhases(sandbox.sandboxId, 1);
      assert.ok(phases["vmm.cont"] !== undefined && phases["guest.init"] !== undefined);
      assert.equal(phases["vmm.spawn"], undefined, "no QEMU spawned");
      const ps = await sandbox.commands.run(`ps -o pid= -p ${sleeper.pid}`);
      assert.equal(ps.stdout.trim(), String(sleeper.pid));
      const files = await sandbox.commands.run("cat /dev/shm/m /home/user/d");
      assert.equal(files.stdout, "memory\ndisk\n");
      const guestNow = Number((await sandbox.commands.run("date +%s")).stdout.trim());
      assert.ok(Math.abs(guestNow - Date.now() / 1000) < 5, `guest clock ${guestNow}`);

      // Paused again from the continued VMM, and forked: captures stand on it as on a restore.
      await sandbox.commands.run("echo second >> /home/user/d");
      await sandbox.pause();
      await sandbox.connect();
      assert.deepEqual(qemusOf(sandbox.sandboxId), [qemu]);
      const [child] = await sandbox.fork({ count: 1 });
      assert.ok(child instanceof Sandbox, `fork child: ${String(child)}`);
      try {
        const seen = await child.commands.run("cat /dev/shm/m /home/user/d");
        assert.equal(seen.stdout, "memory\ndisk\nsecond\n");
      } finally {
        await child.kill();
      }
    } finally {
      await sandbox.kill();
    }
    assert.deepEqual(qemusOf(sandbox.sandboxId), [], "a kill takes the QEMU");
  });

  it("a kept VMM given up takes its QEMU; its sandbox then resumes from the snapshot", async () => {
    const first = await Sandbox.create({ timeoutMs: 600_000 });
    const second = await Sandbox.create({ timeoutMs: 600_000 });
    try {
      await first.commands.run("echo first > /dev/shm/m");
      await first.pause();
      assert.equal(qemusOf(first.sandboxId).length, 1, "kept");
      await second.pause(); // one kept at most: the first's goes
      await waitFor("the first's QEMU exits", () => qemusOf(first.sandboxId).length === 0);
      assert.equal(qemusOf(second.sandboxId).length, 1);
      // Logged once the release is done (its runtime dir too), a moment after QEMU exits.
      await waitFor("the release logged, full", () =>
        server.logs.some(
          (l) =>
            l.msg === "sandbox.kept_vmm_released" &&
            l.sandboxId === first.sandboxId &&
            l.reason === "full",
        ),
      );
      await first.connect();
      const phases = await connectPhases(first.sandboxId, 1);
      assert.ok(phases["vmm.spawn"] !== undefined, "a restore");
      assert.equal((await first.commands.run("cat /dev/shm/m")).stdout, "first\n");
      await second.kill();
      assert.deepEqual(qemusOf(second.sandboxId), [], "killed while paused: QEMU gone");
    } finally {
      await Promise.all([first.kill(), second.kill()]);
    }
  });
});
