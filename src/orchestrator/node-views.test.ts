import assert from "node:assert/strict";
import { it } from "node:test";
import type { Catalog, TemplateRow } from "../catalog/index.js";
import { Capacity } from "./capacity.js";
import { NodeViews } from "./node-views.js";
import type { WarmPool } from "./pool/warm-pool.js";
import { SandboxTable } from "./sandboxes/sandbox-table.js";
import { StartQueue } from "./start-queue.js";

const BASE: TemplateRow = {
  id: "tpl-1",
  aliases: ["base"],
  kind: "base",
  snapshotId: "snap-1",
  vcpus: 1,
  memoryMiB: 512,
  diskSizeMiB: 1024,
  createdAt: new Date(0).toISOString(),
};

it("a heartbeat's load never waits long on a catalog busy with creates: the last template list stands in", async () => {
  let reads = 0;
  let hang = false;
  // Only what load() reads of each part: the catalog's templates, the pool's ready VMMs.
  const catalog = {
    listTemplates: async () => {
      reads += 1;
      if (hang) await new Promise(() => {}); // every connection held by a burst's creates
      return [BASE];
    },
  } as unknown as Catalog;
  const pool = { readyBySnapshot: () => new Map([["snap-1", 1]]) } as unknown as WarmPool;
  const views = new NodeViews({
    catalog,
    table: new SandboxTable(),
    pool,
    capacity: new Capacity({ maxSandboxes: 1, maxVcpus: 1, maxMemoryMiB: 1 }),
    starts: new StartQueue(1),
  });
  assert.deepEqual((await views.load()).warmTemplates, ["tpl-1", "base"]);
  assert.deepEqual((await views.load()).warmTemplates, ["tpl-1", "base"]);
  assert.equal(reads, 1, "reused while fresh");

  hang = true;
  // The server's sockets keep its loop alive; here a timer of the test's does.
  const alive = setInterval(() => {}, 1_000);
  await new Promise((resolve) => setTimeout(resolve, 2_100));
  const started = performance.now();
  assert.deepEqual((await views.load()).warmTemplates, ["tpl-1", "base"]);
  assert.ok(performance.now() - started < 1_000, "answered without the catalog");
  assert.equal(reads, 2, "a new read was tried");
  clearInterval(alive);
});
