/**
 * Hosts of their own on this machine for e2e servers: each a network namespace with a veth
 * link to the host (the run block's last /24, a /30 each: the host's side .4i+1, the
 * namespace's .4i+2), and the settings that give a node server in it its own names, slot
 * block and VMM uids within the run's. A server there binds any port (443 included) without
 * meeting the host's, and is reached at its address, as another machine would be.
 */
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { runCommand } from "../../src/network/index.js";
import { RUN_VMM_UID_COUNT, runEnv, runGuestIdBase, runVmmUidBase } from "./run-env.js";
import { startServer, type TestServer } from "./server.js";

const WRAPPER = join(import.meta.dirname, "in-netns.sh");

export interface NetnsHost {
  readonly index: number;
  readonly netns: string;
  /** The host's end of the link. */
  readonly hostAddress: string;
  /** The namespace's address: what its servers listen on. */
  readonly address: string;
  remove(): Promise<void>;
}

/** The run block's first two octets, e.g. 10.205.0.0/16 → "10.205". */
export function runBlockBase(): string {
  const [a, b] = runEnv().networkCidr.split(".");
  return `${a}.${b}`;
}

async function ip(...args: string[]): Promise<void> {
  await runCommand("ip", args);
}

/** Host `index` (0–63): its namespace and link, made now; `remove()` deletes both. */
export async function addNetnsHost(index: number): Promise<NetnsHost> {
  const run = runEnv();
  const base = runBlockBase();
  const netns = `${run.networkPrefix}-node${index}`;
  const hostLink = `${run.networkPrefix}h${index}`;
  const nsLink = `${run.networkPrefix}g${index}`;
  const hostAddress = `${base}.255.${4 * index + 1}`;
  const address = `${base}.255.${4 * index + 2}`;
  const remove = async () => {
    await ip("link", "del", hostLink).catch(() => {});
    await ip("netns", "del", netns).catch(() => {});
  };
  try {
    await ip("netns", "add", netns);
    await ip("link", "add", hostLink, "type", "veth", "peer", "name", nsLink);
    await ip("link", "set", nsLink, "netns", netns);
    await ip("addr", "add", `${hostAddress}/30`, "dev", hostLink);
    await ip("link", "set", hostLink, "up");
    await ip("-n", netns, "addr", "add", `${address}/30`, "dev", nsLink);
    await ip("-n", netns, "link", "set", nsLink, "up");
    await ip("-n", netns, "link", "set", "lo", "up");
  } catch (err) {
    await remove();
    throw err;
  }
  return { index, netns, hostAddress, address, remove };
}

/**
 * Settings for a node server in `host`, one of `hosts` sharing the run: its data dir, its
 * address, network names after the run's prefix, a /18 of the run's block for its slots,
 * its share of the run's VMM uids.
 */
export function netnsServerEnv(
  host: NetnsHost,
  hosts: number,
  name: string,
  port: number,
): Record<string, string> {
  const run = runEnv();
  const uids = Math.floor(RUN_VMM_UID_COUNT / hosts);
  return {
    WARREN_HOME: join(run.dataDir, name),
    WARREN_IMAGES_DIR: run.imagesDir,
    WARREN_HOST: host.address,
    WARREN_PORT: String(port),
    // Letters after the run prefix: a node's names never read as the run's own slots.
    WARREN_NETWORK_PREFIX: `${run.networkPrefix}${"xyzw"[host.index] ?? "q"}`,
    WARREN_NETWORK_CIDR: `${runBlockBase()}.${host.index * 64}.0/18`,
    WARREN_VMM_UID_BASE: String(runVmmUidBase() + host.index * uids),
    WARREN_VMM_UID_COUNT: String(uids),
    // One range for the run's nodes: a cluster's volumes are shared.
    WARREN_GUEST_ID_BASE: String(runGuestIdBase()),
  };
}

/** The node server (the bundle `npm start` runs) in `host`; the SDK's variables left alone. */
export async function startServerIn(
  host: NetnsHost,
  env: Record<string, string>,
): Promise<TestServer> {
  const home = env.WARREN_HOME;
  if (!home) throw new Error("netnsServerEnv gives WARREN_HOME");
  await mkdir(home, { recursive: true, mode: 0o711 });
  const stash = join(runEnv().dataDir, `${host.netns}-cgroup`);
  return startServer(env, { wrap: [WRAPPER, host.netns, stash], sdkEnv: false });
}
