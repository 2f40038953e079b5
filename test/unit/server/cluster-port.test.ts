// A node's front as node-server.ts wires it in a cluster (listenFront with its cluster
// credentials), over a node of fakes: the plain port and the cluster port. The internal node
// API answers gateways only, on the cluster port, by their certificate from the cluster CA;
// a key from the database, an API key or another member's certificate gets nothing.
import assert from "node:assert/strict";
import { createPrivateKey, webcrypto } from "node:crypto";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { request } from "node:https";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import pino from "pino";
import type { TemplateBuilds } from "../../../src/builds/index.js";
import type { Orchestrator } from "../../../src/orchestrator/index.js";
import { type Front, listenFront } from "../../../src/server/front.js";
import { Late } from "../../../src/server/late.js";
import { NodeMetrics } from "../../../src/server/prometheus.js";
import { loadConfig } from "../../../src/shared/config.js";
import { WarrenError } from "../../../src/shared/index.js";
import { Authenticator, TeamAdmin } from "../../../src/tenancy/index.js";
import { ALGORITHM, loadX509, pkcs8Pem, serial } from "../../../src/tls/certificate-kit.js";
import {
  type ClusterCredentials,
  type ClusterIdentity,
  CONTROL_ALPN,
  createClusterCa,
  issueClusterCertificate,
  loadClusterCredentials,
} from "../../../src/tls/index.js";
import { FakeNode } from "../../fakes/fake-node.js";
import { InMemoryTeams } from "../../fakes/in-memory-teams.js";
import { TEST_ADMIN_TOKEN } from "../../helpers/auth.js";

const API_KEY = "e2b_cluster_port_test_key";
const NODE_ID = "node-a";

let dir: string;
let node: FakeNode;
let front: Front;
const certs = new Map<string, ClusterCredentials>();

async function issue(caDir: string, identity: ClusterIdentity): Promise<ClusterCredentials> {
  const outDir = join(
    dir,
    `${identity.role}-${identity.name}-${caDir === join(dir, "ca") ? "" : "rogue"}`,
  );
  await issueClusterCertificate({ caDir, outDir, identity });
  return loadClusterCredentials(outDir, identity.role, identity.name);
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "warren-cluster-port-"));
  await createClusterCa(join(dir, "ca"));
  await createClusterCa(join(dir, "rogue-ca"));
  certs.set("node", await issue(join(dir, "ca"), { role: "node", name: NODE_ID }));
  certs.set("other-node", await issue(join(dir, "ca"), { role: "node", name: "node-b" }));
  certs.set("gateway", await issue(join(dir, "ca"), { role: "gateway", name: "gw" }));
  certs.set("rogue-gateway", await issue(join(dir, "rogue-ca"), { role: "gateway", name: "gw" }));
  certs.set("node-as-client", await bothWays(certs.get("other-node") as ClusterCredentials));
  node = await FakeNode.start();
  const orchestrator = new Late<Orchestrator>(() => ({ phase: "starting" }));
  orchestrator.bind(node.orchestrator);
  const config = loadConfig(
    {
      host: "127.0.0.1",
      port: 0,
      clusterHost: "127.0.0.1",
      clusterPort: 0,
      databaseUrl: "postgres://unused/warren",
      nodeId: NODE_ID,
      dataDir: dir,
      dashboard: "off",
    },
    {},
  );
  const teams = new InMemoryTeams();
  front = await listenFront({
    config,
    logger: pino({ level: "silent" }),
    authenticator: new Authenticator({
      adminToken: TEST_ADMIN_TOKEN,
      fileKeys: () => new Set([API_KEY]),
      teams: () => teams,
    }),
    teamAdmin: () => new TeamAdmin(teams, { count: async () => 0, killAll: async () => {} }),
    volumes: () => {
      throw new WarrenError("unavailable", "no volumes in this test");
    },
    secrets: () => {
      throw new WarrenError("unavailable", "no secrets in this test");
    },
    webhooks: () => {
      throw new WarrenError("unavailable", "no webhooks in this test");
    },
    status: () => orchestrator.get().status(),
    orchestrator,
    builds: new Late<TemplateBuilds>(() => ({ phase: "starting" })),
    cluster: certs.get("node"),
    metrics: new NodeMetrics(() => undefined),
  });
});

after(async () => {
  await front?.close();
  await node?.close();
  await rm(dir, { recursive: true, force: true });
});

/**
 * A certificate from the cluster CA naming node-b for both server and client authentication,
 * as an operator's CA (cert-manager, say) may issue: the handshake passes, the listener must
 * still refuse it for naming no gateway.
 */
async function bothWays(model: ClusterCredentials): Promise<ClusterCredentials> {
  const x509 = await loadX509();
  const caKey = await readFile(join(dir, "ca", "ca.key"), "utf8");
  const signingKey = await webcrypto.subtle.importKey(
    "pkcs8",
    createPrivateKey(caKey).export({ type: "pkcs8", format: "der" }),
    ALGORITHM,
    false,
    ["sign"],
  );
  const keys = await webcrypto.subtle.generateKey(ALGORITHM, true, ["sign", "verify"]);
  const cert = await x509.X509CertificateGenerator.create({
    serialNumber: serial(),
    subject: "CN=node-b",
    issuer: new x509.X509Certificate(model.ca).subject,
    notBefore: new Date(Date.now() - 60_000),
    notAfter: new Date(Date.now() + 86_400_000),
    signingKey,
    publicKey: keys.publicKey,
    signingAlgorithm: ALGORITHM,
    extensions: [
      new x509.ExtendedKeyUsageExtension([
        x509.ExtendedKeyUsage.serverAuth,
        x509.ExtendedKeyUsage.clientAuth,
      ]),
      new x509.SubjectAlternativeNameExtension([{ type: "url", value: "warren-node:node-b" }]),
    ],
  });
  return { ...model, cert: cert.toString("pem"), key: await pkcs8Pem(keys.privateKey) };
}

interface Answer {
  readonly status: number;
  readonly body: string;
}

/** A request to the cluster port as `who` (a client certificate, or none), trusting the cluster CA. */
function onClusterPort(
  who: string | undefined,
  method: string,
  path: string,
  headers: Record<string, string> = {},
  alpn?: string[],
): Promise<Answer> {
  const url = new URL(path, front.clusterUrl);
  const client = who === undefined ? undefined : certs.get(who);
  const serverCa = certs.get("node")?.ca;
  return new Promise((resolve, reject) => {
    const sent = request(
      {
        host: url.hostname,
        port: url.port,
        method,
        path: url.pathname,
        headers,
        ca: serverCa,
        ...(client && { cert: client.cert, key: client.key }),
        // The node's certificate names warren-node:node-a, no host name.
        checkServerIdentity: () => undefined,
        ...(alpn && { ALPNProtocols: alpn }),
        agent: false,
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on("data", (chunk: Buffer) => chunks.push(chunk));
        res.on("end", () =>
          resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString() }),
        );
      },
    );
    sent.on("error", reject);
    sent.end();
  });
}

describe("a node's ports in a cluster", () => {
  it("listens on a cluster port, https", () => {
    assert.match(front.clusterUrl ?? "", /^https:\/\/127\.0\.0\.1:\d+$/);
  });

  it("refuses the internal node API on the plain port: an API key, the cluster key the database held, anything", async () => {
    const attempts: Record<string, string>[] = [
      { "x-api-key": API_KEY },
      { "x-warren-cluster-key": "the-key-cluster_secrets-held" },
      {},
    ];
    for (const headers of attempts) {
      for (const path of ["/internal/node/undrain", "/internal/node/drain"]) {
        const res = await fetch(`${front.url}${path}`, { method: "POST", headers });
        assert.equal(res.status, 403, `${path} with ${Object.keys(headers)}`);
        assert.equal(((await res.json()) as { reason: string }).reason, "internal_route");
      }
    }
    assert.equal(node.orchestrator.draining, false, "nothing drained the node");
  });

  it("speaks TLS only on the cluster port: a plain HTTP client gets no answer", async () => {
    const plain = (front.clusterUrl ?? "").replace("https:", "http:");
    await assert.rejects(fetch(`${plain}/health`));
    await assert.rejects(
      fetch(`${plain}/internal/node/drain`, { method: "POST", headers: { "x-api-key": API_KEY } }),
    );
  });

  it("answers no one on the cluster port without a gateway's certificate from the cluster CA", async () => {
    // No certificate, a node's (server authentication only), a gateway's from another CA, a
    // node's that may authenticate clients too (refused for naming no gateway).
    for (const who of [undefined, "other-node", "node", "rogue-gateway", "node-as-client"]) {
      await assert.rejects(
        onClusterPort(who, "POST", "/internal/node/drain", { "x-api-key": API_KEY }),
        `${who ?? "no certificate"} got an answer`,
      );
      await assert.rejects(onClusterPort(who, "GET", "/health"));
    }
    assert.equal(node.orchestrator.draining, false);
  });

  it("serves a gateway's relay connections the API by API key, its control connections the internal node API alone", async () => {
    const control = [CONTROL_ALPN];
    assert.equal((await onClusterPort("gateway", "GET", "/health")).status, 200);
    // What a gateway relays arrives on its certificate too: that is no credential here.
    for (const alpn of [undefined, ["http/1.1"]]) {
      const relayed = await onClusterPort("gateway", "POST", "/internal/node/drain", {}, alpn);
      assert.equal(relayed.status, 403, relayed.body);
    }
    assert.equal(node.orchestrator.draining, false, "nothing drained the node");
    const undrain = await onClusterPort("gateway", "POST", "/internal/node/undrain", {}, control);
    assert.equal(undrain.status, 204, undrain.body);
    // A client's call relayed by the gateway still needs the client's key.
    assert.equal((await onClusterPort("gateway", "GET", "/v2/sandboxes")).status, 401);
    const listed = await onClusterPort("gateway", "GET", "/v2/sandboxes", { "x-api-key": API_KEY });
    assert.equal(listed.status, 200, listed.body);
    // The control channel answers nothing but the internal API, whatever the key.
    const headers = { "x-api-key": API_KEY };
    const apiOnControl = await onClusterPort("gateway", "GET", "/v2/sandboxes", headers, control);
    assert.equal(apiOnControl.status, 404, apiOnControl.body);
    assert.match(apiOnControl.body, /control connection/);
  });
});
