// What a long chain of frozen disk layers costs a reader, and what flattening buys back, on
// this machine: LAYERS qcow2 layers on the base image (each writing 256 KiB, as a guest does
// between pauses or forks), then the same chain flattened onto its first layer by
// Qcow2DiskChains' flatten. qemu-io opens the image and reads data written in an early layer,
// as a restored VM does. No VMs. Run: npm run bench:chain (needs the base image).
import { execFile } from "node:child_process";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import type { DiskBacking } from "../src/vmm/index.js";
import { Qcow2DiskChains, VmmIdentities } from "../src/vmm/qemu/index.js";
import { createOverlay } from "../src/vmm/qemu/qcow2-overlay.js";
import { diskOf, headerName } from "../src/vmm/qemu/snapshot-chain.js";
import { SNAPSHOT_FORMAT_VERSION, writeSnapshotMeta } from "../src/vmm/qemu/snapshot-meta.js";
import { guestArtifacts } from "../test/helpers/guest.js";
import { RUN_VMM_UID_COUNT, runVmmUidBase } from "../test/helpers/run-env.js";
import { measure, report, type Summary, summarize } from "./lib/report.js";

const LAYERS = Number(process.env.BENCH_LAYERS ?? 100);
const run = promisify(execFile);
const MiB = 1024 * 1024;

const images = await guestArtifacts();
const work = await mkdtemp(join(tmpdir(), "warren-bench-chain-"));
try {
  // layer-0 stands for the template's disk; each later one for a pause or fork capture.
  const layer = (i: number) => join(work, `layer-${i}`);
  let below = images.baseRootfs;
  for (let i = 0; i <= LAYERS; i++) {
    await mkdir(layer(i));
    const disk = join(layer(i), "disk.qcow2");
    // Recorded as a capture records it (flattening follows the records, checking headers).
    const backing: DiskBacking = i === 0 ? { image: below, format: "raw" } : diskOf(layer(i - 1));
    await createOverlay(disk, below, backing.format, { backingName: headerName(backing) });
    await run("qemu-io", ["-f", "qcow2", "-c", `write -P ${i % 256} ${i * MiB} 256k`, disk]);
    await writeSnapshotMeta(layer(i), {
      formatVersion: SNAPSHOT_FORMAT_VERSION,
      accel: "tcg",
      cpuModel: "max",
      qemuVersion: "bench",
      kernel: "bench",
      images: "bench",
      shape: { vcpus: 1, memoryMiB: 256 },
      memoryImage: { file: "memory.img" },
      diffPages: 0,
      deviceStateFile: "devstate.bin",
      diskFile: "disk.qcow2",
      diskBacking: backing,
      createdAt: new Date().toISOString(),
    });
    below = disk;
  }
  const top = join(layer(LAYERS), "disk.qcow2");
  // Layer 1's data, checked by pattern (the reference image reads the same range unchecked).
  const read =
    (disk: string, pattern = "-P 1 ") =>
    () =>
      run("qemu-io", ["-r", "-f", "qcow2", "-c", `read ${pattern}${MiB} 256k`, disk]);

  const rows: Summary[] = [];
  rows.push(summarize(`open + read, ${LAYERS} layers`, "ms", await measure(10, read(top))));
  const t = performance.now();
  const identities = new VmmIdentities(runVmmUidBase(), RUN_VMM_UID_COUNT);
  const disks = new Qcow2DiskChains({ imagesDir: dirname(images.baseRootfs), identities });
  const plan = await disks.flatten(layer(LAYERS), layer(0));
  await plan.commit();
  rows.push(summarize(`flatten ${LAYERS} layers`, "ms", [performance.now() - t]));
  rows.push(summarize("open + read, flattened", "ms", await measure(10, read(top))));
  const one = join(work, "one.qcow2");
  await createOverlay(one, join(layer(0), "disk.qcow2"), "qcow2");
  rows.push(summarize("open + read, 1 layer (reference)", "ms", await measure(10, read(one, ""))));
  const p50 = (i: number) => rows[i]?.p50 ?? Number.NaN;
  report("disk-chain", rows, {
    layers: LAYERS,
    ratios: { chainOverFlattened: Math.round((p50(0) / p50(2)) * 100) / 100 },
  });
} finally {
  await rm(work, { recursive: true, force: true });
}
