// Pause, resume, connect and TTLs through the real e2b SDK against a real server and VMs.
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Sandbox, SandboxNotFoundError } from "e2b";
import { useServer, waitFor } from "../helpers/server.js";

useServer();

describe("pause and resume", () => {
  it("keeps a running process (same pid), tmpfs and disk files, env and token", async () => {
    const sandbox = await Sandbox.create({ envs: { KEPT: "yes" } });
    try {
      const sleeper = await sandbox.commands.run("sleep 3600", { background: true, timeoutMs: 0 });
      await sandbox.commands.run("echo memory > /dev/shm/m && echo disk > /home/user/d");

      assert.equal(await sandbox.pause(), true);
      assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "paused");
      assert.equal(await sandbox.isRunning(), false, "a paused sandbox does not answer");
      assert.equal(await sandbox.pause(), false, "pausing twice answers 409 → false");

      // The instance keeps the envd token it got at create: it must still be valid.
      const resumed = await sandbox.connect();
      assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "running");
      const ps = await resumed.commands.run(`ps -o pid= -p ${sleeper.pid}`);
      assert.equal(ps.stdout.trim(), String(sleeper.pid));
      const files = await resumed.commands.run("cat /dev/shm/m /home/user/d; echo $KEPT");
      assert.equal(files.stdout, "memory\ndisk\nyes\n");
      // The clock was corrected on resume: within a few seconds of the host's.
      const guestNow = Number((await resumed.commands.run("date +%s")).stdout.trim());
      assert.ok(Math.abs(guestNow - Date.now() / 1000) < 5, `guest clock ${guestNow}`);
    } finally {
      await sandbox.kill();
    }
  });

  it("pauses and resumes twice in a row (snapshot of a restored VM)", async () => {
    const sandbox = await Sandbox.create();
    try {
      for (let round = 1; round <= 2; round++) {
        await sandbox.commands.run(`echo ${round} >> /home/user/rounds`);
        await sandbox.pause();
        await Sandbox.connect(sandbox.sandboxId);
      }
      const out = await sandbox.commands.run("cat /home/user/rounds");
      assert.equal(out.stdout, "1\n2\n");
    } finally {
      await sandbox.kill();
    }
  });

  it("connect only extends a running sandbox's timeout", async () => {
    const sandbox = await Sandbox.create({ timeoutMs: 120_000 });
    try {
      const before = (await sandbox.getInfo()).endAt.getTime();
      await Sandbox.connect(sandbox.sandboxId, { timeoutMs: 10_000 });
      assert.equal((await sandbox.getInfo()).endAt.getTime(), before, "not shortened");
      await Sandbox.connect(sandbox.sandboxId, { timeoutMs: 600_000 });
      assert.ok((await sandbox.getInfo()).endAt.getTime() > before + 400_000, "extended");
    } finally {
      await sandbox.kill();
    }
  });

  it("connecting to a killed sandbox fails with SandboxNotFoundError", async () => {
    const sandbox = await Sandbox.create();
    await sandbox.kill();
    await assert.rejects(Sandbox.connect(sandbox.sandboxId), SandboxNotFoundError);
  });
});

describe("timeouts", () => {
  it("setTimeout replaces the deadline; on expiry the sandbox is killed", async () => {
    const sandbox = await Sandbox.create({ timeoutMs: 300_000 });
    await sandbox.setTimeout(3_000);
    const endAt = (await sandbox.getInfo()).endAt.getTime();
    assert.ok(endAt < Date.now() + 4_000, "shortened");
    await waitFor("the sandbox to be killed", async () => {
      return Sandbox.getInfo(sandbox.sandboxId).then(
        () => false,
        (err) => err instanceof SandboxNotFoundError,
      );
    });
  });

  it("with onTimeout pause, the sandbox is paused on expiry and resumes with its state", async () => {
    const sandbox = await Sandbox.create({
      timeoutMs: 300_000,
      lifecycle: { onTimeout: "pause" },
    });
    try {
      await sandbox.commands.run("echo kept > /home/user/k");
      await sandbox.setTimeout(2_000);
      await waitFor("the sandbox to be paused", async () => {
        return (await Sandbox.getInfo(sandbox.sandboxId)).state === "paused";
      });
      await sandbox.connect();
      assert.equal((await sandbox.commands.run("cat /home/user/k")).stdout, "kept\n");
    } finally {
      await sandbox.kill();
    }
  });

  it("with autoResume, traffic to a paused sandbox resumes it", async () => {
    const sandbox = await Sandbox.create({
      lifecycle: { onTimeout: "pause", autoResume: true },
    });
    try {
      await sandbox.commands.run("echo auto > /home/user/a");
      await sandbox.pause();
      assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "paused");
      const out = await sandbox.commands.run("cat /home/user/a");
      assert.equal(out.stdout, "auto\n");
      assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "running");
    } finally {
      await sandbox.kill();
    }
  });
});
