// Starting one QEMU process and talking to it until the guest runs: runtime paths, QMP
// connection, failure reports, and streaming a device state into `-incoming defer`.
import { existsSync } from "node:fs";
import { type FileHandle, rm } from "node:fs/promises";
import { connect } from "node:net";
import { join } from "node:path";
import type { VmSpec } from "../driver.js";
import { VmmError } from "../errors.js";
import { QmpClient } from "./qmp-client.js";
import { openPlainFile } from "./sealed-files.js";
import { processStartTime, type SpawnVmm, type VmmProcess } from "./vmm-process.js";

async function waitForSocket(path: string, proc: VmmProcess, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!existsSync(path)) {
    if (!proc.running) {
      const exit = await proc.exited;
      throw new VmmError(exit.reason, proc.vmId);
    }
    if (Date.now() > deadline)
      throw new VmmError(`QMP socket did not appear within ${timeoutMs} ms`, proc.vmId);
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

/** The VM's files in its runtime directory (its QMP socket is elsewhere: qmp-dir.ts). */
export function runtimePaths(spec: VmSpec) {
  return {
    migrateSocket: join(spec.runtimeDir, "migrate.sock"),
    overlay: join(spec.runtimeDir, "disk.qcow2"),
    memory: join(spec.runtimeDir, "memory.img"),
  };
}

/** The socket file appears at bind(), a moment before QEMU listens: retry refused connects. */
async function connectQmp(path: string, proc: VmmProcess, timeoutMs = 10_000): Promise<QmpClient> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    try {
      return await QmpClient.connect(path, proc.vmId);
    } catch (err) {
      const refused = (err as { cause?: NodeJS.ErrnoException }).cause?.code === "ECONNREFUSED";
      if (!refused || !proc.running || Date.now() > deadline) throw err;
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  }
}

/**
 * The error to report for a failure while QEMU starts or restores: when QEMU died (a broken
 * QMP connection usually means so; its exit may land a moment later), its own reason.
 */
export async function explainFailure(proc: VmmProcess, err: unknown): Promise<unknown> {
  const died = await Promise.race([
    proc.exited.then((exit) => !exit.expected),
    new Promise<boolean>((resolve) => setTimeout(() => resolve(false), 500)),
  ]);
  return died ? new VmmError((await proc.exited).reason, proc.vmId, { cause: err }) : err;
}

export interface LaunchOptions {
  readonly spawn: SpawnVmm;
  readonly mergeable?: boolean;
  readonly cgroupProcs?: readonly string[];
}

/**
 * Starts QEMU and its QMP connection; on any failure kills QEMU (settling once it exited)
 * and removes the runtime dir.
 */
export async function launch(
  spec: VmSpec,
  args: string[],
  qmpSocket: string,
  options: LaunchOptions,
): Promise<{ proc: VmmProcess; qmp: QmpClient; startTime: number }> {
  let proc: VmmProcess;
  try {
    proc = await options.spawn({
      vmId: spec.id,
      args,
      network: spec.network,
      mergeable: options.mergeable,
      cgroupProcs: options.cgroupProcs,
    });
  } catch (err) {
    // Nothing was spawned (its tap could not be opened).
    await rm(spec.runtimeDir, { recursive: true, force: true });
    throw err;
  }
  try {
    await waitForSocket(qmpSocket, proc);
    const qmp = await connectQmp(qmpSocket, proc);
    // Read now, while QEMU surely runs: with the pid it names the process in VM records.
    const startTime = await processStartTime(proc.pid);
    if (startTime === undefined) {
      qmp.close();
      throw new VmmError("QEMU is gone", proc.vmId);
    }
    return { proc, qmp, startTime };
  } catch (err) {
    const reported = await explainFailure(proc, err);
    await proc.kill();
    await rm(spec.runtimeDir, { recursive: true, force: true });
    throw reported;
  }
}

/**
 * Writes what `file` holds into the unix socket at `path`, then ends it. Done once everything
 * is handed to the kernel, or once QEMU closed the connection (having read what it wanted):
 * whether the state loaded is the MIGRATION event's to say.
 */
function sendFile(file: FileHandle, path: string, vmId: string): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const socket = connect(path);
    const failed = (err: Error) => {
      socket.destroy();
      reject(new VmmError(`cannot send device state: ${err.message}`, vmId, { cause: err }));
    };
    socket.on("error", failed);
    socket.once("finish", () => resolve());
    socket.once("close", () => resolve());
    const source = file.createReadStream({ autoClose: false, highWaterMark: 1 << 20 });
    source.on("error", failed);
    source.pipe(socket);
  });
}

/**
 * Streams a device-state file into a QEMU waiting on `-incoming defer`. Streamed, never read
 * whole: the VMM that saved it decided its size.
 */
export async function loadDeviceState(
  qmp: QmpClient,
  socketPath: string,
  file: string,
  vmId: string,
): Promise<void> {
  // A sealed snapshot's file: one name, or two (as SnapshotVerifier.checksum allows).
  const state = await openPlainFile(file, 2);
  try {
    await qmp.execute("migrate-set-capabilities", {
      capabilities: [{ capability: "events", state: true }],
    });
    const completed = qmp.waitForEvent("MIGRATION", (e) =>
      ["completed", "failed"].includes(String(e.data?.status)),
    );
    await qmp.execute("migrate-incoming", { uri: `unix:${socketPath}` });
    await sendFile(state, socketPath, vmId);
    const event = await completed;
    if (event.data?.status !== "completed")
      throw new VmmError("loading the device state failed", vmId);
  } finally {
    await state.close();
  }
}
