import { basename } from "node:path";
import { WarrenError } from "../shared/index.js";

/** What the initramfs must be able to do, as modules and the config symbol that builds each. */
export const GUEST_MODULES: readonly { readonly name: string; readonly config: string }[] = [
  { name: "virtio_mmio", config: "CONFIG_VIRTIO_MMIO" }, // microvm's devices
  { name: "virtio_blk", config: "CONFIG_VIRTIO_BLK" }, // /dev/vda, /dev/vdb
  { name: "virtio_net", config: "CONFIG_VIRTIO_NET" }, // eth0
  { name: "ext4", config: "CONFIG_EXT4_FS" }, // both drives
  // The VMM's virtio-rng device: the kernel's hwrng thread feeds the host's entropy into its
  // pool from boot on (then about once a minute). Debian builds the core in, the driver as a module.
  { name: "rng_core", config: "CONFIG_HW_RANDOM" },
  { name: "virtio_rng", config: "CONFIG_HW_RANDOM_VIRTIO" },
  // Volumes: the NFSv3 client (sunrpc, lockd… come with it), loaded at boot so that a
  // sandbox restored from any snapshot can mount one.
  { name: "nfsv3", config: "CONFIG_NFS_V3" },
];

/** A module to load, with its path relative to lib/modules/<release>/. */
export interface ModuleFile {
  readonly name: string;
  readonly path: string;
}

export interface ModulePlan {
  /** Wanted modules the kernel has built in. */
  readonly builtin: readonly string[];
  /** Modules to insmod, dependencies first. */
  readonly load: readonly ModuleFile[];
}

/** `kernel/drivers/net/virtio_net.ko.xz` → `virtio_net` (dashes become underscores, as in lsmod). */
export function moduleName(path: string): string {
  return basename(path)
    .replace(/\.ko(\.(xz|zst|gz))?$/, "")
    .replaceAll("-", "_");
}

/** CONFIG_X=y|m lines of a kernel .config. */
export function parseKernelConfig(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split("\n")) {
    const match = /^(CONFIG_\w+)=(.*)$/.exec(line);
    if (match?.[1] && match[2] !== undefined) out.set(match[1], match[2]);
  }
  return out;
}

/** modules.dep (written by depmod): module name → its path and the paths it needs. */
export function parseModulesDep(text: string): Map<string, { path: string; deps: string[] }> {
  const out = new Map<string, { path: string; deps: string[] }>();
  for (const line of text.split("\n")) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const path = line.slice(0, colon).trim();
    const deps = line
      .slice(colon + 1)
      .trim()
      .split(/\s+/)
      .filter(Boolean);
    out.set(moduleName(path), { path, deps });
  }
  return out;
}

/** modules.softdep: module name → the modules to load before it ("pre:"). */
export function parseSoftdeps(text: string): Map<string, string[]> {
  const out = new Map<string, string[]>();
  for (const line of text.split("\n")) {
    const match = /^softdep\s+(\S+)\s+(.*)$/.exec(line.trim());
    if (!match?.[1] || !match[2]) continue;
    const pre: string[] = [];
    let section = "pre:";
    for (const word of match[2].split(/\s+/)) {
      if (word === "pre:" || word === "post:") section = word;
      else if (section === "pre:") pre.push(word.replaceAll("-", "_"));
    }
    const name = match[1].replaceAll("-", "_");
    out.set(name, [...(out.get(name) ?? []), ...pre]);
  }
  return out;
}

/**
 * Which of GUEST_MODULES the kernel builds in and which it needs loaded, with every
 * dependency (modules.dep) and pre-softdep that is a module, ordered so each loads after what
 * it needs.
 */
export function planModules(
  config: ReadonlyMap<string, string>,
  modulesDep: ReadonlyMap<string, { path: string; deps: string[] }>,
  softdeps: ReadonlyMap<string, string[]>,
  wanted = GUEST_MODULES,
): ModulePlan {
  const builtin: string[] = [];
  const load: ModuleFile[] = [];
  const seen = new Set<string>();
  const visit = (name: string, chain: string[]): void => {
    if (seen.has(name)) return;
    const entry = modulesDep.get(name);
    if (!entry)
      throw new WarrenError(
        "internal",
        `module ${name} (needed by ${chain.join(" → ")}) is not in modules.dep`,
      );
    seen.add(name);
    for (const pre of softdeps.get(name) ?? [])
      if (modulesDep.has(pre)) visit(pre, [...chain, name]);
    for (const dep of entry.deps) visit(moduleName(dep), [...chain, name]);
    load.push({ name, path: entry.path });
  };
  for (const { name, config: symbol } of wanted) {
    const value = config.get(symbol);
    if (value === "y") builtin.push(name);
    else if (value === "m") visit(name, []);
    else
      throw new WarrenError(
        "internal",
        `the guest kernel lacks ${name}: ${symbol} is ${value ?? "not set"} in its config`,
      );
  }
  return { builtin, load };
}
