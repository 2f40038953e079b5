import { type ChildProcess, spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { type NetworkSlot, runCommand } from "../../../src/network/index.js";
import { GATEWAY_ADDRESS, GUEST_ADDRESS, GUEST_MAC } from "../../../src/protocol/index.js";
import { fixtureNetns } from "../run-env.js";
import { NetnsAgent } from "./netns-agent.js";

const PUMP = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "tap-pump.py");
/** Debian's python3 (the tap pump needs only its standard library). */
const PYTHON = "/usr/bin/python3";

/** What a fake guest needs of its slot (a NetworkSlot, or one of a pool in another process). */
export type GuestSlot = Pick<NetworkSlot, "index" | "netnsPath" | "tapName">;

/** Owner of the taps in these tests: what an unprivileged QEMU would run as. */
export const TAP_OWNER = { uid: 65534, gid: 65534 };

/**
 * A stand-in for a microVM on a slot. No VM runs in the network tests, so:
 * - QEMU's side of the slot's tap is played by fixtures/tap-pump.py, which attaches to the
 *   slot's real `tap0` as the tap's owner (as an unprivileged QEMU would) and copies frames
 *   to and from a tap named `eth0` in this fake guest's namespace;
 * - the guest kernel is played by that namespace, `<prefix>-fakeguest-<n>` (the run's
 *   network prefix, see run-env.ts), configured as a
 *   Warren guest is: 169.254.0.21/30, MAC 02:fc:00:00:00:15, default route via 169.254.0.22;
 * - guest programs are played by a NetnsAgent running in it.
 */
export class FakeGuest {
  readonly netns: string;
  readonly agent: NetnsAgent;
  readonly #pump: ChildProcess;
  #closing: Promise<void> | undefined;

  private constructor(netns: string, pump: ChildProcess, agent: NetnsAgent) {
    this.netns = netns;
    this.#pump = pump;
    this.agent = agent;
  }

  get netnsPath(): string {
    return `/run/netns/${this.netns}`;
  }

  /** Boots a fake guest on `slot`. `owner` is whom the pump attaches to the tap as. */
  static async attach(slot: GuestSlot, owner = TAP_OWNER): Promise<FakeGuest> {
    const netns = fixtureNetns(`fakeguest-${slot.index}`);
    await runCommand("ip", ["netns", "add", netns]);
    let pump: ChildProcess | undefined;
    try {
      pump = await startPump(slot, `/run/netns/${netns}`, owner);
      await runCommand("ip", ["-n", netns, "-batch", "-"], {
        input: [
          "link set lo up",
          `link set eth0 address ${GUEST_MAC}`,
          `addr add ${GUEST_ADDRESS}/30 dev eth0`,
          "link set eth0 up",
          `route add default via ${GATEWAY_ADDRESS}`,
          "",
        ].join("\n"),
      });
      const agent = await NetnsAgent.start(`/run/netns/${netns}`);
      return new FakeGuest(netns, pump, agent);
    } catch (err) {
      await stopPump(pump);
      await runCommand("ip", ["netns", "del", netns]);
      throw err;
    }
  }

  /**
   * Kills the fake guest as a VMM kill would: its side of the tap goes first, so the
   * guest's connections are never closed on the wire (their peers still track them).
   */
  async kill(): Promise<void> {
    await stopPump(this.#pump);
    await this.close();
  }

  /** Powers the fake guest off: its programs, its side of the tap, its namespace. Once. */
  close(): Promise<void> {
    this.#closing ??= (async () => {
      await this.agent.close();
      await stopPump(this.#pump);
      await runCommand("ip", ["netns", "del", this.netns]);
    })();
    return this.#closing;
  }
}

/** Starts tap-pump.py; resolves once it is attached to both taps. */
export function startPump(
  slot: GuestSlot,
  guestNetnsPath: string,
  owner: { uid: number; gid: number },
): Promise<ChildProcess> {
  const args = [
    PUMP,
    slot.netnsPath,
    slot.tapName,
    guestNetnsPath,
    String(owner.uid),
    String(owner.gid),
  ];
  const pump = spawn(PYTHON, args, { stdio: ["pipe", "pipe", "pipe"] });
  let stderr = "";
  pump.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  return new Promise((resolve, reject) => {
    pump.stdout?.once("data", () => resolve(pump));
    pump.once("exit", (code) =>
      reject(new Error(`tap pump exited with ${code}: ${stderr.trim()}`)),
    );
    pump.once("error", reject);
  });
}

async function stopPump(pump: ChildProcess | undefined): Promise<void> {
  if (!pump || pump.exitCode !== null || pump.signalCode !== null) return;
  const exited = new Promise((resolve) => pump.once("exit", resolve));
  pump.kill("SIGKILL");
  await exited;
}
