// Whoever can write the nodes table (any holder of the database URL, or a node registering
// under another node's id) points a node's row at a listener of its own. The gateway must
// send that listener neither clients' requests nor their API keys: it reaches nodes over
// TLS only, and only a server whose certificate from the cluster CA names the row's node.
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterEach, describe, it } from "node:test";
import {
  createClusterCa,
  issueClusterCertificate,
  loadClusterCredentials,
} from "../../../src/tls/index.js";
import { RecordingLogger } from "../../fakes/fake-node.js";
import { type ByteRecorder, startByteRecorder } from "../../helpers/byte-recorder.js";
import { API_KEY, startTestCluster, type TestCluster } from "../../helpers/gateway-cluster.js";

let running: TestCluster | undefined;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  for (const step of cleanups.splice(0).reverse()) await step();
  await running?.close();
  running = undefined;
});

async function recorder(tls?: { cert: string; key: string }): Promise<ByteRecorder> {
  const started = await startByteRecorder(tls);
  cleanups.push(() => started.close());
  return started;
}

async function twoNodes(logger = new RecordingLogger()) {
  running = await startTestCluster({ nodes: 2, gateway: { logger } });
  return running;
}

/** A sandbox created through the gateway, and the node it landed on. */
async function sandboxOn(c: TestCluster): Promise<{ id: string; nodeId: string }> {
  const res = await c.call("POST", "/sandboxes", { body: { templateID: "base", timeout: 300 } });
  assert.equal(res.status, 201, await res.clone().text());
  const id = ((await res.json()) as { sandboxID: string }).sandboxID;
  const nodeId = (await c.cluster.locateSandbox(id))?.nodeId;
  assert.ok(nodeId);
  return { id, nodeId };
}

/** The row of `nodeId` now says `url`, as an UPDATE by a holder of the database URL would. */
async function repoint(c: TestCluster, nodeId: string, url: string): Promise<void> {
  const row = c.cluster.nodes.get(nodeId);
  assert.ok(row);
  c.cluster.nodes.set(nodeId, { ...row, url });
  await c.gateway.directory.refresh();
}

/** A client's calls about the sandbox: the API (with its key) and its traffic. */
async function clientCalls(c: TestCluster, id: string): Promise<number[]> {
  const info = await c.call("GET", `/sandboxes/${id}`);
  const traffic = await fetch(`${c.gateway.url}/files?path=/x`, {
    method: "POST",
    headers: { "e2b-sandbox-id": id, "e2b-sandbox-port": "49983", "x-api-key": API_KEY },
    body: "payload",
  });
  return [info.status, traffic.status];
}

function assertNoKey(listener: ByteRecorder): void {
  const got = listener.received().toString("latin1");
  assert.ok(!got.includes(API_KEY), `the listener got the client's API key:\n${got.slice(0, 400)}`);
  assert.ok(!/x-api-key/i.test(got), "the listener got an API key header");
}

describe("gateway: nodes are who their row says", () => {
  it("speaks TLS to a node's address: a row repointed at a plain listener gets a handshake, no request, no key", async () => {
    const c = await twoNodes();
    const { id, nodeId } = await sandboxOn(c);
    const listener = await recorder();
    await repoint(c, nodeId, listener.url);

    const statuses = await clientCalls(c, id);
    assert.ok(listener.connections > 0, "the gateway did try the row's address");
    assertNoKey(listener);
    for (const first of listener.firstBytes) {
      assert.equal(
        first[0],
        0x16,
        `a TLS handshake record, not ${JSON.stringify(first.toString("latin1"))}`,
      );
    }
    assert.deepEqual(statuses, [503, 503], "node_unreachable, for the API and the traffic");
  });

  it("a node registering under another node's id, with its own valid certificate, gets no traffic: refused as misidentified, logged", async () => {
    const logger = new RecordingLogger();
    const c = await twoNodes(logger);
    const { id, nodeId } = await sandboxOn(c);
    const other = c.nodes.find((node) => node.id !== nodeId);
    assert.ok(other);
    // The other node is taken over: it registers as `nodeId` at a listener holding its own
    // certificate, issued by the cluster CA for its own id.
    const listener = await recorder(await c.pki.issue({ role: "node", name: other.id }));
    const row = c.cluster.nodes.get(nodeId);
    assert.ok(row);
    await c.cluster.registerNode({ id: nodeId, url: listener.url, capacity: row.capacity });
    await c.gateway.directory.refresh();

    const statuses = await clientCalls(c, id);
    assert.ok(listener.connections > 0, "the gateway did try the row's address");
    assert.equal(listener.received().length, 0, "not one byte of a request got through");
    assert.deepEqual(statuses, [503, 503]);
    const logged = logger.events("gateway.node_misidentified");
    assert.ok(logged.length > 0, "the refusal is logged");
    assert.equal(logged[0]?.fields.nodeId, nodeId);
    assert.match(String(logged[0]?.fields.presented), new RegExp(`warren-node:${other.id}`));

    // Creates pass the impostor by: all land on the real node, none reaches the listener.
    for (let i = 0; i < 4; i++) {
      const placed = await sandboxOn(c);
      assert.equal(placed.nodeId, other.id);
    }
    assert.equal(listener.received().length, 0);
  });

  it("a listener whose certificate names the node but comes from another CA gets nothing", async () => {
    const c = await twoNodes();
    const { id, nodeId } = await sandboxOn(c);
    const dir = await mkdtemp(join(tmpdir(), "warren-rogue-ca-"));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    await createClusterCa(join(dir, "ca"));
    await issueClusterCertificate({
      caDir: join(dir, "ca"),
      outDir: join(dir, "node"),
      identity: { role: "node", name: nodeId },
    });
    const rogue = await loadClusterCredentials(join(dir, "node"), "node", nodeId);
    const listener = await recorder(rogue);
    await repoint(c, nodeId, listener.url);

    const statuses = await clientCalls(c, id);
    assert.ok(listener.connections > 0, "the gateway did try the row's address");
    assert.equal(listener.received().length, 0);
    assert.deepEqual(statuses, [503, 503]);
  });

  it("the node's own certificate is its only way in: repointed back, the row works again", async () => {
    const c = await twoNodes();
    const { id, nodeId } = await sandboxOn(c);
    const real = c.cluster.nodes.get(nodeId)?.url ?? "";
    assert.ok(real.startsWith("https://"), `nodes register https URLs: ${real}`);
    const listener = await recorder();
    await repoint(c, nodeId, listener.url);
    assert.equal((await c.call("GET", `/sandboxes/${id}`)).status, 503);
    await repoint(c, nodeId, real);
    assert.equal((await c.call("GET", `/sandboxes/${id}`)).status, 200);
  });
});
