import { chmodSync, mkdtempSync } from "node:fs";
import { get } from "node:http";
import { dirname, join } from "node:path";
import { createClient } from "@connectrpc/connect";
import { createConnectTransport } from "@connectrpc/connect-node";
import { Sandbox } from "e2b";
import { ensureHostSetup, type GuestArtifacts } from "../../src/host-setup/index.js";
import type { NetnsSlotPool, NetworkSlot } from "../../src/network/index.js";
import { Process } from "../../src/protocol/gen/process/process_pb.js";
import { ENVD_PORT, ENVD_VERSION } from "../../src/protocol/index.js";
import type { MachineShape, Vm, VmSpec } from "../../src/vmm/index.js";
import {
  type AccelChoice,
  chooseAccelerator,
  Qcow2DiskChains,
  QemuDriver,
  qemuVersion,
  VmCgroups,
  VmmIdentities,
} from "../../src/vmm/qemu/index.js";
import { RUN_VMM_UID_COUNT, runEnv, runVmmUidBase } from "./run-env.js";

let artifacts: Promise<GuestArtifacts> | undefined;

/**
 * The guest kernel, initramfs, agent drive and base rootfs in the run's images cache (the
 * test command sets them up before the files run; this only checks them).
 */
export function guestArtifacts(): Promise<GuestArtifacts> {
  const { dataDir, imagesDir } = runEnv();
  artifacts ??= ensureHostSetup({ dataDir, imagesDir });
  return artifacts;
}

export function envdUrl(hostAddress: string): string {
  return `http://${hostAddress}:${ENVD_PORT}`;
}

/** One GET /health on a connection of its own: the status, or undefined on error or timeout. */
function healthStatus(url: string): Promise<number | undefined> {
  return new Promise((resolve) => {
    const req = get(`${url}/health`, { agent: false, timeout: 2_000 }, (res) => {
      res.resume();
      resolve(res.statusCode);
    });
    req.once("timeout", () => req.destroy());
    req.once("error", () => resolve(undefined));
  });
}

/**
 * Polls envd's /health until it answers 204; returns the milliseconds it took. Not fetch():
 * its keep-alive pool would send the first poll on a connection to the slot's previous
 * guest and wait for the new guest's reset before connecting anew. On timeout the error
 * carries the end of the guest's console, when a VM is given.
 */
export async function waitForEnvd(
  url: string,
  timeoutMs = 180_000,
  vm?: Vm,
  pollMs = 10,
): Promise<number> {
  const started = performance.now();
  for (;;) {
    if ((await healthStatus(url)) === 204) return performance.now() - started;
    if (performance.now() - started > timeoutMs) {
      const console = vm ? await vm.consoleTail() : "";
      throw new Error(`envd at ${url} not healthy after ${timeoutMs} ms\n${console.slice(-2_000)}`);
    }
    await new Promise((resolve) => setTimeout(resolve, pollMs));
  }
}

/** An e2b SDK Sandbox talking straight to one guest's envd (debug mode: no control plane). */
export function sandboxAt(url: string, envdAccessToken?: string): Sandbox {
  return new Sandbox({
    sandboxId: "guest",
    envdVersion: ENVD_VERSION,
    envdAccessToken,
    sandboxUrl: url,
    debug: true,
  });
}

/** POST /init as the orchestrator does after every start and resume. */
export async function initEnvd(
  url: string,
  body: Record<string, unknown>,
  token?: string,
): Promise<void> {
  const res = await fetch(`${url}/init`, {
    method: "POST",
    headers: { "content-type": "application/json", ...(token ? { "x-access-token": token } : {}) },
    body: JSON.stringify({ timestamp: new Date().toISOString(), ...body }),
  });
  if (res.status !== 204) throw new Error(`/init answered ${res.status}: ${await res.text()}`);
}

/**
 * Runs a shell command in a guest over a connection of its own, and returns its stdout.
 * The SDK keeps its connections in a process-wide pool; a later guest behind the same
 * (reused) slot address would be sent requests on a dead guest's connection.
 */
export async function runInGuest(url: string, cmd: string, user = "user"): Promise<string> {
  const client = createClient(
    Process,
    createConnectTransport({ baseUrl: url, httpVersion: "1.1" }),
  );
  const headers = { authorization: `Basic ${Buffer.from(`${user}:`).toString("base64")}` };
  let stdout = "";
  for await (const res of client.start(
    { process: { cmd: "/bin/bash", args: ["-l", "-c", cmd] }, stdin: false },
    { headers },
  )) {
    const event = res.event?.event;
    if (event?.case === "data" && event.value.output.case === "stdout")
      stdout += Buffer.from(event.value.output.value).toString();
    if (event?.case === "end" && event.value.exitCode !== 0)
      throw new Error(`'${cmd}' exited with ${event.value.status}`);
  }
  return stdout;
}

export interface TestVmm {
  readonly images: GuestArtifacts;
  readonly driver: QemuDriver;
  /** The driver's disks (flattening, as the orchestrator does it). */
  readonly disks: Qcow2DiskChains;
  readonly accel: AccelChoice;
  /** The uids VMMs drop to (one each) and their cgroups, as a server gives them. */
  readonly identities: VmmIdentities;
  readonly cgroups: VmCgroups | undefined;
  /** A scratch directory under the run's data dir, removed by the caller (or with the run). */
  readonly work: string;
}

/**
 * What VM tests and benchmarks share, set up as the server does it: guest images, the
 * accelerator (WARREN_ACCEL, else the cached probe), each QEMU jailed under a uid of its own
 * (the run's range) in a cgroup of the run's.
 */
export async function testVmm(name: string): Promise<TestVmm> {
  const images = await guestArtifacts();
  const version = await qemuVersion();
  const accel = await chooseAccelerator({
    configured: (process.env.WARREN_ACCEL as "kvm" | "tcg" | "auto" | undefined) ?? "auto",
    kernel: images.kernel,
    initramfs: images.initramfs,
    qemuVersion: version,
    cacheFile: join(runEnv().dataDir, "accel.json"),
  });
  const cgroups = VmCgroups.detect(`${runEnv().networkPrefix}-vms`);
  const identities = new VmmIdentities(runVmmUidBase(), RUN_VMM_UID_COUNT);
  const disks = new Qcow2DiskChains({ imagesDir: dirname(images.baseRootfs), identities });
  const driver = new QemuDriver({
    accel: accel.accel,
    qemuVersion: version,
    disks,
    identities,
    cgroups,
  });
  const work = mkdtempSync(join(runEnv().dataDir, `${name}-`));
  chmodSync(work, 0o711); // the unprivileged QEMU must reach the runtime dirs below
  return { images, driver, disks, accel, identities, cgroups, work };
}

/** A VM spec for the base image in a network slot, with its runtime dir under `work/run/`. */
export function slotVmSpec(
  id: string,
  slot: NetworkSlot,
  images: GuestArtifacts,
  work: string,
  shape: MachineShape,
): VmSpec {
  return {
    id,
    shape,
    images,
    baseDisk: images.baseRootfs,
    network: { kind: "tap", netns: slot.netns, tap: slot.tapName },
    runtimeDir: join(work, "run", id),
    guestIp: `${slot.guestAddress}/30`,
    guestGateway: slot.gateway,
  };
}

/**
 * A test's VMs, each in a slot of its pool with envd reached on the slot's host address:
 * `spec(id)` takes a slot for a VM, `ready(vm)` waits for its envd and initializes it (and
 * keeps the VM, for `close()`), `close()` destroys the VMs kept and gives the slots back.
 * `parts` is read at each call: the pool, images and work dir come from the suite's before().
 */
export class SlotGuests {
  readonly vms = new Set<Vm>();
  readonly slots = new Map<string, NetworkSlot>();

  constructor(
    private readonly parts: () => { pool: NetnsSlotPool; images: GuestArtifacts; work: string },
    private readonly shape: MachineShape,
  ) {}

  async spec(id: string): Promise<VmSpec> {
    const { pool, images, work } = this.parts();
    const slot = await pool.acquire();
    this.slots.set(id, slot);
    return slotVmSpec(id, slot, images, work, this.shape);
  }

  url(vm: Vm): string {
    return envdUrl((this.slots.get(vm.id) as NetworkSlot).hostAddress);
  }

  async ready<T extends Vm>(vm: T): Promise<T> {
    this.vms.add(vm);
    await waitForEnvd(this.url(vm), 180_000, vm);
    await initEnvd(this.url(vm), { defaultUser: "user" });
    return vm;
  }

  async close(): Promise<void> {
    for (const vm of this.vms) await vm.destroy().catch(() => {});
    const { pool } = this.parts();
    for (const slot of this.slots.values()) await pool.release(slot).catch(() => {});
  }
}
