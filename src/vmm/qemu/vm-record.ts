import { dirname, isAbsolute, join, resolve } from "node:path";
import type { GuestImages, VmNetwork, VmSpec } from "../driver.js";
import { VmmError } from "../errors.js";
import type { DiskLayer } from "./args.js";
import type { RestoreHost } from "./snapshot-meta.js";
import type { VmMemory } from "./vm.js";
import type { VmmIdentity } from "./vmm-ids.js";

/** Bumped whenever a field changes meaning: a record of another version is never guessed at. */
export const VM_RECORD_VERSION = 1;

/**
 * Everything needed to rebuild a `QemuVm` for a QEMU that is still running, without the
 * object that started it (`QemuVm.record()`, `QemuDriver.reattach()`): what the VM was
 * started from, what it runs on now and what its QEMU was handed. Plain JSON, for a catalog
 * row or a keeper's note.
 */
export interface VmRecord {
  readonly version: typeof VM_RECORD_VERSION;
  readonly spec: VmSpec;
  /** The QEMU process; with its start time (clock ticks after boot) a pid names it for good. */
  readonly pid: number;
  readonly startTime: number;
  readonly qmpSocket: string;
  readonly memory: VmMemory;
  /** The overlay QEMU writes now, its block node, and the image right below it. */
  readonly rootDisk: string;
  readonly rootNode: string;
  readonly backing: RecordedLayer;
  /** Overlays fork captures have switched to or tried (`disk-<n>.qcow2`, node `root-<n>`). */
  readonly captures: number;
  /** The root disk's virtual size, in bytes (decimal: JSON has no 64-bit integers). */
  readonly diskBytes: string;
  readonly kernelCommandLine?: string;
  /** What the *running* QEMU and images are, recorded in its captures (not the server's). */
  readonly host: RestoreHost;
  /** The uid QEMU dropped to; none when it runs as root (benchmarks). */
  readonly identity?: VmmIdentity;
  /** Whether QEMU runs in a cgroup of the driver's (`VmCgroups`, named by the VM id). */
  readonly cgroup: boolean;
  /**
   * A fork capture into `dir` was switching the root disk to overlay number `captures` when
   * this was recorded: whether QEMU made the switch is QEMU's to say (reattach asks it).
   */
  readonly pendingCapture?: { readonly dir: string };
}

/** One image below the overlay, and the snapshot holding it, if it is a snapshot's disk. */
export interface RecordedLayer extends DiskLayer {
  readonly snapshotDir?: string;
}

/** The overlay and block node fork capture number `n` switches a VM to. */
export function captureOverlay(runtimeDir: string, n: number): { file: string; node: string } {
  return { file: join(runtimeDir, `disk-${n}.qcow2`), node: `root-${n}` };
}

type Json = Record<string, unknown>;

/** Reads a record back (a catalog row, a keeper's note): refused unless every field holds. */
export function parseVmRecord(value: unknown): VmRecord {
  const r = object(value, "record");
  if (r.version !== VM_RECORD_VERSION)
    throw invalid(
      `is of version ${JSON.stringify(r.version)}; this server reads version ${VM_RECORD_VERSION}`,
    );
  const spec = parseSpec(object(r.spec, "spec"));
  const captures = count(r.captures, "captures");
  const rootNode = text(r.rootNode, "rootNode");
  const rootDisk = path(r.rootDisk, "rootDisk");
  const current = rootNode === "root" ? undefined : /^root-(\d+)$/.exec(rootNode)?.[1];
  if (rootNode !== "root" && (current === undefined || Number(current) > captures))
    throw invalid(`rootNode ${JSON.stringify(rootNode)} is no node of its ${captures} captures`);
  const expectedDisk =
    current === undefined
      ? join(spec.runtimeDir, "disk.qcow2")
      : captureOverlay(spec.runtimeDir, Number(current)).file;
  if (rootDisk !== expectedDisk) throw invalid(`rootDisk ${rootDisk} is not ${expectedDisk}`);
  const diskBytes = text(r.diskBytes, "diskBytes");
  if (!/^[1-9][0-9]{0,19}$/.test(diskBytes)) throw invalid(`diskBytes ${diskBytes} is no size`);
  const pending = r.pendingCapture === undefined ? undefined : object(r.pendingCapture, "pending");
  if (pending && captures === 0) throw invalid("a pending capture needs a capture number");
  return {
    version: VM_RECORD_VERSION,
    spec,
    pid: count(r.pid, "pid", 1),
    startTime: count(r.startTime, "startTime"),
    qmpSocket: path(r.qmpSocket, "qmpSocket"),
    memory: parseMemory(object(r.memory, "memory")),
    rootDisk,
    rootNode,
    backing: parseLayer(object(r.backing, "backing")),
    captures,
    diskBytes,
    kernelCommandLine: optional(r.kernelCommandLine, (v) => text(v, "kernelCommandLine")),
    host: parseHost(object(r.host, "host")),
    identity: optional(r.identity, (v) => {
      const id = object(v, "identity");
      return { uid: count(id.uid, "identity.uid"), gid: count(id.gid, "identity.gid") };
    }),
    cgroup: flag(r.cgroup, "cgroup"),
    pendingCapture: pending && { dir: path(pending.dir, "pendingCapture.dir") },
  };
}

function parseSpec(s: Json): VmSpec {
  const id = text(s.id, "spec.id");
  if (!/^[A-Za-z0-9][A-Za-z0-9_-]*$/.test(id)) throw invalid(`VM id ${JSON.stringify(id)}`);
  const shape = object(s.shape, "spec.shape");
  const images = object(s.images, "spec.images");
  const optionalText = (v: unknown, name: string) => optional(v, (t) => text(t, name));
  return {
    id,
    shape: {
      vcpus: count(shape.vcpus, "spec.shape.vcpus", 1),
      memoryMiB: count(shape.memoryMiB, "spec.shape.memoryMiB", 1),
      diskSizeMiB: optional(shape.diskSizeMiB, (v) => count(v, "spec.shape.diskSizeMiB")),
    },
    images: {
      kernel: path(images.kernel, "spec.images.kernel"),
      kernelVersion: text(images.kernelVersion, "spec.images.kernelVersion"),
      fingerprint: text(images.fingerprint, "spec.images.fingerprint"),
      initramfs: path(images.initramfs, "spec.images.initramfs"),
      agentDrive: path(images.agentDrive, "spec.images.agentDrive"),
      kernelArgs: optionalText(images.kernelArgs, "spec.images.kernelArgs"),
    } satisfies GuestImages,
    baseDisk: path(s.baseDisk, "spec.baseDisk"),
    network: parseNetwork(object(s.network, "spec.network")),
    runtimeDir: path(s.runtimeDir, "spec.runtimeDir"),
    guestIp: text(s.guestIp, "spec.guestIp"),
    guestGateway: text(s.guestGateway, "spec.guestGateway"),
    extraKernelArgs: optionalText(s.extraKernelArgs, "spec.extraKernelArgs"),
  };
}

function parseNetwork(n: Json): VmNetwork {
  if (n.kind === "tap")
    return { kind: "tap", netns: text(n.netns, "netns"), tap: text(n.tap, "tap") };
  if (n.kind === "none") return { kind: "none" };
  if (n.kind === "user" && Array.isArray(n.forwards))
    return {
      kind: "user",
      forwards: n.forwards.map((f) => {
        const forward = object(f, "forward");
        return {
          hostPort: count(forward.hostPort, "hostPort"),
          guestPort: count(forward.guestPort, "guestPort"),
        };
      }),
    };
  throw invalid(`spec.network ${JSON.stringify(n)}`);
}

function parseMemory(m: Json): VmMemory {
  const file = path(m.file, "memory.file");
  if (m.shared === true) return { file, shared: true };
  if (m.shared !== false) throw invalid("memory.shared is not a boolean");
  const snapshotDir = path(m.snapshotDir, "memory.snapshotDir");
  if (!holds(snapshotDir, file)) throw invalid(`memory ${file} is not in ${snapshotDir}`);
  return { file, shared: false, snapshotDir };
}

function parseLayer(l: Json): RecordedLayer {
  const format = l.format;
  if (format !== "qcow2" && format !== "raw") throw invalid(`backing format ${String(format)}`);
  const file = path(l.file, "backing.file");
  const snapshotDir = optional(l.snapshotDir, (v) => path(v, "backing.snapshotDir"));
  if (snapshotDir !== undefined && !holds(snapshotDir, file))
    throw invalid(`backing ${file} is not in ${snapshotDir}`);
  return snapshotDir === undefined ? { file, format } : { file, format, snapshotDir };
}

function parseHost(h: Json): RestoreHost {
  if (h.accel !== "kvm" && h.accel !== "tcg") throw invalid(`host.accel ${String(h.accel)}`);
  return {
    accel: h.accel,
    cpuModel: text(h.cpuModel, "host.cpuModel"),
    qemuVersion: text(h.qemuVersion, "host.qemuVersion"),
    kernel: text(h.kernel, "host.kernel"),
    images: text(h.images, "host.images"),
  };
}

/** Whether `file` lies right in `dir`. */
function holds(dir: string, file: string): boolean {
  return resolve(dirname(file)) === resolve(dir);
}

function invalid(message: string): VmmError {
  return new VmmError(`VM record refused: ${message}`);
}

function object(value: unknown, name: string): Json {
  if (typeof value !== "object" || value === null || Array.isArray(value))
    throw invalid(`${name} is not an object`);
  return value as Json;
}

function text(value: unknown, name: string): string {
  if (typeof value !== "string") throw invalid(`${name} is not a string`);
  return value;
}

function path(value: unknown, name: string): string {
  const p = text(value, name);
  if (!isAbsolute(p) || p.split("/").includes("..") || p.includes("\0"))
    throw invalid(`${name} ${JSON.stringify(p)} is not an absolute path`);
  return p;
}

function count(value: unknown, name: string, min = 0): number {
  if (!Number.isSafeInteger(value) || (value as number) < min)
    throw invalid(`${name} ${JSON.stringify(value)} is not an integer from ${min}`);
  return value as number;
}

function flag(value: unknown, name: string): boolean {
  if (typeof value !== "boolean") throw invalid(`${name} is not a boolean`);
  return value;
}

function optional<T>(value: unknown, parse: (v: unknown) => T): T | undefined {
  return value === undefined || value === null ? undefined : parse(value);
}
