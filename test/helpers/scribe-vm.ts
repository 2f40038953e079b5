/**
 * A stand-in VM for Snapshots tests (`ScribeVm`): each capture writes a real, sealed
 * snapshot directory (a qcow2 overlay holding one pattern byte per generation, on its
 * backing as a capture names it, and a meta.json), as a guest writing its disk between
 * pauses would. Plus qemu-io / qemu-img probes of what the captures hold.
 */
import { execFile } from "node:child_process";
import { mkdir } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";
import type { DiskBacking, ExitInfo, SnapshotTiming, Vm, VmSpec } from "../../src/vmm/index.js";
import { createOverlay } from "../../src/vmm/qemu/qcow2-overlay.js";
import { sealSnapshot } from "../../src/vmm/qemu/sealed-files.js";
import { diskOf, headerName } from "../../src/vmm/qemu/snapshot-chain.js";
import { SNAPSHOT_FORMAT_VERSION, writeSnapshotMeta } from "../../src/vmm/qemu/snapshot-meta.js";

const run = promisify(execFile);
export const MiB = 1024 * 1024;

/** The record a capture writes: only the disk's backing matters to flattening. */
export async function writeMeta(dir: string, diskBacking: DiskBacking): Promise<void> {
  await writeSnapshotMeta(dir, {
    formatVersion: SNAPSHOT_FORMAT_VERSION,
    accel: "tcg",
    cpuModel: "max",
    qemuVersion: "test",
    kernel: "test",
    images: "test",
    shape: { vcpus: 1, memoryMiB: 256 },
    memoryImage: { file: "memory.img" },
    diffPages: 0,
    deviceStateFile: "devstate.bin",
    diskFile: "disk.qcow2",
    diskBacking,
    createdAt: new Date().toISOString(),
  });
}

/**
 * Stand-in for a VM: each capture freezes an overlay holding one pattern byte at one offset,
 * its header naming its backing as a capture's does (a sibling's disk by relative name).
 */
export class ScribeVm {
  generation = 0;
  /** `path`: where the backing lies now; `record`: how a capture names it. */
  constructor(private backing: { path: string; record: DiskBacking }) {}

  async snapshot(dir: string): Promise<SnapshotTiming> {
    await mkdir(dir, { recursive: true });
    const frozen = join(dir, "disk.qcow2");
    const { path, record } = this.backing;
    await createOverlay(frozen, path, record.format, { backingName: headerName(record) });
    this.generation += 1;
    await qemuIo(frozen, `write -P ${this.generation} ${this.generation * MiB} 64k`, false);
    await writeMeta(dir, record);
    this.backing = { path: frozen, record: diskOf(dir) };
    await sealSnapshot(dir);
    return { pausedMs: 0, deviceStateMs: 0, memoryMs: 0, diskMs: 0, dirtyPages: 0 };
  }

  asVm(): Vm {
    return {
      id: "scribe",
      pid: 0,
      spec: {} as VmSpec,
      consoleTail: async () => "",
      cpuTimeMs: async () => undefined,
      exited: new Promise<ExitInfo>(() => {}),
      snapshot: (dir) => this.snapshot(dir),
      continue: async () => {},
      destroy: async () => {},
      detach: () => {},
    };
  }
}

export async function qemuIo(image: string, command: string, readOnly = true): Promise<string> {
  const args = [...(readOnly ? ["-r"] : []), "-f", "qcow2", "-c", command, image];
  const { stdout } = await run("qemu-io", args);
  if (/fail|error|mismatch/i.test(stdout)) throw new Error(`qemu-io ${command}: ${stdout}`);
  return stdout;
}

export async function chainLength(image: string): Promise<number> {
  const { stdout } = await run("qemu-img", ["info", "--backing-chain", "--output=json", image]);
  return (JSON.parse(stdout) as unknown[]).length;
}
