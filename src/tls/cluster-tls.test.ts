import assert from "node:assert/strict";
import { X509Certificate } from "node:crypto";
import { copyFile, mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import { createServer, type Server } from "node:https";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { it, type TestContext } from "node:test";
import { connect } from "node:tls";
import { createClusterCa, issueClusterCertificate } from "./cluster-ca.js";
import {
  type ClusterCredentials,
  clusterClientOptions,
  clusterServerOptions,
  loadClusterCredentials,
} from "./cluster-credentials.js";
import { identitiesIn, MISIDENTIFIED, peerIdentity } from "./cluster-identity.js";

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), "warren-cluster-tls-"));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

/** A CA in `dir/ca`, and a member's directory issued from it. */
async function member(
  dir: string,
  role: "node" | "gateway",
  name: string,
  ca = "ca",
): Promise<ClusterCredentials> {
  const outDir = join(dir, `${ca}-${role}-${name}`);
  await issueClusterCertificate({ caDir: join(dir, ca), outDir, identity: { role, name } });
  return loadClusterCredentials(outDir, role, role === "node" ? name : undefined);
}

it("makes a cluster CA once: its key 0600, and never over an existing one", async (t) => {
  const dir = await tempDir(t);
  const { certFile, keyFile } = await createClusterCa(join(dir, "ca"));
  assert.equal((await stat(keyFile)).mode & 0o777, 0o600);
  assert.equal((await stat(join(dir, "ca"))).mode & 0o777, 0o700);
  const ca = new X509Certificate(await readFile(certFile));
  assert.equal(ca.ca, true);
  await assert.rejects(createClusterCa(join(dir, "ca")), /already there/);
});

it("issues a node's certificate naming its id (server only) and a gateway's (client only)", async (t) => {
  const dir = await tempDir(t);
  await createClusterCa(join(dir, "ca"));
  const node = await member(dir, "node", "node-1");
  const gateway = await member(dir, "gateway", "gw-a");
  assert.deepEqual(node.identity, { role: "node", name: "node-1" });
  assert.deepEqual(gateway.identity, { role: "gateway", name: "gw-a" });
  const nodeCert = new X509Certificate(node.cert);
  assert.equal(nodeCert.subjectAltName, "URI:warren-node:node-1");
  assert.deepEqual(nodeCert.keyUsage, ["1.3.6.1.5.5.7.3.1"], "serverAuth only");
  assert.deepEqual(new X509Certificate(gateway.cert).keyUsage, ["1.3.6.1.5.5.7.3.2"]);
  const outDir = join(dir, "ca-node-node-1");
  assert.equal((await stat(join(outDir, "node.key"))).mode & 0o777, 0o600);
  assert.equal((await stat(outDir)).mode & 0o777, 0o700);
  assert.deepEqual(node.warnings, []);
  await assert.rejects(
    issueClusterCertificate({
      caDir: join(dir, "ca"),
      outDir: join(dir, "bad"),
      identity: { role: "node", name: "Node 1, URI:warren-gateway:x" },
    }),
    /no cluster name/,
  );
});

it("loads credentials only when they are the cluster CA's, current and this member's", async (t) => {
  const dir = await tempDir(t);
  await createClusterCa(join(dir, "ca"));
  await createClusterCa(join(dir, "other-ca"));
  await member(dir, "node", "node-1");
  const nodeDir = join(dir, "ca-node-node-1");
  await assert.rejects(
    loadClusterCredentials(nodeDir, "node", "node-2"),
    /names warren-node:node-1, but this node is node-2/,
  );
  await assert.rejects(loadClusterCredentials(nodeDir, "gateway"), /cannot read .*gateway\.crt/);
  await assert.rejects(
    loadClusterCredentials(join(dir, "nowhere"), "node", "node-1"),
    /warren cluster issue/,
  );
  // The right files with another CA's certificate beside them.
  await member(dir, "node", "node-1", "other-ca");
  await copyFile(join(dir, "other-ca", "ca.crt"), join(nodeDir, "ca.crt"));
  await assert.rejects(
    loadClusterCredentials(nodeDir, "node", "node-1"),
    /not issued by the cluster CA/,
  );
  // Expired (issued in the past).
  const oldDir = join(dir, "old");
  await issueClusterCertificate({
    caDir: join(dir, "ca"),
    outDir: oldDir,
    identity: { role: "node", name: "node-1" },
    days: 1,
    now: new Date(Date.now() - 3 * 86_400_000),
  });
  await assert.rejects(loadClusterCredentials(oldDir, "node", "node-1"), /issue it again/);
  // The CA's key where only members' files belong: loaded, with a warning.
  const withKey = join(dir, "ca-node-node-2");
  await member(dir, "node", "node-2");
  await writeFile(join(withKey, "ca.key"), "secret");
  const warned = await loadClusterCredentials(withKey, "node", "node-2");
  assert.match(warned.warnings.join("\n"), /CA's key belongs with whoever issues/);
});

it("parses only Warren's names from a certificate's alternative names", () => {
  assert.deepEqual(identitiesIn("URI:warren-node:n1, DNS:warren-node:n2, URI:warren-gateway:g"), [
    { role: "node", name: "n1" },
    { role: "gateway", name: "g" },
  ]);
  assert.deepEqual(identitiesIn('URI:"warren-node:a, URI:warren-node:b"'), []);
  assert.deepEqual(identitiesIn(undefined), []);
});

/** A node's cluster listener, with its credentials, reporting who each peer was. */
async function clusterServer(
  t: TestContext,
  credentials: ClusterCredentials,
  peers: unknown[],
): Promise<Server> {
  const server = createServer(clusterServerOptions(credentials), (req, res) => {
    peers.push(peerIdentity(req.socket));
    res.end("ok");
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => server.close(resolve)));
  return server;
}

/** A gateway's TLS handshake to `server` for node `nodeId`: the error code, if any. */
function handshake(
  server: Server,
  gateway: ClusterCredentials,
  nodeId: string,
): Promise<string | undefined> {
  const { port } = server.address() as AddressInfo;
  return new Promise((resolve) => {
    const socket = connect({ host: "127.0.0.1", port, ...clusterClientOptions(gateway, nodeId) });
    socket.once("secureConnect", () => {
      socket.end("GET / HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
      socket.once("close", () => resolve(undefined));
      socket.resume();
    });
    socket.on("error", (err: NodeJS.ErrnoException) => resolve(err.code ?? err.message));
  });
}

it("a gateway reaches only the node its row names; the node knows the gateway by its certificate", async (t) => {
  const dir = await tempDir(t);
  await createClusterCa(join(dir, "ca"));
  await createClusterCa(join(dir, "rogue"));
  const gateway = await member(dir, "gateway", "gw");
  const peers: unknown[] = [];
  const node1 = await clusterServer(t, await member(dir, "node", "node-1"), peers);
  assert.equal(await handshake(node1, gateway, "node-1"), undefined);
  assert.deepEqual(peers, [{ role: "gateway", name: "gw" }]);
  assert.equal(await handshake(node1, gateway, "node-2"), MISIDENTIFIED);
  // A certificate naming node-2, from another CA: not the cluster's.
  const rogue = await clusterServer(t, await member(dir, "node", "node-2", "rogue"), []);
  assert.equal(await handshake(rogue, gateway, "node-2"), "SELF_SIGNED_CERT_IN_CHAIN");
  // A gateway of another CA gets no handshake from node-1.
  const stranger = await member(dir, "gateway", "gw", "rogue");
  assert.notEqual(await handshake(node1, stranger, "node-1"), undefined);
  assert.equal(peers.length, 1);
});

it("a gateway's connections share one TLS context per credentials, and speak TLS 1.3 only", async (t) => {
  const dir = await tempDir(t);
  await createClusterCa(join(dir, "ca"));
  const gateway = await member(dir, "gateway", "gw");
  const toOne = clusterClientOptions(gateway, "node-1");
  assert.ok(toOne.secureContext, "a context built once, not ca/cert/key per connection");
  assert.equal(
    clusterClientOptions(gateway, "node-2", undefined, "control").secureContext,
    toOne.secureContext,
  );
  const other = await member(dir, "gateway", "gw-2");
  assert.notEqual(clusterClientOptions(other, "node-1").secureContext, toOne.secureContext);
  // The shared context keeps the floor: a node that offers at most TLS 1.2 gets no handshake.
  const node = await member(dir, "node", "node-1");
  const old = createServer({
    ...clusterServerOptions(node),
    minVersion: "TLSv1.2",
    maxVersion: "TLSv1.2",
  });
  await new Promise<void>((resolve) => old.listen(0, "127.0.0.1", resolve));
  t.after(() => new Promise((resolve) => old.close(resolve)));
  assert.notEqual(await handshake(old, gateway, "node-1"), undefined);
  const current = await clusterServer(t, node, []);
  assert.equal(await handshake(current, gateway, "node-1"), undefined);
});
