// What the egress gate costs a sandbox's connections (issue 29): new TLS connections (to
// their first byte) and a 64 MB HTTPS-style download, from a guest on a real slot to a
// server on the fake internet, in one run: with no policy, with the destination allowed by
// address (both straight through the slot's NAT), and allowed by name only (through the
// gate: SNI read, the name resolved, an upstream connection from the host). No VM: the
// guest is a namespace behind the slot's tap (test/helpers/network/fake-guest.ts), so the
// figures are the network path's, not TCG's.
// Then HTTPS requests (each on a new connection, to the response's end) and an HTTPS download
// with a header rule for the name (network.rules): the gate terminates the guest's TLS with
// the node's egress CA, adds the header with a secret filled in and re-encrypts upstream,
// against the same name allowed without a rule, and no policy.
// Run: npm run bench:egress (as root). BENCH_CONNECTIONS (default 200), BENCH_DOWNLOAD_MB (64).
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DEFAULT_EGRESS_POLICY, type EgressPolicy } from "../src/network/index.js";
import { EgressCa } from "../src/tls/index.js";
import { removeLeftovers } from "../test/helpers/leak-check.js";
import { CleanupStack } from "../test/helpers/network/cleanup-stack.js";
import { guestBehindGate, selfSignedCertificate } from "../test/helpers/network/fake-dns.js";
import { FAKENET, FakeNet } from "../test/helpers/network/fake-net.js";
import type { AgentReply } from "../test/helpers/network/netns-agent.js";
import { createTestCa } from "../test/helpers/test-ca.js";
import { report, type Summary, summarize } from "./lib/report.js";

const CONNECTIONS = Number(process.env.BENCH_CONNECTIONS ?? 200);
const DOWNLOAD_MB = Number(process.env.BENCH_DOWNLOAD_MB ?? 64);
const DOWNLOADS = 3;
const TLS_PORT = 8443;
const BULK_PORT = 8444;
const HTTPS_PORT = 8445;
const NAME = "files.allowed.test";

const cleanup = new CleanupStack();
try {
  await removeLeftovers();
  const net = await FakeNet.start(9090);
  cleanup.defer(() => net.close());
  const tls = selfSignedCertificate("fakenet");
  need(await net.agent.listenTls(TLS_PORT, "fakenet-tls", tls));
  need(await net.agent.listenBulk(BULK_PORT, DOWNLOAD_MB * 1024 * 1024, tls));
  const upstreamCa = createTestCa("bench upstream CA");
  need(await net.agent.listenHttps(HTTPS_PORT, upstreamCa.issue(NAME), DOWNLOAD_MB * 1024 * 1024));
  const caDir = await mkdtemp(join(tmpdir(), "warren-bench-egress-ca-"));
  cleanup.defer(() => rm(caDir, { recursive: true, force: true }));
  const egressCa = await EgressCa.open(caDir);
  const { slot, guest } = await guestBehindGate(
    cleanup,
    (name) => (name.endsWith(".allowed.test") ? FAKENET.public1 : undefined),
    {
      contextFor: (name) => egressCa.contextFor(name),
      upstreamCa: [upstreamCa.cert],
      secretValue: async () => "sk-bench-0123456789",
    },
  );

  const policies: Record<string, Partial<EgressPolicy>> = {
    "no policy": {},
    "allowed by address": { allowOut: [FAKENET.public1], denyOut: ["0.0.0.0/0"] },
    "allowed by name (gate)": { allowOut: ["*.allowed.test"], denyOut: ["0.0.0.0/0"] },
  };
  const rows: Summary[] = [];
  const p50: Record<string, { connectMs: number; mbps: number }> = {};
  for (const [label, policy] of Object.entries(policies)) {
    await slot.setPolicy({ ...DEFAULT_EGRESS_POLICY, ...policy });
    process.stderr.write(`bench:egress: ${label}\n`);
    need(await guest.agent.connectTimes(FAKENET.public1, TLS_PORT, NAME, 10), "warm-up"); // warm-up
    const times = need(await guest.agent.connectTimes(FAKENET.public1, TLS_PORT, NAME, CONNECTIONS))
      .split(",")
      .map(Number);
    const connect = summarize(`${label}: new TLS connection`, "ms", times);
    const rates: number[] = [];
    for (let i = 0; i < DOWNLOADS; i++) {
      const [bytes, ms] = need(
        await guest.agent.download(FAKENET.public1, BULK_PORT, NAME),
        "download",
      )
        .split(" ")
        .map(Number);
      if (bytes !== DOWNLOAD_MB * 1024 * 1024)
        throw new Error(`${label}: downloaded ${bytes} bytes`);
      rates.push((bytes as number) / 1e6 / ((ms as number) / 1000));
    }
    const download = summarize(`${label}: ${DOWNLOAD_MB} MB download`, "MB/s", rates);
    rows.push(connect, download);
    p50[label] = { connectMs: connect.p50, mbps: download.p50 };
  }

  const https: Record<string, { policy: Partial<EgressPolicy>; ca: string }> = {
    "HTTPS, no policy": { policy: {}, ca: upstreamCa.cert },
    "HTTPS, allowed by name (gate)": {
      policy: { allowOut: ["*.allowed.test"], denyOut: ["0.0.0.0/0"] },
      ca: upstreamCa.cert,
    },
    "HTTPS, header rule (TLS terminated)": {
      policy: {
        allowOut: ["*.allowed.test"],
        denyOut: ["0.0.0.0/0"],
        headerRules: [
          // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's placeholder, literally
          { domain: NAME, headers: [["authorization", "Bearer ${e2b.secrets.key}"]] },
        ],
        secretsOf: "bench",
      },
      ca: egressCa.certificate,
    },
  };
  for (const [label, { policy, ca }] of Object.entries(https)) {
    await slot.setPolicy({ ...DEFAULT_EGRESS_POLICY, ...policy });
    process.stderr.write(`bench:egress: ${label}\n`);
    const target = { servername: NAME, ca };
    need(await guest.agent.httpsTimes(FAKENET.public1, HTTPS_PORT, { ...target, count: 10 }));
    const times = need(
      await guest.agent.httpsTimes(FAKENET.public1, HTTPS_PORT, { ...target, count: CONNECTIONS }),
    )
      .split(",")
      .map(Number);
    const request = summarize(`${label}: request, new connection`, "ms", times);
    const rates: number[] = [];
    for (let i = 0; i < DOWNLOADS; i++) {
      const [bytes, ms] = need(await guest.agent.httpsDownload(FAKENET.public1, HTTPS_PORT, target))
        .split(" ")
        .map(Number);
      if (bytes !== DOWNLOAD_MB * 1024 * 1024) throw new Error(`${label}: got ${bytes} bytes`);
      rates.push((bytes as number) / 1e6 / ((ms as number) / 1000));
    }
    const download = summarize(`${label}: ${DOWNLOAD_MB} MB download`, "MB/s", rates);
    rows.push(request, download);
    p50[label] = { connectMs: request.p50, mbps: download.p50 };
    // The rows measured the rule only if it applied: one recorded request shows it did.
    await net.agent.seen();
    need(await guest.agent.https(FAKENET.public1, HTTPS_PORT, target));
    const [seen] = await net.agent.seen();
    if ((seen?.headers.authorization !== undefined) !== (policy.headerRules !== undefined)) {
      throw new Error(`${label}: the upstream saw authorization "${seen?.headers.authorization}"`);
    }
  }

  const ratio = (a: number, b: number) => Math.round((a / b) * 100) / 100;
  const at = (label: string) => p50[label] as { connectMs: number; mbps: number };
  const [base, gate] = [at("allowed by address"), at("allowed by name (gate)")];
  const [named, ruled] = [
    at("HTTPS, allowed by name (gate)"),
    at("HTTPS, header rule (TLS terminated)"),
  ];
  report("egress", rows, {
    connections: CONNECTIONS,
    downloadMB: DOWNLOAD_MB,
    gateAddedMsPerConnection: Math.round((gate.connectMs - base.connectMs) * 100) / 100,
    ruleAddedMsPerRequest: Math.round((ruled.connectMs - named.connectMs) * 100) / 100,
    ratios: {
      "gate/address new connection": ratio(gate.connectMs, base.connectMs),
      "gate/address download": ratio(gate.mbps, base.mbps),
      "rule/gate HTTPS request": ratio(ruled.connectMs, named.connectMs),
      "rule/gate HTTPS download": ratio(ruled.mbps, named.mbps),
    },
  });
} finally {
  await cleanup.run();
}

function need(reply: AgentReply, what = "agent call"): string {
  if (!reply.ok) throw new Error(`${what}: ${reply.error}`);
  return reply.data ?? "";
}
