// What `QemuDriver.reattach` checks of a QEMU it did not start, and how it settles a fork
// capture the record had under way. The record is the server's own (catalog, keeper note),
// but the process and QMP answers are a VMM's: each is checked against the other.
import { readlink, rm } from "node:fs/promises";
import { join, resolve } from "node:path";
import { VmmError } from "../errors.js";
import type { QmpClient } from "./qmp-client.js";
import { DISK_FILE } from "./snapshot-meta.js";
import { captureOverlay, type RecordedLayer, type VmRecord } from "./vm-record.js";
import { processStartTime, processUids, type VmmProcess } from "./vmm-process.js";

/**
 * Refuses unless `proc` is the record's QEMU, still running: same pid and start time (a pid
 * reused by another process has a later one), the recorded uid, chrooted into the VM's
 * runtime directory when jailed.
 */
export async function checkProcess(record: VmRecord, proc: VmmProcess): Promise<void> {
  const { spec, pid } = record;
  const gone = (why: string) => new VmmError(`its QEMU (pid ${pid}) is gone: ${why}`, spec.id);
  if (proc.pid !== pid) throw new VmmError(`record names pid ${pid}, not ${proc.pid}`, spec.id);
  if (!proc.running) throw gone("it exited");
  const started = await processStartTime(pid);
  if (started === undefined) throw gone("no such process");
  if (started !== record.startTime) throw gone(`pid ${pid} is now another process`);
  const uid = record.identity?.uid ?? 0;
  const uids = await processUids(pid);
  if (uids === undefined || uids.some((u) => u !== uid))
    throw new VmmError(`QEMU pid ${pid} runs as uids ${uids?.join(",")}, not ${uid}`, spec.id);
  if (record.identity) {
    const root = await readlink(`/proc/${pid}/root`).catch(() => undefined);
    if (root === undefined || resolve(root) !== resolve(spec.runtimeDir))
      throw new VmmError(`QEMU pid ${pid} is chrooted into ${root}, not its runtime dir`, spec.id);
  }
}

/** QEMU's run state; refused unless it runs a guest (running, or stopped by the server). */
export async function runState(qmp: QmpClient, vmId: string): Promise<boolean> {
  const status = await qmp.execute<{ status?: unknown; running?: unknown }>("query-status");
  if (status?.running === true) return true;
  if (status?.status === "paused") return false;
  throw new VmmError(`QEMU is in state ${JSON.stringify(status?.status)}`, vmId);
}

/** The root disk a reattached VM writes to, and a capture the record had under way. */
export interface SettledDisk {
  readonly rootNode: string;
  readonly rootDisk: string;
  readonly backing: RecordedLayer;
  /** `switched`: QEMU took the new overlay (the VM stands on `dir`'s disk now); else undone. */
  readonly interruptedCapture?: { readonly dir: string; readonly switched: boolean };
}

/** The block nodes QEMU's devices are on now (the top of each one's chain). */
async function activeNodes(qmp: QmpClient): Promise<Set<string>> {
  const devices = await qmp.execute<unknown>("query-block");
  const nodes = new Set<string>();
  for (const device of Array.isArray(devices) ? devices : []) {
    const name = (device as { inserted?: { "node-name"?: unknown } })?.inserted?.["node-name"];
    if (typeof name === "string") nodes.add(name);
  }
  return nodes;
}

/**
 * Asks QEMU which root node it runs on. Without a capture under way it must be the
 * recorded one. With one, either the recorded one (the switch never happened: the node and
 * overlay made for it are dropped) or the capture's (it happened: the VM now stands on the
 * capture's disk, which the caller keeps or gives up with the VM).
 */
export async function settleDisk(qmp: QmpClient, record: VmRecord): Promise<SettledDisk> {
  const { spec, rootNode, rootDisk, backing, pendingCapture } = record;
  const active = await activeNodes(qmp);
  const recorded: SettledDisk = { rootNode, rootDisk, backing };
  if (pendingCapture) {
    const next = captureOverlay(spec.runtimeDir, record.captures);
    const { dir } = pendingCapture;
    if (active.has(next.node))
      return {
        rootNode: next.node,
        rootDisk: next.file,
        backing: { file: join(dir, DISK_FILE), format: "qcow2", snapshotDir: dir },
        interruptedCapture: { dir, switched: true },
      };
    if (active.has(rootNode)) {
      // Added perhaps, never switched to: gone with its file (the VMM's, removed by name).
      await qmp.execute("blockdev-del", { "node-name": next.node }).catch(() => {});
      await rm(next.file, { force: true }).catch(() => {});
      return { ...recorded, interruptedCapture: { dir, switched: false } };
    }
  } else if (active.has(rootNode)) return recorded;
  const found = [...active].join(", ") || "none";
  throw new VmmError(`QEMU's disks are on nodes ${found}, not the recorded ${rootNode}`, spec.id);
}
