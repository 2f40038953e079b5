// Listing through the real e2b SDK: pagination across running and paused, state and
// metadata filters (the SDK double-encodes metadata).
import assert from "node:assert/strict";
import { after, before, it } from "node:test";
import { Sandbox } from "e2b";
import { leakCheck, vmLeftovers } from "../helpers/leak-check.js";
import { startServer, type TestServer } from "../helpers/server.js";

let server: TestServer;
const sandboxes: Sandbox[] = [];
const run = `list${Date.now()}`;

before(async () => {
  server = await startServer();
  for (let i = 0; i < 3; i++) {
    sandboxes.push(
      await Sandbox.create({ metadata: { run, index: String(i), odd: i % 2 ? "a&b=c" : "no" } }),
    );
  }
  await sandboxes[1]?.pause();
});

after(async () => {
  for (const sandbox of sandboxes) await Sandbox.kill(sandbox.sandboxId);
  assert.equal(await server.stop(), 0);
  assert.deepEqual(await leakCheck(), []);
  assert.deepEqual(await vmLeftovers(`${server.dataDir}/run`), []);
});

async function listAll(opts: Parameters<typeof Sandbox.list>[0]) {
  const paginator = Sandbox.list(opts);
  const pages: string[][] = [];
  while (paginator.hasNext) pages.push((await paginator.nextItems()).map((s) => s.sandboxId));
  return pages;
}

it("walks every sandbox exactly once with limit 1, running and paused alike", async () => {
  const pages = await listAll({ query: { metadata: { run } }, limit: 1 });
  assert.ok(pages.every((page) => page.length <= 1));
  const ids = pages.flat();
  assert.deepEqual([...ids].sort(), sandboxes.map((s) => s.sandboxId).sort());
  // Default order is newest first.
  assert.deepEqual(ids, sandboxes.map((s) => s.sandboxId).reverse());
});

it("filters by state", async () => {
  const paused = (await listAll({ query: { metadata: { run }, state: ["paused"] } })).flat();
  assert.deepEqual(paused, [sandboxes[1]?.sandboxId]);
  const running = (await listAll({ query: { metadata: { run }, state: ["running"] } })).flat();
  assert.deepEqual(running.sort(), [sandboxes[0]?.sandboxId, sandboxes[2]?.sandboxId].sort());
});

it("filters by metadata, including values with & and =", async () => {
  const odd = (await listAll({ query: { metadata: { run, odd: "a&b=c" } } })).flat();
  assert.deepEqual(odd, [sandboxes[1]?.sandboxId]);
  const none = (await listAll({ query: { metadata: { run, index: "7" } } })).flat();
  assert.deepEqual(none, []);
});

it("lists metadata and state in each item", async () => {
  const items = await Sandbox.list({ query: { metadata: { run } } }).nextItems();
  const paused = items.find((s) => s.sandboxId === sandboxes[1]?.sandboxId);
  assert.equal(paused?.state, "paused");
  assert.equal(paused?.metadata.index, "1");
});
