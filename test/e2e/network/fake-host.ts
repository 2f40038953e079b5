import { type ChildProcess, spawn } from "node:child_process";
import { dirname, join } from "node:path";
import { createInterface, type Interface } from "node:readline";
import { fileURLToPath } from "node:url";
import {
  type EgressPolicy,
  type NetnsSlotPoolOptions,
  runCommand,
} from "../../../src/network/index.js";
import type { GuestSlot } from "../../helpers/network/fake-guest.js";
import { TAP_OWNER } from "../../helpers/network/fake-guest.js";
import { NetnsAgent } from "../../helpers/network/netns-agent.js";
import { fixtureNetns, runPoolOptions } from "../../helpers/run-env.js";

const POOL_SERVER = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "pool-server.ts");

/**
 * The fake host's networks. Its LAN (on `lan0`) is 198.51.100.128/25: the host .254, a router
 * .129 (the host's default route) and another LAN host .130. Behind the router, as the
 * internet is: a public address, a private one, and a stand-in for the cloud metadata
 * service; the host reaches them all by its default route, as a real host would. A second
 * network (on `side0`, like docker0 or a VPN) holds one more machine.
 */
export const FAKEHOST = {
  lanInterface: "lan0",
  sideInterface: "side0",
  hostAddress: "198.51.100.254",
  router: "198.51.100.129",
  lan1: "198.51.100.130",
  public1: "198.51.100.1",
  private1: "10.20.30.40",
  metadata: "169.254.169.254",
  sideHostAddress: "198.18.0.1",
  side1: "198.18.0.2",
} as const;

/** A slot of the fake host's pool, as the pool server describes it. */
export interface RemoteSlot extends GuestSlot {
  readonly netns: string;
  readonly hostAddress: string;
  readonly hostVethAddress: string;
}

/**
 * A stand-in for a whole machine Warren runs on, so that what a slot pool does to a host
 * (forwarding, routes, firewall) can be seen without touching the real one: namespace
 * `<prefix>-host`, with IPv4 forwarding off as on a fresh host, two networks (FAKEHOST) in
 * namespaces `<prefix>-world` and `<prefix>-side` whose NetnsAgents listen on `port` on all
 * their addresses, and a slot pool running in it (fixtures/pool-server.ts: a process whose
 * network namespace and /sys are the fake host's; its slot namespaces are `<prefix>-h<n>`,
 * so the run's leak check sees them, and their host ends live in the fake host).
 */
export class FakeHost {
  readonly netns = fixtureNetns("host");
  readonly world: NetnsAgent;
  readonly side: NetnsAgent;
  readonly #server: ChildProcess;
  readonly #pending = new Map<number, (reply: Record<string, unknown>) => void>();
  #nextId = 1;

  private constructor(world: NetnsAgent, side: NetnsAgent, server: PoolServer) {
    this.world = world;
    this.side = side;
    this.#server = server.child;
    server.replies.on("line", (line) => {
      const reply = JSON.parse(line) as { id: number } & Record<string, unknown>;
      this.#pending.get(reply.id)?.(reply);
    });
    server.child.once("exit", (code) => {
      for (const fail of this.#pending.values()) {
        fail({ ok: false, error: `exited with ${code}: ${server.stderr()}` });
      }
    });
  }

  get netnsPath(): string {
    return `/run/netns/${this.netns}`;
  }

  static async start(port: number): Promise<FakeHost> {
    const started: { close(): Promise<void> }[] = [];
    try {
      await createNetworks();
      const world = await NetnsAgent.start(`/run/netns/${fixtureNetns("world")}`);
      started.push(world);
      const side = await NetnsAgent.start(`/run/netns/${fixtureNetns("side")}`);
      started.push(side);
      for (const agent of [world, side]) {
        const listening = await agent.listen(port, "fakehost");
        if (!listening.ok) throw new Error(`fake host listener: ${listening.error}`);
      }
      const server = await startPoolServer({
        ...runPoolOptions(),
        netnsPrefix: fixtureNetns("h"),
        size: 0,
        tapOwner: TAP_OWNER,
        egressInterface: FAKEHOST.lanInterface,
      });
      return new FakeHost(world, side, server);
    } catch (err) {
      for (const s of started) await s.close();
      await removeNetworks();
      throw err;
    }
  }

  /** A slot of the fake host's pool, with `policy` (default: the pool's). */
  async acquire(policy?: EgressPolicy): Promise<RemoteSlot> {
    const reply = await this.#request({ op: "acquire", policy });
    return reply.slot as RemoteSlot;
  }

  async setPolicy(slot: RemoteSlot, policy: EgressPolicy): Promise<void> {
    await this.#request({ op: "setPolicy", index: slot.index, policy });
  }

  async release(slot: RemoteSlot): Promise<void> {
    await this.#request({ op: "release", index: slot.index });
  }

  /** Reads a sysctl of the fake host, e.g. "net/ipv4/ip_forward". */
  async sysctl(key: string): Promise<string> {
    const { stdout } = await runCommand("nsenter", [
      `--net=${this.netnsPath}`,
      "cat",
      `/proc/sys/${key}`,
    ]);
    return stdout.trim();
  }

  /** The fake host's filter FORWARD chain, as iptables-save prints it. */
  async forwardRules(): Promise<string[]> {
    const { stdout } = await runCommand("nsenter", [
      `--net=${this.netnsPath}`,
      "iptables-save",
      "-t",
      "filter",
    ]);
    return stdout.split("\n").filter((line) => line.startsWith("-A FORWARD "));
  }

  /** Stops the pool (its slots go) and removes the fake host and its networks. */
  async close(): Promise<void> {
    if (this.#server.exitCode === null && this.#server.signalCode === null) {
      const exited = new Promise((resolve) => this.#server.once("exit", resolve));
      this.#server.stdin?.end();
      const timer = setTimeout(() => this.#server.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(timer);
    }
    await this.world.close();
    await this.side.close();
    await removeNetworks();
  }

  async #request(body: Record<string, unknown>): Promise<Record<string, unknown>> {
    const id = this.#nextId++;
    const reply = await new Promise<Record<string, unknown>>((resolve) => {
      this.#pending.set(id, resolve);
      this.#server.stdin?.write(`${JSON.stringify({ id, ...body })}\n`);
    });
    this.#pending.delete(id);
    if (!reply.ok) throw new Error(`pool server: ${String(reply.error)}`);
    return reply;
  }
}

/** The fake host, its two networks, their links and addresses. */
async function createNetworks(): Promise<void> {
  const host = fixtureNetns("host");
  const world = fixtureNetns("world");
  const side = fixtureNetns("side");
  const { lanInterface, sideInterface } = FAKEHOST;
  const { hostAddress, router, lan1, public1, private1, metadata } = FAKEHOST;
  const { sideHostAddress, side1 } = FAKEHOST;
  await runCommand("ip", ["-batch", "-"], {
    input: lines(`netns add ${host}`, `netns add ${world}`, `netns add ${side}`),
  });
  // A new namespace starts with the real host's IPv4 settings: forwarding off, as on a host
  // that never routed, before any interface is made (every new one takes the default).
  await runCommand("nsenter", [
    `--net=/run/netns/${host}`,
    "sysctl",
    "-q",
    "-w",
    "net.ipv4.ip_forward=0",
  ]);
  await runCommand("ip", ["-n", host, "-batch", "-"], {
    input: lines(
      "link set lo up",
      `link add ${lanInterface} type veth peer name eth0 netns ${world}`,
      `link add ${sideInterface} type veth peer name eth0 netns ${side}`,
      `addr add ${hostAddress}/25 dev ${lanInterface}`,
      `addr add ${sideHostAddress}/24 dev ${sideInterface}`,
      `link set ${lanInterface} up`,
      `link set ${sideInterface} up`,
      `route add default via ${router} dev ${lanInterface}`,
    ),
  });
  await runCommand("ip", ["-n", world, "-batch", "-"], {
    input: lines(
      "link set lo up",
      `addr add ${router}/25 dev eth0`,
      `addr add ${lan1}/25 dev eth0`,
      `addr add ${public1}/32 dev eth0`,
      `addr add ${private1}/32 dev eth0`,
      `addr add ${metadata}/32 dev eth0`,
      "link set eth0 up",
      // The way back to the side network is through the fake host, if it forwarded.
      `route add 198.18.0.0/24 via ${hostAddress} dev eth0`,
    ),
  });
  await runCommand("ip", ["-n", side, "-batch", "-"], {
    input: lines(
      "link set lo up",
      `addr add ${side1}/24 dev eth0`,
      "link set eth0 up",
      `route add default via ${sideHostAddress} dev eth0`,
    ),
  });
}

async function removeNetworks(): Promise<void> {
  const names = ["host", "world", "side"].map((what) => `netns del ${fixtureNetns(what)}`);
  await runCommand("ip", ["-force", "-batch", "-"], { input: lines(...names) });
}

interface PoolServer {
  readonly child: ChildProcess;
  /** Its stdout, line by line: one reply each, after the first ("ready"). */
  readonly replies: Interface;
  /** What it printed on stderr so far. */
  stderr(): string;
}

/**
 * Starts fixtures/pool-server.ts in the fake host: its network namespace, and a mount
 * namespace of its own where /sys is remounted for it (the pool reads interfaces there).
 * /run/netns stays shared, so the slot namespaces it makes are seen by everyone.
 */
function startPoolServer(options: NetnsSlotPoolOptions): Promise<PoolServer> {
  // /sys is made private in the new mount namespace first: a mount on a shared /sys would
  // propagate back to the real host.
  const remountSys = 'mount --make-rprivate /sys && mount -t sysfs sysfs /sys && exec "$@"';
  const child = spawn(
    "nsenter",
    [
      `--net=/run/netns/${fixtureNetns("host")}`,
      "unshare",
      "--mount",
      "--propagation",
      "unchanged",
      "sh",
      "-c",
      remountSys,
      "sh",
      process.execPath,
      "--import",
      "tsx",
      POOL_SERVER,
      JSON.stringify(options),
    ],
    { stdio: ["pipe", "pipe", "pipe"] },
  );
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`pool server exited with ${code}: ${stderr}`)));
    child.once("error", reject);
    const replies = createInterface({ input: child.stdout as NodeJS.ReadableStream });
    replies.once("line", (line) => {
      if ((JSON.parse(line) as { ready?: boolean }).ready)
        resolve({ child, replies, stderr: () => stderr });
      else reject(new Error(`pool server: ${line}`));
    });
  });
}

function lines(...items: string[]): string {
  return `${items.join("\n")}\n`;
}
