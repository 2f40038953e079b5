import assert from "node:assert/strict";
import { describe, it, type TestContext } from "node:test";
import type {
  Catalog,
  ClusterCatalog,
  NodeLoad,
  NodeRegistration,
  SandboxState,
  SnapshotRow,
} from "../../src/catalog/index.js";
import { sandboxRow } from "./catalog.contract.js";

/** What an implementation's test file hands the suite: a fresh, empty cluster per test. */
export interface ClusterHarness {
  cluster: ClusterCatalog;
  /** A node's own Catalog on the same store (to write the rows the cluster reads). */
  catalog(nodeId: string): Promise<Catalog>;
  /** Another ClusterCatalog on the same store (another node's or gateway's). */
  reopen(): Promise<ClusterCatalog>;
  /** Closes everything the harness opened and removes the store. */
  cleanup: () => Promise<void>;
}

const CAPACITY = { vcpus: 8, memoryMiB: 16_384, maxSandboxes: 32 };
const LOAD: NodeLoad = {
  sandboxes: 2,
  vcpusUsed: 3,
  memoryMiBUsed: 1024,
  warmTemplates: ["tpl-1"],
  draining: false,
};

function node(id: string, over: Partial<NodeRegistration> = {}): NodeRegistration {
  return { id, url: `http://${id}.internal:3000`, capacity: CAPACITY, ...over };
}

function snapshotRow(id: string): SnapshotRow {
  return {
    id,
    dir: `/snapshots/${id}`,
    kind: "pause",
    names: [],
    imagesFingerprint: "fp",
    createdAt: "2030-01-01T00:00:00.000Z",
  };
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const ids = (rows: readonly { id: string }[]) => rows.map((r) => r.id);

/** Registers the behaviour every ClusterCatalog must have; run it from each implementation's test. */
export function clusterContract(name: string, open: () => Promise<ClusterHarness>): void {
  async function use(t: TestContext): Promise<ClusterHarness> {
    const harness = await open();
    t.after(harness.cleanup);
    return harness;
  }

  describe(`ClusterCatalog contract: ${name}`, () => {
    it("registers nodes (an upsert: up again, load cleared) and lists them by id", async (t) => {
      const { cluster } = await use(t);
      await cluster.registerNode(node("n2", { labels: { zone: "a" } }));
      await cluster.registerNode(node("n1"));
      let [n1, n2] = await cluster.listNodes();
      assert.deepEqual(
        { ...n1, registeredAt: "", lastHeartbeat: "", heartbeatAgeMs: 0 },
        {
          ...node("n1"),
          state: "up",
          labels: {},
          registeredAt: "",
          lastHeartbeat: "",
          heartbeatAgeMs: 0,
        },
      );
      assert.equal(n1?.lastHeartbeat, n1?.registeredAt);
      assert.ok(n1 && n1.heartbeatAgeMs >= 0 && n1.heartbeatAgeMs < 5_000, `${n1?.heartbeatAgeMs}`);
      assert.deepEqual(n2?.labels, { zone: "a" });
      assert.equal("load" in (n1 as object), false, "no load before a heartbeat");

      await cluster.heartbeat("n1", LOAD);
      await cluster.setNodeState("n1", "down");
      await cluster.registerNode(node("n1", { url: "http://moved:3000" }));
      [n1, n2] = await cluster.listNodes();
      assert.equal(n1?.state, "up");
      assert.equal(n1?.url, "http://moved:3000");
      assert.equal("load" in (n1 as object), false);
    });

    it("records a heartbeat's load and time, returning the state it leaves unchanged", async (t) => {
      const { cluster } = await use(t);
      await cluster.registerNode(node("n1"));
      const [registered] = await cluster.listNodes();
      await sleep(20);
      assert.equal(await cluster.heartbeat("n1", LOAD), "up");
      const [beat] = await cluster.listNodes();
      assert.deepEqual(beat?.load, LOAD);
      assert.ok((beat?.lastHeartbeat ?? "") > (registered?.lastHeartbeat ?? ""));
      assert.equal(beat?.registeredAt, registered?.registeredAt);

      await cluster.setNodeState("n1", "draining");
      assert.equal(await cluster.heartbeat("n1", { ...LOAD, draining: false }), "draining");
      assert.equal((await cluster.listNodes())[0]?.state, "draining");
      await cluster.setNodeState("ghost", "down");
      assert.deepEqual(ids(await cluster.listNodes()), ["n1"], "an unknown id is a no-op");
      await assert.rejects(cluster.heartbeat("ghost", LOAD), { kind: "not_found" });
    });

    it("marks stale nodes down and their sandboxes lost, keeping published paused ones", async (t) => {
      const { cluster, catalog } = await use(t);
      const [a, b] = [await catalog("a"), await catalog("b")];
      await cluster.registerNode(node("a"));
      await cluster.registerNode(node("b"));
      const states: [string, SandboxState, string?][] = [
        ["a-creating", "creating"],
        ["a-running", "running"],
        ["a-pausing", "pausing"],
        ["a-resuming", "resuming"],
        ["a-killing", "killing"],
        ["a-killed", "killed"],
        ["a-paused-published", "paused", "snap-pub"],
        ["a-paused-local", "paused", "snap-local"],
        ["a-paused-nosnap", "paused"],
      ];
      for (const [id, state, snapshotId] of states) {
        await a.insertSandbox(sandboxRow({ id, state, ...(snapshotId && { snapshotId }) }));
      }
      await a.putSnapshot(snapshotRow("snap-pub"));
      await a.putSnapshot(snapshotRow("snap-local"));
      assert.equal(await cluster.markPublished("snap-pub"), true);
      await b.insertSandbox(sandboxRow({ id: "b-running" }));

      // Wide margins: a loaded test host may take long between two statements.
      await sleep(700);
      await cluster.heartbeat("b", LOAD);
      const stale = await cluster.markDownStale(500);
      assert.deepEqual(ids(stale), ["a"]);
      assert.equal(stale[0]?.state, "down");
      const lost = stale[0]?.lost ?? [];
      assert.deepEqual(lost, [
        { sandboxId: "a-creating", was: "creating" },
        { sandboxId: "a-killing", was: "killing" },
        { sandboxId: "a-paused-local", was: "paused" },
        { sandboxId: "a-paused-nosnap", was: "paused" },
        { sandboxId: "a-pausing", was: "pausing" },
        { sandboxId: "a-resuming", was: "resuming" },
        { sandboxId: "a-running", was: "running" },
      ]);
      for (const { sandboxId } of lost) {
        const row = await a.getSandbox(sandboxId);
        assert.equal(row?.state, "killed", sandboxId);
        assert.equal(row?.endedReason, "lost", sandboxId);
      }
      assert.deepEqual(await cluster.locateSandbox("a-running"), {
        teamId: "team-a",
        nodeId: "a",
        nodeUrl: node("a").url,
        state: "killed",
        nodeState: "down",
        vcpus: 2,
        memoryMiB: 512,
        endedReason: "lost",
      });
      // Each lost one's team is told it was killed, as a node tells of what it finds lost.
      const killed = await b.listLifecycleEvents({
        teamId: "team-a",
        types: ["sandbox.lifecycle.killed"],
        offset: 0,
        limit: 100,
        ascending: true,
      });
      assert.deepEqual(
        killed.map((e) => [e.sandbox.id, e.kind, e.detail]).sort(),
        lost.map(({ sandboxId, was }) => [
          sandboxId,
          "sandbox.lost",
          { state: was, reason: "lost: its node stopped answering" },
        ]),
      );
      assert.equal((await a.getSandbox("a-paused-published"))?.state, "paused");
      assert.equal((await a.getSandbox("a-killed"))?.endedReason, undefined, "history untouched");
      assert.equal((await b.getSandbox("b-running"))?.state, "running");
      assert.deepEqual(await cluster.markDownStale(500), [], "done once");
      assert.equal(await cluster.heartbeat("a", LOAD), "down", "a returning node learns it");
    });

    it("marks each stale node down once when several gateways sweep at once", async (t) => {
      const { cluster, catalog } = await use(t);
      const nodes = ["n1", "n2", "n3"];
      for (const id of nodes) {
        await cluster.registerNode(node(id));
        await (await catalog(id)).insertSandbox(sandboxRow({ id: `sb-${id}` }));
      }
      await sleep(50);
      const sweeps = await Promise.all([1, 2, 3, 4].map(() => cluster.markDownStale(10)));
      assert.deepEqual(
        sweeps
          .flat()
          .map((n) => n.id)
          .sort(),
        nodes,
      );
      assert.deepEqual(
        sweeps
          .flat()
          .flatMap((n) => n.lost.map((l) => l.sandboxId))
          .sort(),
        nodes.map((id) => `sb-${id}`),
      );
    });

    it("locates a sandbox on its node and lists sandboxes across nodes", async (t) => {
      const { cluster, catalog } = await use(t);
      const [a, b] = [await catalog("a"), await catalog("b")];
      await cluster.registerNode(node("a"));
      await cluster.registerNode(node("b"));
      const late = "2030-01-02T00:00:00.000Z";
      await a.insertSandbox(sandboxRow({ id: "sb-2", startedAt: late }));
      await b.insertSandbox(sandboxRow({ id: "sb-1", startedAt: late, state: "paused" }));
      await b.insertSandbox(sandboxRow({ id: "sb-3" }));
      await cluster.setNodeState("b", "draining");
      assert.deepEqual(await cluster.locateSandbox("sb-1"), {
        teamId: "team-a",
        nodeId: "b",
        nodeUrl: node("b").url,
        state: "paused",
        nodeState: "draining",
        vcpus: 2,
        memoryMiB: 512,
      });
      assert.equal(await cluster.locateSandbox("sb-ghost"), undefined);
      const all = await cluster.listSandboxes();
      assert.deepEqual(
        all.map((r) => [r.id, r.nodeId]),
        [
          ["sb-3", "b"],
          ["sb-1", "b"],
          ["sb-2", "a"],
        ],
      );
      assert.deepEqual(all[2], { ...(await a.getSandbox("sb-2")), nodeId: "a" });
      assert.deepEqual(ids(await cluster.listSandboxes({ nodeId: "b" })), ["sb-3", "sb-1"]);
      assert.deepEqual(ids(await cluster.listSandboxes({ states: ["paused"] })), ["sb-1"]);
      assert.deepEqual(await cluster.listSandboxes({ states: ["paused"], nodeId: "a" }), []);
      assert.deepEqual(await cluster.listSandboxes({ states: [] }), []);
    });

    it("sums a team's holding sandboxes over every node, its internal VMs and other teams aside", async (t) => {
      const { cluster, catalog } = await use(t);
      const [a, b] = [await catalog("a"), await catalog("b")];
      await cluster.registerNode(node("a"));
      await cluster.registerNode(node("b"));
      await a.insertSandbox(sandboxRow({ id: "sb-1" }));
      await b.insertSandbox(
        sandboxRow({ id: "sb-2", state: "resuming", vcpus: 1, memoryMiB: 256 }),
      );
      await b.insertSandbox(sandboxRow({ id: "sb-3", state: "paused" }));
      await b.insertSandbox(sandboxRow({ id: "sb-4", state: "killed" }));
      await a.insertSandbox(sandboxRow({ id: "sb-5", config: { internal: true } }));
      await a.insertSandbox(sandboxRow({ id: "sb-6", teamId: "team-b" }));
      assert.deepEqual(await cluster.teamUsage("team-a"), {
        sandboxes: 2,
        vcpus: 3,
        memoryMiB: 768,
        diskMiB: 3 * 2048,
      });
      assert.deepEqual(await cluster.teamUsage("team-none"), {
        sandboxes: 0,
        vcpus: 0,
        memoryMiB: 0,
        diskMiB: 0,
      });
    });

    it("claims a paused sandbox whose snapshot is published for another node, and nothing else", async (t) => {
      const { cluster, catalog } = await use(t);
      const [a, b] = [await catalog("a"), await catalog("b")];
      await a.putSnapshot(snapshotRow("s"));
      await a.insertSandbox(sandboxRow({ id: "sb-paused", state: "paused", snapshotId: "s" }));
      await a.insertSandbox(sandboxRow({ id: "sb-running" }));
      assert.equal(await cluster.claimSandbox("sb-paused", "b", "a"), false, "not published");
      assert.equal((await a.getSandbox("sb-paused"))?.state, "paused");
      await cluster.markPublished("s");
      assert.equal(await cluster.claimSandbox("sb-running", "b"), false);
      assert.equal(await cluster.claimSandbox("sb-ghost", "b"), false);
      assert.equal(await cluster.claimSandbox("sb-paused", "b", "c"), false, "not on c");
      assert.equal(await cluster.claimSandbox("sb-paused", "b", "a"), true);
      assert.equal(await a.getSandbox("sb-paused"), undefined);
      assert.equal((await b.getSandbox("sb-paused"))?.snapshotId, "s");
      assert.equal((await b.getSnapshot("s"))?.nodeId, "a", "the snapshot stays with its node");
      assert.deepEqual(ids(await a.listSandboxes()), ["sb-running"]);
      assert.equal(await cluster.claimSandbox("sb-paused", "b"), true, "already there");

      // Racing claims that name where they found it: one wins.
      const races = await Promise.all(
        ["c", "d", "e"].map((to) => cluster.claimSandbox("sb-paused", to, "b")),
      );
      assert.equal(races.filter(Boolean).length, 1);
    });

    it("marks a snapshot published once, visible on its row and kept when it is put again", async (t) => {
      const { cluster, catalog } = await use(t);
      const [a, b] = [await catalog("a"), await catalog("b")];
      assert.equal(await cluster.markPublished("snap-1"), false);
      await a.putSnapshot(snapshotRow("snap-1"));
      assert.equal((await b.getSnapshot("snap-1"))?.publishedAt, undefined);
      const before = new Date(Date.now() - 5_000).toISOString();
      assert.equal(await cluster.markPublished("snap-1"), true);
      const published = (await b.getSnapshot("snap-1"))?.publishedAt;
      assert.ok(published && published >= before, published);
      await sleep(10);
      assert.equal(await cluster.markPublished("snap-1"), true);
      await a.putSnapshot({ ...snapshotRow("snap-1"), names: ["n"] });
      assert.deepEqual(await b.getSnapshot("snap-1"), {
        ...snapshotRow("snap-1"),
        names: ["n"],
        publishedAt: published,
        nodeId: "a",
      });
    });

    it("rejects calls after close as unavailable", async (t) => {
      const { cluster } = await use(t);
      await cluster.close();
      await cluster.close();
      await assert.rejects(cluster.listNodes(), { name: "WarrenError", kind: "unavailable" });
    });
  });
}
