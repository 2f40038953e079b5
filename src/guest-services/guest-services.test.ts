// The guest services process and its supervisor, for real: a child process running
// src/guest-services/main.ts (as this user: the unit tier has no root, so no user namespace
// here — test/e2e/guest-services.test.ts runs it as it runs on a node), a slot's NFS and a
// slot's egress gate (its DNS) served through it on loopback, the child killed with SIGKILL
// and started again.
import assert from "node:assert/strict";
import {
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { fileURLToPath } from "node:url";
import { startFakeDns } from "../../test/helpers/fake-dns-server.js";
import { askUdp, dnsQuery } from "../../test/helpers/loopback-gate.js";
import { Nfs, RpcClient, sleep } from "../../test/unit/volumes/nfs-client.js";
import { type GateHost, validateEgressPolicy } from "../network/index.js";
import { silentLogger } from "../shared/index.js";
import type { NfsExport } from "../volumes/index.js";
import { GuestServices } from "./host.js";

const ENTRY = fileURLToPath(new URL("./main.ts", import.meta.url));
const dir = mkdtempSync(join(tmpdir(), "warren-guest-services-"));
const VOLUME = "9e0c1d7a-5b8e-4a4f-b1f2-2f0b6f1d3c4e";
let services: GuestServices;
let gates: GateHost;
let dns: Awaited<ReturnType<typeof startFakeDns>>;

/** Where a slot listens in these tests: loopback, any port (kept across restarts). */
const LOOPBACK = () => ({ host: "127.0.0.1", port: 0 });

const spec = (key = VOLUME): NfsExport => ({
  volumes: [{ key, root: join(dir, key) }],
  teamId: "team-a",
  disk: { dir, reserveMiB: 0 },
});

before(async () => {
  dns = await startFakeDns((name) => ADDRESSES[name]);
  mkdirSync(join(dir, VOLUME));
  writeFileSync(join(dir, VOLUME, "hello.txt"), "hi");
  services = await GuestServices.start({
    entry: ENTRY,
    // Its cwd is /: tsx is named by URL, not resolved from there.
    nodeArgs: ["--import", import.meta.resolve("tsx")],
    env: { PATH: process.env.PATH ?? "/usr/bin:/bin", WARREN_LOG_LEVEL: "silent" },
    logger: silentLogger,
    restartDelayMs: { first: 50, max: 200 },
  });
  gates = services.gates({ resolver: `127.0.0.1:${dns.port}` }, () => ({
    tcp: LOOPBACK,
    dnsTcp: LOOPBACK,
    dnsUdp: LOOPBACK,
  }));
});

after(async () => {
  await services?.close();
  dns?.close();
  rmSync(dir, { recursive: true, force: true });
});

/** What the tests' resolver knows (public addresses: no limit of the gate's refuses them). */
const ADDRESSES: Record<string, string> = {
  "api.allowed.test": "93.184.216.34",
  "api.other.test": "93.184.216.35",
};

const policy = (allowOut: string[]) =>
  validateEgressPolicy({ allowInternet: false, allowOut, denyOut: [] });

/** The gate's DNS answer for `name`: its addresses, or its rcode. */
async function lookUpName(port: number, name: string): Promise<string> {
  const answer = await askUdp(port, dnsQuery(name));
  if (!answer) return "no answer";
  const addresses = (answer.answers ?? []).map((a) => String((a as { data?: unknown }).data));
  return addresses.length > 0 ? addresses.join(",") : (answer.rcode ?? "empty");
}

/** Looks `hello.txt` up over NFS on `port`: what a guest's mount does first. */
async function lookUp(port: number): Promise<number> {
  const client = await RpcClient.open(port);
  try {
    const root = await client.mount(`/${VOLUME}`);
    return (await Nfs.lookup(client, root, "hello.txt")).status;
  } finally {
    client.socket.destroy();
  }
}

/** The processes holding the socket that listens on `port` (by its inode in /proc/net/tcp). */
function listenersOf(port: number, pids: readonly number[]): number[] {
  const hex = port.toString(16).toUpperCase().padStart(4, "0");
  const line = readFileSync("/proc/net/tcp", "utf8")
    .split("\n")
    .find((l) => l.includes(`:${hex} 00000000:0000 0A`));
  const inode = line?.trim().split(/\s+/)[9];
  assert.ok(inode, `a socket listens on ${port}`);
  const holds = (pid: number, fd: string) => {
    try {
      return readlinkSync(`/proc/${pid}/fd/${fd}`, { encoding: "utf8" }) === `socket:[${inode}]`;
    } catch {
      return false; // closed while listed
    }
  };
  return pids.filter((pid) => readdirSync(`/proc/${pid}/fd`).some((fd) => holds(pid, fd)));
}

it("serves a slot's volumes from its own process, which alone holds the listener", async () => {
  const served = await services.serveNfs("wt-1", LOOPBACK, spec());
  try {
    assert.equal(await lookUp(served.port), 0);
    const child = services.pid;
    assert.ok(child && child !== process.pid, "a process of its own");
    assert.deepEqual(listenersOf(served.port, [process.pid, child]), [child]);
  } finally {
    await served.close();
  }
});

it("refuses an export it cannot serve, and lets go of the listener", async () => {
  await assert.rejects(services.serveNfs("wt-2", LOOPBACK, spec("missing-volume")), /volumes: /);
  // The slot is free again: a later serve of it works.
  const served = await services.serveNfs("wt-2", LOOPBACK, spec());
  await served.close();
});

it("is started again after a kill -9, and serves every slot again within seconds", async () => {
  const served = await services.serveNfs("wt-3", LOOPBACK, spec());
  try {
    const first = services.pid;
    assert.ok(first);
    const killedAt = performance.now();
    process.kill(first, "SIGKILL");
    let status: number | undefined;
    while (performance.now() - killedAt < 10_000) {
      status = await lookUp(served.port).catch(() => undefined);
      if (status === 0 && services.pid !== first) break;
      await sleep(50);
    }
    assert.equal(status, 0, "the slot's NFS answers again");
    assert.notEqual(services.pid, first, "a new process");
    assert.equal(services.restarts, 1);
    console.log(`# serving again ${Math.round(performance.now() - killedAt)} ms after the kill`);
  } finally {
    await served.close();
  }
});

it("runs a slot's egress gate there: its DNS answers by the policy, updated live", async () => {
  const slot = { netns: "wt-g1", gateway: "127.0.0.1", base: "10.201.0.0/16" };
  const gate = await gates.open(slot, policy(["*.allowed.test"]));
  try {
    const ports = services.gatePorts(slot.netns);
    const udp = ports.dnsUdp as number;
    assert.equal(await lookUpName(udp, "api.allowed.test"), "93.184.216.34");
    assert.equal(await lookUpName(udp, "api.other.test"), "NXDOMAIN");
    const child = services.pid as number;
    for (const port of [ports.tcp, ports.dnsTcp] as number[]) {
      assert.deepEqual(listenersOf(port, [process.pid, child]), [child], `:${port} is the child's`);
    }
    await gate.update(policy(["api.other.test"]));
    assert.equal(await lookUpName(udp, "api.other.test"), "93.184.216.35");
    assert.equal(await lookUpName(udp, "api.allowed.test"), "NXDOMAIN");
  } finally {
    await gate.close();
  }
});

it("opens a slot's gate again after a kill -9, with the policy it had last", async () => {
  const slot = { netns: "wt-g2", gateway: "127.0.0.1", base: "10.201.0.0/16" };
  const gate = await gates.open(slot, policy(["*.allowed.test"]));
  try {
    await gate.update(policy(["api.other.test"]));
    const udp = services.gatePorts(slot.netns).dnsUdp as number;
    const first = services.pid as number;
    const restarts = services.restarts;
    process.kill(first, "SIGKILL");
    let answer = "";
    for (const began = performance.now(); performance.now() - began < 10_000; ) {
      answer = await lookUpName(udp, "api.other.test");
      if (answer === "93.184.216.35" && services.pid !== first) break;
      await sleep(50);
    }
    assert.equal(answer, "93.184.216.35", "answered again, by the last policy");
    assert.equal(services.restarts, restarts + 1);
    assert.equal(await lookUpName(udp, "api.allowed.test"), "NXDOMAIN");
  } finally {
    await gate.close();
  }
});

it("makes a webhook delivery's POST in its own process, and answers its status", async () => {
  let seenBy: number | undefined;
  const receiver = createServer((req, res) => {
    seenBy = req.socket.remotePort;
    req.resume();
    req.on("end", () => res.writeHead(202).end());
  });
  await new Promise<void>((resolve) => receiver.listen(0, "127.0.0.1", resolve));
  const { port } = receiver.address() as AddressInfo;
  try {
    const request = {
      url: `http://127.0.0.1:${port}/hook`,
      headers: { "e2b-signature": "s" },
      body: "{}",
      timeoutMs: 2_000,
      privateHosts: [`127.0.0.1:${port}`],
    };
    assert.deepEqual(await services.post(request), { status: 202 });
    assert.ok(seenBy !== undefined);
    // What the process refuses comes back as the attempt's error, nothing sent.
    seenBy = undefined;
    const refused = await services.post({ ...request, privateHosts: [] });
    assert.match("error" in refused ? refused.error : "", /loopback address/);
    assert.equal(seenBy, undefined);
  } finally {
    receiver.close();
  }
});
