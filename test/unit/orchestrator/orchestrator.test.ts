// What only the orchestrator does, beyond the SandboxService contract (contract.test.ts):
// the guests it drives, its warm pool, the base template, VMM crashes, recovery, readiness.
// On fakes: no VMs, no root (test/fakes).
import assert from "node:assert/strict";
import { readdir } from "node:fs/promises";
import { describe, it, type TestContext } from "node:test";
import type { WarrenError } from "../../../src/shared/index.js";
import { SnapshotMismatchError } from "../../../src/vmm/index.js";
import { createInput } from "../../contracts/sandbox-service.contract.js";
import { FakeNode, type FakeNodeSettings } from "../../fakes/fake-node.js";
import type { FakeVm } from "../../fakes/fake-vmm-driver.js";

async function startNode(t: TestContext, settings: FakeNodeSettings = {}): Promise<FakeNode> {
  const node = await FakeNode.start(settings);
  t.after(() => node.close());
  return node;
}

function vmOf(node: FakeNode, sandboxId: string): FakeVm {
  const vm = [...node.driver.alive].find((v) => v.id === sandboxId);
  assert.ok(vm, `sandbox ${sandboxId} has a live VMM`);
  return vm;
}

async function eventually(check: () => boolean, what: string): Promise<void> {
  const deadline = Date.now() + 5_000;
  while (!check()) {
    if (Date.now() > deadline) assert.fail(`not within 5 s: ${what}`);
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

describe("Orchestrator (on fakes)", () => {
  describe("guests", () => {
    it("serves a sandbox's volumes in each slot its VM runs in, and names them to /init", async (t) => {
      const node = await startNode(t, { keptVmms: { keepMs: 0, maxKept: 0 } });
      const mounts = [{ volumeId: "vol-1", name: "data", path: "/mnt/data" }];
      const info = await node.orchestrator.create(createInput("base", { volumeMounts: mounts }));
      assert.deepEqual(info.volumeMounts, [{ name: "data", path: "/mnt/data" }]);
      const servedIn = () =>
        [...node.volumes.open.entries()].map(([slot, ids]) => [slot.hostAddress, ids]);
      const init = node.agent.inits.at(-1);
      assert.deepEqual(init?.body.volumeMounts, [
        { nfs_target: "169.254.0.22:/vol-1", path: "/mnt/data" },
      ]);
      assert.deepEqual(
        servedIn(),
        [[init?.host, ["vol-1"]]],
        "served where the guest is, before /init",
      );

      await node.orchestrator.pause(info.sandboxId);
      assert.equal(node.volumes.open.size, 0, "a paused sandbox has no server");
      await node.orchestrator.resume(info.sandboxId, undefined);
      assert.equal(node.volumes.open.size, 1, "served again in the resumed VM's slot");

      const results = await node.orchestrator.fork(info.sandboxId, { count: 2 });
      const children = results.map((r) =>
        "sandbox" in r ? r.sandbox : assert.fail("child failed"),
      );
      for (const child of children) assert.deepEqual(child.volumeMounts, info.volumeMounts);
      assert.equal(node.volumes.open.size, 3, "each child's slot serves the same volume");

      const snapshot = await node.orchestrator.createSnapshot(info.sandboxId, {});
      const fromSnapshot = await node.orchestrator.create(createInput(snapshot.snapshotId));
      assert.deepEqual(fromSnapshot.volumeMounts, info.volumeMounts, "a snapshot keeps its mounts");
      await assert.rejects(
        node.orchestrator.create(
          createInput(snapshot.snapshotId, {
            volumeMounts: [{ volumeId: "vol-2", name: "other", path: "/mnt/data" }],
          }),
        ),
        /\/mnt\/data has volume 'data' mounted in the snapshot/,
      );

      for (const id of [
        info.sandboxId,
        fromSnapshot.sandboxId,
        ...children.map((c) => c.sandboxId),
      ])
        await node.orchestrator.kill(id);
      // Its volume destroyed since: a create from the snapshot fails cleanly.
      node.volumes.gone.add("vol-1");
      await assert.rejects(
        node.orchestrator.create(createInput(snapshot.snapshotId)),
        (err: WarrenError) => err.reason === "volume_not_found",
      );
      await node.orchestrator.deleteTemplate(snapshot.templateId);
      assert.deepEqual(await node.leaks(), [], "every server closed with its VM, no slot kept");
    });

    it("a create hands the guest its env vars, E2B's and a fresh access token through /init", async (t) => {
      const node = await startNode(t);
      const info = await node.orchestrator.create(
        createInput("base", {
          secure: true,
          envVars: { LANG: "C.UTF-8", E2B_SANDBOX_ID: "spoofed" },
        }),
      );
      assert.ok(info.envdAccessToken, "a secured sandbox gets a token");
      const guest = vmOf(node, info.sandboxId).guest;
      assert.equal(guest.envdToken, info.envdAccessToken);
      assert.deepEqual(guest.envVars, {
        LANG: "C.UTF-8",
        E2B_SANDBOX_ID: info.sandboxId,
        E2B_TEMPLATE_ID: info.templateId,
      });
    });

    it("samples running sandboxes' metrics in the background: a past window has data", async (t) => {
      const node = await startNode(t, { metricsIntervalMs: 40 });
      const { sandboxId } = await node.orchestrator.create(createInput("base", { secure: true }));
      const created = new Date();
      await new Promise((resolve) => setTimeout(resolve, 300));
      const past = await node.orchestrator.metrics(sandboxId, { start: created, end: new Date() });
      assert.ok(past.length >= 2, `background samples: ${past.length}`);
      const before = await node.orchestrator.metrics(sandboxId, {
        start: new Date(created.getTime() - 60_000),
        end: new Date(created.getTime() - 30_000),
      });
      assert.deepEqual(before, [], "nothing before the sandbox existed");
      await node.orchestrator.pause(sandboxId);
      const kept = (await node.orchestrator.metrics(sandboxId, { start: created })).length;
      await new Promise((resolve) => setTimeout(resolve, 200));
      assert.equal(
        (await node.orchestrator.metrics(sandboxId, { start: created })).length,
        kept,
        "a paused sandbox is not sampled",
      );
    });

    it("fork children start from the source's state and prove its token, then get their own", async (t) => {
      const node = await startNode(t);
      const source = await node.orchestrator.create(createInput("base", { secure: true }));
      vmOf(node, source.sandboxId).guest.memory.progress = "step 41";
      const results = await node.orchestrator.fork(source.sandboxId, { count: 2 });
      const children = results.map((r) =>
        "sandbox" in r ? r.sandbox : assert.fail("child failed"),
      );
      const tokens = new Set(children.map((c) => c.envdAccessToken));
      assert.equal(tokens.size, 2, "each child has its own token");
      assert.ok(!tokens.has(source.envdAccessToken));
      for (const child of children) {
        const guest = vmOf(node, child.sandboxId).guest;
        assert.equal(guest.memory.progress, "step 41", "the child continues from the capture");
        assert.equal(guest.envdToken, child.envdAccessToken);
        const init = node.agent.inits.find((i) => i.body.accessToken === child.envdAccessToken);
        assert.equal(init?.token, source.envdAccessToken, "/init proved the captured token");
      }
      // The source keeps running on its own state.
      vmOf(node, source.sandboxId).guest.memory.progress = "step 42";
      for (const child of children) {
        assert.equal(vmOf(node, child.sandboxId).guest.memory.progress, "step 41");
      }
    });

    it("a stored snapshot forks with its source gone: children from its capture, its team's only", async (t) => {
      const node = await startNode(t);
      const source = await node.orchestrator.create(
        createInput("base", { secure: true, teamId: "team-a", metadata: { run: "r1" } }),
      );
      vmOf(node, source.sandboxId).guest.memory.progress = "step 41";
      await node.orchestrator.createSnapshot(source.sandboxId, { name: "ready" });
      await node.orchestrator.kill(source.sandboxId);
      const results = await node.orchestrator.forkSnapshot("ready", "team-a", { count: 3 });
      const children = results.map((r) =>
        "sandbox" in r ? r.sandbox : assert.fail(`child failed: ${JSON.stringify(r)}`),
      );
      assert.equal(new Set(children.map((c) => c.envdAccessToken)).size, 3);
      for (const child of children) {
        assert.equal(vmOf(node, child.sandboxId).guest.memory.progress, "step 41");
        assert.deepEqual(child.metadata, { run: "r1" });
        assert.equal(child.teamId, "team-a");
        const init = node.agent.inits.find((i) => i.body.accessToken === child.envdAccessToken);
        assert.equal(init?.token, source.envdAccessToken, "/init proved the captured token");
      }
      await assert.rejects(node.orchestrator.forkSnapshot("ready", "team-b", { count: 1 }), {
        reason: "template_not_found",
      });
      await assert.rejects(node.orchestrator.forkSnapshot("base", "team-a", { count: 1 }), {
        reason: "template_not_found",
      });
      for (const child of children) await node.orchestrator.kill(child.sandboxId);
    });

    it("a resume continues where the pause left off", async (t) => {
      const node = await startNode(t);
      const info = await node.orchestrator.create(createInput("base"));
      vmOf(node, info.sandboxId).guest.memory.file = "written before the pause";
      await node.orchestrator.pause(info.sandboxId);
      assert.ok(![...node.driver.alive].some((vm) => vm.id === info.sandboxId), "VMM let go");
      await node.orchestrator.connect(info.sandboxId, undefined);
      assert.equal(vmOf(node, info.sandboxId).guest.memory.file, "written before the pause");
    });

    it("envd refusing /init fails the create and leaves nothing behind", async (t) => {
      const node = await startNode(t);
      node.agent.failInits = 1;
      await assert.rejects(node.orchestrator.create(createInput("base")), /envd refused \/init/);
      assert.deepEqual(node.orchestrator.list({}), []);
      assert.deepEqual(await node.leaks(), []);
      await node.orchestrator.create(createInput("base"));
    });

    it("a resume whose envd fails stays paused and gives back its VM, slot and capacity", async (t) => {
      const node = await startNode(t, { maxSandboxes: 1 });
      const info = await node.orchestrator.create(createInput("base"));
      await node.orchestrator.pause(info.sandboxId);
      node.agent.failInits = 1;
      await assert.rejects(node.orchestrator.connect(info.sandboxId, undefined), /envd refused/);
      assert.equal(node.orchestrator.get(info.sandboxId).state, "paused");
      assert.deepEqual(await node.leaks(), []);
      const { resumed } = await node.orchestrator.connect(info.sandboxId, undefined);
      assert.equal(resumed, true, "the node's one place was given back");
    });

    it("metrics are sampled from envd and kept for later windows; logs hold the lifecycle and console", async (t) => {
      const node = await startNode(t);
      const info = await node.orchestrator.create(createInput("base"));
      const [sample] = await node.orchestrator.metrics(info.sandboxId, {});
      assert.equal(sample?.cpuCount, 1);
      await node.orchestrator.pause(info.sandboxId);
      const kept = await node.orchestrator.metrics(info.sandboxId, {});
      assert.equal(kept.length, 1, "a paused sandbox answers from the samples taken");
      await node.orchestrator.connect(info.sandboxId, undefined);
      const logs = await node.orchestrator.logs(info.sandboxId, {});
      const lifecycle = logs
        .filter((l) => l.source === "lifecycle")
        .map((l) => l.message.split(" ")[0]);
      assert.deepEqual(lifecycle, ["sandbox.created", "sandbox.paused", "sandbox.resumed"]);
      assert.ok(logs.some((l) => l.source === "console" && l.message.includes("booted")));
    });

    it("logs carry envd's own lines, fetched while it runs and kept while it is paused", async (t) => {
      const node = await startNode(t);
      const info = await node.orchestrator.create(createInput("base", { secure: true }));
      vmOf(node, info.sandboxId).guest.memory.log = "process 7 started as user: ls\n";
      const envdLines = async () =>
        (await node.orchestrator.logs(info.sandboxId, {}))
          .filter((l) => l.source === "envd")
          .map((l) => l.message);
      assert.deepEqual(await envdLines(), ["process 7 started as user: ls"]);
      vmOf(node, info.sandboxId).guest.memory.log += "process 7 ended: exit status 0\n";
      assert.deepEqual(
        await envdLines(),
        ["process 7 started as user: ls", "process 7 ended: exit status 0"],
        "each line once",
      );
      await node.orchestrator.pause(info.sandboxId);
      assert.equal((await envdLines()).length, 2, "a paused sandbox shows what it logged");
    });
  });

  describe("a sandbox's own log", () => {
    it("starts with its own lines: what envd logged before the sandbox began (its template's build, a fork parent) is not its", async (t) => {
      const node = await startNode(t);
      const info = await node.orchestrator.create(createInput("base", { secure: true }));
      const built = Date.now() - 3_600_000;
      vmOf(node, info.sandboxId).guest.memory.log =
        `@${built} init: 3 env vars\n@${built + 1} process 1 started as root: apt-get\nprocess 7 started as user: ls\n`;
      const envd = (await node.orchestrator.logs(info.sandboxId, {})).filter(
        (l) => l.source === "envd",
      );
      assert.deepEqual(
        envd.map((l) => l.message),
        ["process 7 started as user: ls"],
      );
    });
  });

  describe("filesystem-only pause", () => {
    it("keepMemory: false syncs the guest, and the resume cold-boots on the disk with the same token", async (t) => {
      const node = await startNode(t);
      const info = await node.orchestrator.create(
        createInput("base", { secure: true, envVars: { A: "1" } }),
      );
      const before = vmOf(node, info.sandboxId);
      before.guest.memory.process = "running";
      before.guest.disk = { "/home/user/notes": "kept" };
      await node.orchestrator.pause(info.sandboxId, { keepMemory: false });
      assert.deepEqual(node.agent.syncs, [info.sandboxId], "the page cache went to the disk first");
      assert.equal(
        (await node.catalog.getSandbox(info.sandboxId))?.config.pausedWithoutMemory,
        true,
      );
      const route = await node.orchestrator.route(info.sandboxId, 8000, () => true);
      assert.equal(route.kind, "not_found", "traffic never wakes it");
      await assert.rejects(node.orchestrator.fork(info.sandboxId, { count: 1 }), {
        reason: "sandbox_paused",
      });

      const boots = node.driver.boots;
      const { resumed } = await node.orchestrator.connect(info.sandboxId, undefined);
      assert.equal(resumed, true);
      assert.equal(node.driver.boots, boots + 1, "a cold boot, not a restore");
      const after = vmOf(node, info.sandboxId);
      assert.deepEqual(after.guest.memory, {}, "its processes are gone");
      assert.deepEqual(after.guest.disk, { "/home/user/notes": "kept" }, "its disk is not");
      assert.equal(after.guest.envdToken, info.envdAccessToken, "the SDK's token still works");
      assert.equal(after.guest.envVars.A, "1");
      assert.equal(
        (await node.catalog.getSandbox(info.sandboxId))?.config.pausedWithoutMemory,
        undefined,
      );
      // Paused with memory, it restores: processes and all.
      after.guest.memory.process = "again";
      await node.orchestrator.pause(info.sandboxId);
      await node.orchestrator.connect(info.sandboxId, undefined);
      assert.equal(vmOf(node, info.sandboxId).guest.memory.process, "again");
      assert.equal(node.driver.boots, boots + 1);
    });

    it("reboot: true cold-boots even a sandbox paused with its memory, on its flushed disk", async (t) => {
      const node = await startNode(t);
      const { sandboxId } = await node.orchestrator.create(createInput("base"));
      vmOf(node, sandboxId).guest.memory.process = "running";
      await node.orchestrator.pause(sandboxId);
      await node.orchestrator.connect(sandboxId, undefined, { reboot: true });
      assert.deepEqual(vmOf(node, sandboxId).guest.memory, {});
      // Its page cache went to the disk first: restored once, synced, captured again.
      assert.deepEqual(node.agent.syncs, [sandboxId]);
      await node.orchestrator.kill(sandboxId);
      assert.deepEqual(await node.leaks(), [], "the flushing VMM and slot went back");
    });

    it("a timeout pause with keepMemory: false keeps the filesystem only", async (t) => {
      const node = await startNode(t);
      const { sandboxId } = await node.orchestrator.create(
        createInput("base", {
          timeoutMs: 100,
          lifecycle: { onTimeout: "pause", autoResume: false, keepMemory: false },
        }),
      );
      await eventually(() => node.orchestrator.get(sandboxId).state === "paused", "paused");
      assert.equal((await node.catalog.getSandbox(sandboxId))?.config.pausedWithoutMemory, true);
    });
  });

  describe("lineage and stats (the dashboard's fork trees and node view)", () => {
    it("names each sandbox's source: a fork's parent and capture, a snapshot's sandbox, else its template", async (t) => {
      const node = await startNode(t, { maxSandboxes: 8 });
      const { orchestrator } = node;
      const source = await orchestrator.create(createInput("base"));
      // The source's own pause and resume do not make it anyone's child.
      await orchestrator.pause(source.sandboxId);
      await orchestrator.connect(source.sandboxId, undefined);
      const children = (await orchestrator.fork(source.sandboxId, { count: 2 })).map((r) =>
        "sandbox" in r ? r.sandbox : assert.fail("child failed"),
      );
      const [first, second] = children as [(typeof children)[0], (typeof children)[0]];
      const [grandchild] = (await orchestrator.fork(first.sandboxId, { count: 1 })).map((r) =>
        "sandbox" in r ? r.sandbox : assert.fail("grandchild failed"),
      );
      // A child paused after its fork still hangs under its source.
      await orchestrator.pause(second.sandboxId);
      const snapshot = await orchestrator.createSnapshot(source.sandboxId, { name: "golden" });
      const fromSnapshot = await orchestrator.create(createInput("golden"));

      const byId = new Map((await orchestrator.lineage()).map((l) => [l.sandboxId, l]));
      assert.equal(byId.size, 5, "every sandbox, nothing internal");
      assert.deepEqual(byId.get(source.sandboxId), {
        sandboxId: source.sandboxId,
        templateId: source.templateId,
        via: "template",
      });
      const capture = byId.get(first.sandboxId)?.snapshotId;
      assert.ok(capture, "a child names its capture");
      for (const child of [first, second]) {
        assert.deepEqual(byId.get(child.sandboxId), {
          sandboxId: child.sandboxId,
          templateId: child.templateId,
          via: "fork",
          parentId: source.sandboxId,
          snapshotId: capture,
        });
      }
      assert.equal(byId.get(grandchild?.sandboxId ?? "")?.parentId, first.sandboxId);
      assert.notEqual(byId.get(grandchild?.sandboxId ?? "")?.snapshotId, capture);
      const { snapshotId: persistent, ...started } = byId.get(fromSnapshot.sandboxId) ?? {};
      assert.deepEqual(started, {
        sandboxId: fromSnapshot.sandboxId,
        templateId: snapshot.templateId,
        via: "snapshot",
        parentId: source.sandboxId,
      });
      assert.ok(persistent && persistent !== capture, "names the persistent snapshot's capture");

      const stats = orchestrator.stats();
      assert.deepEqual(stats.sandboxesByState, { running: 4, paused: 1 });
      assert.deepEqual(
        stats.sandboxes.map((s) => s.sandboxId).sort(),
        [source, first, grandchild, fromSnapshot].map((s) => s?.sandboxId).sort(),
        "the running ones",
      );
      assert.equal(stats.capacity.maxSandboxes, 8);
      assert.ok(stats.capacity.sandboxes >= 4, "the running ones are admitted (and warm VMMs)");
    });
  });

  describe("VMM crashes", () => {
    it("a VMM dying under a running sandbox loses it, tells the proxy, and frees what it held", async (t) => {
      const node = await startNode(t);
      const info = await node.orchestrator.create(createInput("base"));
      const stopped: string[] = [];
      node.orchestrator.onSandboxStopped((id) => stopped.push(id));
      vmOf(node, info.sandboxId).crash();
      await eventually(() => node.orchestrator.list({}).length === 0, "the sandbox is gone");
      assert.deepEqual(stopped, [info.sandboxId]);
      assert.equal(node.logger.events("sandbox.vmm_died").length, 1);
      const row = await node.catalog.getSandbox(info.sandboxId);
      assert.equal(row?.state, "killed");
      assert.match(row?.endedReason ?? "", /^lost: the VMM exited/);
      assert.deepEqual(await node.leaks(), []);
    });
  });

  describe("warm pool", () => {
    it("a create takes a warmed VMM, and the pool refills", async (t) => {
      const node = await startNode(t, { poolSize: 1 });
      await eventually(() => node.orchestrator.status().pooledVmms === 1, "the pool filled");
      assert.ok(node.agent.exercises >= 2, "template capture and pool VMM walked envd");
      const info = await node.orchestrator.create(createInput("base"));
      const [creating] = node.logger.events("sandbox.creating");
      assert.equal(creating?.fields.pooled, true);
      assert.equal(node.orchestrator.status().pooledVmms, 0);
      await eventually(() => node.orchestrator.status().pooledVmms === 1, "the pool refilled");
      await node.orchestrator.kill(info.sandboxId);
      assert.deepEqual(await node.leaks(), [], "only the pooled VMM is left");
    });

    it("a warmed VMM's slot keeps its rules for a team's plain create, and changes them for its own", async (t) => {
      const node = await startNode(t, { poolSize: 1 });
      const policyChanges = () => [...node.slots.inUse].map((slot) => slot.policyChanges);
      await eventually(() => node.orchestrator.status().pooledVmms === 1, "the pool filled");
      const plain = await node.orchestrator.create(createInput("base", { teamId: "team-a" }));
      assert.equal(node.logger.events("sandbox.creating")[0]?.fields.pooled, true);
      assert.deepEqual(policyChanges(), [0], "no rewrite of a slot kept ready");
      await node.orchestrator.kill(plain.sandboxId);
      await eventually(() => node.orchestrator.status().pooledVmms === 1, "the pool refilled");
      const network = { allowOut: [], denyOut: ["203.0.113.0/24"], allowPublicTraffic: true };
      const own = await node.orchestrator.create(createInput("base", { network }));
      assert.equal(node.logger.events("sandbox.creating")[1]?.fields.pooled, true);
      assert.deepEqual(policyChanges(), [1], "its own rules, once");
      await node.orchestrator.kill(own.sandboxId);
    });
  });

  describe("warm pools per template", () => {
    /** Demand-sized pools on, refills at once (no 1 s wait after a take). */
    const pools = { pool: { maxPerTemplate: 4, refillDelayMs: 0 } };

    it("creates from a snapshot template grow its pool; deleting the template drops it", async (t) => {
      const node = await startNode(t, { ...pools, maxSandboxes: 8 });
      const source = await node.orchestrator.create(createInput("base"));
      const snapshot = await node.orchestrator.createSnapshot(source.sandboxId, { name: "golden" });
      await node.orchestrator.kill(source.sandboxId);
      const made = await Promise.all(
        [1, 2, 3].map(() => node.orchestrator.create(createInput("golden"))),
      );
      await eventually(() => node.orchestrator.status().pooledVmms === 1 + 3, "base 1, golden 3");
      const hit = await node.orchestrator.create(createInput("golden"));
      const pooled = node.logger.events("sandbox.creating").at(-1);
      assert.equal(pooled?.fields.pooled, true, "the next create from it took a warmed VMM");
      for (const info of [...made, hit]) await node.orchestrator.kill(info.sandboxId);
      await node.orchestrator.deleteTemplate(snapshot.templateId);
      assert.equal(node.logger.events("pool.forgotten").length, 1);
      await eventually(() => node.orchestrator.status().pooledVmms === 1, "only base's pool left");
      assert.deepEqual(await node.leaks(), [], "the template's VMMs and snapshot are gone");
      // Everything the pool held was given back: the node's 8 places are free but base's one.
      const all = await Promise.all(
        Array.from({ length: 8 }, () => node.orchestrator.create(createInput("base"))),
      );
      assert.equal(all.length, 8);
    });

    it("warms a secured sandbox's snapshot with its captured token", async (t) => {
      const node = await startNode(t, { ...pools, maxSandboxes: 8 });
      const source = await node.orchestrator.create({ ...createInput("base"), secure: true });
      await node.orchestrator.createSnapshot(source.sandboxId, { name: "secured" });
      await node.orchestrator.kill(source.sandboxId);
      const made = await Promise.all(
        [1, 2].map(() => node.orchestrator.create(createInput("secured"))),
      );
      await eventually(() => node.orchestrator.status().pooledVmms === 1 + 2, "base 1, secured 2");
      assert.equal(node.logger.events("pool.fill_failed").length, 0);
      for (const info of made) await node.orchestrator.kill(info.sandboxId);
    });

    it("fork children make no pool of their one-off capture", async (t) => {
      const node = await startNode(t, { ...pools, maxSandboxes: 8 });
      const source = await node.orchestrator.create(createInput("base"));
      await node.orchestrator.fork(source.sandboxId, { count: 3 });
      await eventually(() => node.orchestrator.status().pooledVmms === 1, "base's pool refilled");
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(node.orchestrator.status().pooledVmms, 1, "no pool for the fork capture");
    });
  });

  describe("base template", () => {
    it("is built once, reused across restarts, and rebuilt when a boot would differ", async (t) => {
      const node = await startNode(t);
      assert.equal(node.driver.boots, 1);
      const first = await node.catalog.getTemplate("base");
      await node.restart("graceful");
      assert.equal(node.driver.boots, 1, "reused");

      // A paused sandbox stands on the old capture: it is kept until that sandbox is gone.
      const paused = await node.orchestrator.create(createInput("base"));
      await node.orchestrator.pause(paused.sandboxId);
      node.driver.drift = "the kernel command line changed";
      await node.restart("graceful");
      assert.equal(node.driver.boots, 2, "rebuilt");
      const second = await node.catalog.getTemplate("base");
      assert.notEqual(second?.snapshotId, first?.snapshotId);
      assert.ok(await node.catalog.getSnapshot(first?.snapshotId ?? ""), "old capture kept");
      await node.orchestrator.kill(paused.sandboxId);
      assert.equal(await node.catalog.getSnapshot(first?.snapshotId ?? ""), undefined);
      assert.deepEqual(await node.leaks(), []);
    });

    it("is rebuilt when its capture is of an older snapshot format", async (t) => {
      const node = await startNode(t);
      node.driver.drift = new SnapshotMismatchError("snapshot has format version 2");
      await node.restart("graceful");
      assert.equal(node.driver.boots, 2, "rebuilt");
      const [stale] = node.logger.events("template.stale");
      assert.match(String(stale?.fields.reason), /format version 2/);
    });
  });

  describe("code-interpreter-v1", () => {
    it("asked of a server without it: not found, naming the setting that turns it on", async (t) => {
      const node = await startNode(t);
      await assert.rejects(
        node.orchestrator.create(createInput("code-interpreter-v1")),
        (err: Error & { reason?: string }) =>
          err.reason === "template_not_found" && /WARREN_CODE_INTERPRETER=on/.test(err.message),
      );
      assert.deepEqual(await node.leaks(), []);
    });
  });

  describe("restart recovery", () => {
    it("kills the VMMs a crashed server left running and sweeps their runtime dirs", async (t) => {
      const node = await startNode(t);
      const a = await node.orchestrator.create(createInput("base"));
      const b = await node.orchestrator.create(createInput("base"));
      await node.restart("crash");
      const [killed] = node.logger.events("recovery.vmm_killed");
      assert.equal(killed?.fields.count, 2);
      for (const id of [a.sandboxId, b.sandboxId]) {
        assert.equal((await node.catalog.getSandbox(id))?.state, "killed");
      }
      assert.deepEqual(await readdir(node.layout.runDir), []);
      assert.deepEqual(await node.leaks(), []);
    });
  });

  describe("cluster reconcile", () => {
    it("after the cluster reported its sandboxes lost, stops them here; forgets one claimed elsewhere", async (t) => {
      const node = await startNode(t);
      const lost = await node.orchestrator.create(createInput("base"));
      const moved = await node.orchestrator.create(createInput("base"));
      const kept = await node.orchestrator.create(createInput("base"));
      await node.orchestrator.pause(moved.sandboxId);
      // What a gateway's markDownStale and another node's claim do to this node's rows.
      await node.catalog.updateSandbox(lost.sandboxId, { state: "killed", endedReason: "lost" });
      const movedRow = await node.catalog.getSandbox(moved.sandboxId);
      await node.catalog.deleteSandbox(moved.sandboxId);

      assert.equal(await node.orchestrator.reconcile(), 2);
      assert.throws(() => node.orchestrator.get(lost.sandboxId), /not found/);
      assert.ok(![...node.driver.alive].some((vm) => vm.id === lost.sandboxId), "its VMM is gone");
      assert.equal((await node.catalog.getSandbox(lost.sandboxId))?.endedReason, "lost");
      assert.throws(() => node.orchestrator.get(moved.sandboxId), /not found/);
      assert.ok(movedRow?.snapshotId);
      assert.ok(
        await node.catalog.getSnapshot(movedRow.snapshotId),
        "the claimed sandbox's snapshot is left to its new node",
      );
      assert.equal(node.orchestrator.get(kept.sandboxId).state, "running");
      assert.equal(await node.orchestrator.reconcile(), 0);
    });
  });

  describe("readiness", () => {
    it("refuses work while stopping, with shutting_down", async (t) => {
      const node = await startNode(t);
      const info = await node.orchestrator.create(createInput("base"));
      const closing = node.orchestrator.close();
      await assert.rejects(node.orchestrator.create(createInput("base")), {
        reason: "shutting_down",
      });
      await closing;
      assert.equal(node.orchestrator.status().phase, "stopping");
      assert.equal(
        (await node.catalog.reopen().then((c) => c.getSandbox(info.sandboxId)))?.state,
        "paused",
      );
    });
  });

  describe("a burst larger than the node (start queue)", () => {
    it("serves the first arrivals in order and refuses the rest at once with 429s, leaving nothing", async (t) => {
      const node = await startNode(t, {
        maxSandboxes: 10,
        maxConcurrentStarts: 2,
        startQueue: { maxQueued: 4, maxWaitMs: 10_000 },
      });
      const gate = node.driver.holdStarts();
      const served: number[] = [];
      const creates = Array.from({ length: 40 }, (_, i) =>
        node.orchestrator.create(createInput("base")).then((info) => {
          served.push(i);
          return info;
        }),
      );
      // Refusals come while the admitted still wait: nobody waits to be told no.
      const refused = await Promise.allSettled(creates.slice(6));
      for (const r of refused) {
        assert.equal(r.status, "rejected");
        const err = (r as PromiseRejectedResult).reason as WarrenError;
        assert.equal(err.reason, "start_queue_full");
        assert.equal(err.status, 429);
        assert.ok((err.retryAfterS ?? 0) >= 1);
      }
      gate.open();
      const admitted = await Promise.all(creates.slice(0, 6));
      // Two start at a time, each pair in arrival order (within a pair, either ends first).
      const pairs = [0, 2, 4].map((i) => served.slice(i, i + 2).sort());
      assert.deepEqual(
        pairs,
        [
          [0, 1],
          [2, 3],
          [4, 5],
        ],
        "in arrival order",
      );
      for (const info of admitted) await node.orchestrator.kill(info.sandboxId);
      assert.deepEqual(await node.leaks(), []);
    });

    it("past the node's room: capacity_exhausted at once; a kill while queued ends the wait", async (t) => {
      const node = await startNode(t, {
        maxSandboxes: 3,
        maxConcurrentStarts: 1,
        startQueue: { maxQueued: 10, maxWaitMs: 10_000 },
      });
      const gate = node.driver.holdStarts();
      const creates = Array.from({ length: 5 }, () =>
        node.orchestrator.create(createInput("base")),
      );
      for (const r of await Promise.allSettled(creates.slice(3))) {
        assert.equal(r.status, "rejected");
        assert.equal(
          ((r as PromiseRejectedResult).reason as WarrenError).reason,
          "capacity_exhausted",
        );
      }
      const creating = node.logger.events("sandbox.creating").map((l) => l.fields.sandboxId);
      assert.equal(creating.length, 3, "one starting, two waiting their turn");
      // The last to arrive waits behind two: its kill ends the wait, the gate still closed.
      const killed = node.orchestrator.kill(String(creating[2]));
      await assert.rejects(creates[2] ?? assert.fail("no third create"), {
        reason: "sandbox_killed",
      });
      await killed;
      gate.open();
      for (const info of await Promise.all(creates.slice(0, 2))) {
        await node.orchestrator.kill(info.sandboxId);
      }
      assert.deepEqual(await node.leaks(), []);
    });
  });

  describe("network slots", () => {
    it("no free slot is network_exhausted, and the capacity taken is given back", async (t) => {
      const node = await startNode(t, { maxSlots: 1, maxSandboxes: 2 });
      const first = await node.orchestrator.create(createInput("base"));
      await assert.rejects(node.orchestrator.create(createInput("base")), {
        reason: "network_exhausted",
      });
      await node.orchestrator.kill(first.sandboxId);
      const held = await node.orchestrator.create(createInput("base"));
      // Had the failed create kept its share, the node would now be full: capacity_exhausted.
      const [child] = await node.orchestrator.fork(held.sandboxId, { count: 1 });
      assert.ok(child && "error" in child);
      assert.equal(child.error.reason, "network_exhausted");
      assert.equal(node.orchestrator.list({}).length, 1);
    });
  });
});
