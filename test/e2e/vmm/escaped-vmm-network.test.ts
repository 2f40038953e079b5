// An escaped VMM (code running as a jailed QEMU: its uid, its namespaces) gets no network
// of its own: not to the host, not to the LAN, private ranges or metadata, not to what the
// sandbox's egress policy refuses its guest. The guest's own, policed traffic still flows.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdirSync, rmSync } from "node:fs";
import { readFile, readlink } from "node:fs/promises";
import { type AddressInfo, createServer, type Server } from "node:net";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { promisify } from "node:util";
import type { GuestArtifacts } from "../../../src/host-setup/index.js";
import { NetnsSlotPool, type NetworkSlot } from "../../../src/network/index.js";
import type { Vm } from "../../../src/vmm/index.js";
import type { QemuDriver } from "../../../src/vmm/qemu/index.js";
import {
  envdUrl,
  initEnvd,
  sandboxAt,
  slotVmSpec,
  testVmm,
  waitForEnvd,
} from "../../helpers/guest.js";
import { leakCheck, qemuPidsIn, removeLeftovers } from "../../helpers/leak-check.js";
import { FAKENET, FakeNet } from "../../helpers/network/fake-net.js";
import { runEnv, runPoolOptions } from "../../helpers/run-env.js";

const execFileP = promisify(execFile);
const FAKENET_PORT = 47011;
/** The host's listener: a port the kernel picks (a fixed one in the ephemeral range can be some outgoing connection's, EADDRINUSE in CI). */
let hostPort = 0;
const SHAPE = { vcpus: 1, memoryMiB: 512 };

/** The real uid of a process (what an escaped QEMU runs as). */
async function uidOf(pid: number): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, "utf8");
  return Number(/^Uid:\s+(\d+)/m.exec(status)?.[1]);
}

/**
 * Opens a TCP connection to host:port from the network namespace at `netnsPath`, as `uid`
 * (a stand-in for code an escaped VMM runs); what came of it: "connected" or the failure.
 */
async function connectAs(
  netnsPath: string,
  uid: number,
  host: string,
  port: number,
): Promise<string> {
  const probe = `exec 3<>/dev/tcp/${host}/${port} && echo connected`;
  const args = [
    `--net=${netnsPath}`,
    "setpriv",
    `--reuid=${uid}`,
    `--regid=${uid}`,
    "--clear-groups",
    "--",
    "timeout",
    "3",
    "bash",
    "-c",
    probe,
  ];
  return execFileP("nsenter", args).then(
    ({ stdout }) => stdout.trim(),
    (err: { code?: number; stderr?: string }) =>
      `failed (${err.code}): ${(err.stderr ?? "").trim().split("\n").at(-1)}`,
  );
}

describe("an escaped VMM's network (real guest)", () => {
  let images: GuestArtifacts;
  let driver: QemuDriver;
  let pool: NetnsSlotPool;
  let fakenet: FakeNet;
  let hostListener: Server;
  let work: string;
  let vm: Vm | undefined;
  let slot: NetworkSlot;

  const guestConnects = async (host: string, port: number) => {
    const probe = `python3 -c "import socket; socket.create_connection(('${host}', ${port}), 3); print('connected')" || echo refused`;
    const sandbox = sandboxAt(envdUrl(slot.hostAddress));
    return (await sandbox.commands.run(probe, { timeoutMs: 60_000 })).stdout.trim() === "connected";
  };

  before(async () => {
    await removeLeftovers();
    const vmm = await testVmm("test-vmm-net");
    ({ images, driver, work } = vmm);
    mkdirSync(join(work, "run"));
    fakenet = await FakeNet.start(FAKENET_PORT);
    pool = new NetnsSlotPool({ ...runPoolOptions(), size: 0, egressInterface: FAKENET.hostVeth });
    hostListener = createServer((socket) => socket.end("host\n"));
    await new Promise<void>((resolve, reject) => {
      hostListener?.once("error", reject).listen(0, "0.0.0.0", () => resolve());
    });
    hostPort = (hostListener.address() as AddressInfo).port;
    // The guest may reach one internet address, nothing else.
    slot = await pool.acquire({
      allowInternet: false,
      allowOut: [`${FAKENET.public1}/32`],
      denyOut: [],
    });
    vm = await driver.boot(slotVmSpec("escape", slot, images, work, SHAPE));
    await waitForEnvd(envdUrl(slot.hostAddress), 180_000, vm);
    await initEnvd(envdUrl(slot.hostAddress), { defaultUser: "user" });
  });

  after(async () => {
    await vm?.destroy().catch(() => {});
    if (slot) await pool.release(slot).catch(() => {});
    await pool?.close();
    await fakenet?.close();
    hostListener?.close();
    if (work) rmSync(work, { recursive: true, force: true });
    assert.deepEqual(await leakCheck(), [], "no namespace, link or rule left behind");
    assert.deepEqual(await qemuPidsIn(runEnv().dataDir), [], "no QEMU left running");
  });

  it("the guest's own traffic is policed as before: its allowed address only", async () => {
    assert.equal(await guestConnects(FAKENET.public1, FAKENET_PORT), true, "allowOut");
    assert.equal(await guestConnects(FAKENET.public2, FAKENET_PORT), false, "internet off");
  });

  /** What neither the guest nor its VMM may reach, whatever the policy. */
  const refused = () => [
    { what: "an internet address the policy refuses", host: FAKENET.public2, port: FAKENET_PORT },
    { what: "another host on the LAN", host: FAKENET.lan1, port: FAKENET_PORT },
    { what: "a private address", host: FAKENET.private1, port: FAKENET_PORT },
    { what: "the host, at its slot veth", host: slot.hostVethAddress, port: hostPort },
    { what: "the host, at its LAN address", host: FAKENET.hostAddress, port: hostPort },
  ];

  it("QEMU runs in a network namespace of its own, not its slot's", async () => {
    const own = await readlink(`/proc/${vm?.pid}/ns/net`);
    const slotNs = await execFileP("stat", ["-L", "-c", "%i", slot.netnsPath]);
    assert.notEqual(own, `net:[${slotNs.stdout.trim()}]`, "QEMU is not in the slot's namespace");
    const { stdout } = await execFileP("nsenter", [
      `--net=/proc/${vm?.pid}/ns/net`,
      "ip",
      "-o",
      "link",
    ]);
    const links = stdout
      .trim()
      .split("\n")
      .map((line) => line.split(":")[1]?.trim());
    assert.deepEqual(links, ["lo"], "nothing but a loopback in QEMU's namespace");
  });

  it("code running as the QEMU, in its namespace, connects nowhere", async () => {
    const pid = vm?.pid as number;
    const uid = await uidOf(pid);
    assert.notEqual(uid, 0, "QEMU dropped root");
    for (const { what, host, port } of refused()) {
      const outcome = await connectAs(`/proc/${pid}/ns/net`, uid, host, port);
      assert.notEqual(outcome, "connected", `the VMM reached ${what} (${host}:${port})`);
    }
  });

  it("even inside the slot's namespace, the QEMU's uid opens no connection", async () => {
    // A second layer, for a VMM that would run in the slot's namespace (one that opens its
    // tap itself): nothing in the namespace itself sends anything out.
    const uid = await uidOf(vm?.pid as number);
    for (const { what, host, port } of [
      ...refused(),
      {
        what: "the internet address the guest may reach",
        host: FAKENET.public1,
        port: FAKENET_PORT,
      },
    ]) {
      const outcome = await connectAs(slot.netnsPath, uid, host, port);
      assert.notEqual(
        outcome,
        "connected",
        `the slot's namespace reached ${what} (${host}:${port})`,
      );
    }
  });

  it("the guest still reaches its allowed address after all that", async () => {
    assert.equal(await guestConnects(FAKENET.public1, FAKENET_PORT), true);
  });
});
