/**
 * Snapshots against the real catalog (SQLite file), real qcow2 files and the QEMU driver's
 * real flatten (Qcow2DiskChains, qemu-img). The VM being captured is a stand-in (`ScribeVm`,
 * test/helpers/scribe-vm.ts): it writes a recognisable pattern into a fresh overlay per
 * generation, as a guest writing its disk between pauses would. Real VMs go through `Snapshots`
 * in test/e2e/flatten.test.ts.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdir, mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { promisify } from "node:util";
import pino from "pino";
import { type SandboxRow, SqliteCatalog } from "../../../src/catalog/index.js";
import { stateLayout } from "../../../src/orchestrator/layout.js";
import { LifecycleEvents } from "../../../src/orchestrator/lifecycle-events.js";
import { Snapshots } from "../../../src/orchestrator/snapshots/snapshots.js";
import type { DiskChains } from "../../../src/vmm/index.js";
import { Qcow2DiskChains, QemuDriver, VmmIdentities } from "../../../src/vmm/qemu/index.js";
import { createOverlay } from "../../../src/vmm/qemu/qcow2-overlay.js";
import { diskOf } from "../../../src/vmm/qemu/snapshot-chain.js";
import { RUN_VMM_UID_COUNT, runVmmUidBase } from "../../helpers/run-env.js";
import { chainLength, MiB, qemuIo, ScribeVm, writeMeta } from "../../helpers/scribe-vm.js";

const run = promisify(execFile);

let root: string;
const identities = new VmmIdentities(runVmmUidBase(), RUN_VMM_UID_COUNT);
/** Disk chains whose base images lie in `root` (their images directory). */
const testChains = () => new Qcow2DiskChains({ imagesDir: root, identities });

before(async () => {
  root = await mkdtemp(join(tmpdir(), "warren-snapshots-"));
});
after(async () => {
  await rm(root, { recursive: true, force: true });
});

/** A data dir with a raw base disk and a template (its snapshot stacked on that disk). */
async function fixture(name: string, flattenDepth: number, disks: DiskChains = testChains()) {
  const layout = stateLayout(join(root, name));
  await mkdir(layout.snapshotsDir, { recursive: true });
  const base = join(root, `${name}-base.raw`);
  await writeFile(base, Buffer.alloc(0));
  await run("truncate", ["-s", "64M", base]);
  const catalog = await SqliteCatalog.open(layout.catalog);
  const templateDir = join(layout.snapshotsDir, "template");
  await mkdir(templateDir);
  await createOverlay(join(templateDir, "disk.qcow2"), base, "raw");
  await writeMeta(templateDir, { image: base, format: "raw" });
  await catalog.putSnapshot({
    id: "template",
    dir: templateDir,
    kind: "template",
    names: [],
    imagesFingerprint: "test",
    createdAt: new Date().toISOString(),
  });
  // The template row keeps its capture, as the base template's does.
  await catalog.putTemplate({
    id: "tpl",
    aliases: ["base"],
    kind: "base",
    snapshotId: "template",
    vcpus: 1,
    memoryMiB: 256,
    diskSizeMiB: 64,
    createdAt: new Date().toISOString(),
  });
  const snapshots = new Snapshots({
    catalog,
    driver: testDriver(),
    disks,
    layout,
    imagesFingerprint: "test",
    flattenDepth,
    logger: pino({ level: "silent" }),
    events: new LifecycleEvents({ logger: pino({ level: "silent" }), catalog }),
    // The production grace: with none, a capture opening its chain by name races the
    // deletion of layers a flatten just made redundant (close() releases them at once).
    retireDelayMs: 10_000,
  });
  const vm = new ScribeVm({ path: join(templateDir, "disk.qcow2"), record: diskOf(templateDir) });
  /** Pauses `generations` times, each snapshot on the one before (as a sandbox does). */
  const pauses = async (generations: number, parentId = "template"): Promise<string> => {
    let parent = parentId;
    for (let i = 0; i < generations; i++) {
      const { id } = await snapshots.capture(vm.asVm(), {
        sandboxId: "sbx",
        parentId: parent,
        kind: "pause",
        resume: false,
      });
      parent = id;
    }
    return parent;
  };
  return { layout, catalog, snapshots, vm, pauses };
}

/** A paused sandbox's catalog row standing on `snapshotId`. */
function pausedOn(snapshotId: string): SandboxRow {
  const now = new Date().toISOString();
  return {
    id: "sbx",
    teamId: "default",
    templateId: "template",
    state: "paused",
    clientId: "test",
    vcpus: 1,
    memoryMiB: 512,
    diskSizeMiB: 64,
    metadata: {},
    envVars: {},
    config: {},
    startedAt: now,
    endAt: now,
    snapshotId,
    updatedAt: now,
  };
}

function testDriver(): QemuDriver {
  return new QemuDriver({ accel: "tcg", qemuVersion: "test", disks: testChains() });
}

it("keeps a 30-generation chain within the flatten depth, with every generation's data", async () => {
  const { layout, catalog, snapshots, vm, pauses } = await fixture("deep", 4);
  const last = await pauses(30);
  await snapshots.close(); // waits for the flattens and the retired layers' deletion

  const disk = join(layout.snapshotsDir, last, "disk.qcow2");
  // raw base + template + at most `flattenDepth` layers above it.
  const length = await chainLength(disk);
  assert.ok(length <= 2 + 4, `chain of ${length} images`);
  for (let g = 1; g <= vm.generation; g++) await qemuIo(disk, `read -P ${g} ${g * MiB} 64k`);

  // Only the template and the last snapshot's own chain remain, on disk and in the catalog.
  const kept = new Set<string>();
  for (let id: string | undefined = last; id; id = (await catalog.getSnapshot(id))?.parentId) {
    kept.add(id);
  }
  assert.ok(kept.has("template"));
  const rows = (await catalog.listSnapshots()).map((row) => row.id).sort();
  assert.deepEqual(rows, [...kept].sort());
  assert.deepEqual((await readdir(layout.snapshotsDir)).sort(), [...kept].sort());
  await catalog.close();
});

it("never flattens with depth 0, and flattens onto the nearest named snapshot", async () => {
  const off = await fixture("off", 0);
  const last = await off.pauses(6);
  await off.snapshots.close();
  assert.equal(await chainLength(join(off.layout.snapshotsDir, last, "disk.qcow2")), 2 + 6);
  await off.catalog.close();

  const named = await fixture("named", 2);
  const middle = await named.pauses(2);
  const row = await named.catalog.getSnapshot(middle);
  assert.ok(row);
  await named.catalog.putSnapshot({ ...row, kind: "named" });
  const tip = await named.pauses(3, middle);
  await named.snapshots.close();
  assert.equal((await named.catalog.getSnapshot(tip))?.parentId, middle);
  assert.equal(await chainLength(join(named.layout.snapshotsDir, tip, "disk.qcow2")), 2 + 3);
  for (let g = 1; g <= 5; g++) {
    await qemuIo(join(named.layout.snapshotsDir, tip, "disk.qcow2"), `read -P ${g} ${g * MiB} 64k`);
  }
  await named.catalog.close();
});

it("keeps a snapshot released while it is being flattened until the flatten is done", async () => {
  let releaseGate!: () => void;
  const gate = new Promise<void>((resolve) => {
    releaseGate = resolve;
  });
  let flattening!: () => void;
  const started = new Promise<void>((resolve) => {
    flattening = resolve;
  });
  const real = testChains();
  const gated: DiskChains = {
    finishFlatten: (dir, recorded) => real.finishFlatten(dir, recorded),
    flatten: async (dir, onto) => {
      flattening();
      await gate;
      return real.flatten(dir, onto);
    },
  };
  const { layout, catalog, snapshots, pauses } = await fixture("busy", 1, gated);
  const last = await pauses(2);
  await started;
  assert.deepEqual(await snapshots.release(last), [], "released mid-flatten");
  assert.ok(await catalog.getSnapshot(last));
  releaseGate();
  await snapshots.close();
  assert.equal(await catalog.getSnapshot(last), undefined);
  assert.deepEqual(await readdir(layout.snapshotsDir), ["template"]);
  await catalog.close();
});

it("leaves the snapshot as it was when flattening fails", async () => {
  const real = testChains();
  // The flatten is asked to restack onto a directory with no disk in it.
  const misdirected: DiskChains = {
    finishFlatten: (dir, recorded) => real.finishFlatten(dir, recorded),
    flatten: (dir, onto) => real.flatten(dir, join(onto, "missing")),
  };
  const { layout, catalog, snapshots, pauses } = await fixture("fails", 1, misdirected);
  const last = await pauses(2);
  await snapshots.close();
  const row = await catalog.getSnapshot(last);
  assert.ok(row?.parentId && row.parentId !== "template", "still stacked on its parent");
  assert.deepEqual((await readdir(join(layout.snapshotsDir, last))).sort(), [
    "disk.qcow2",
    "meta.json",
  ]);
  await qemuIo(join(layout.snapshotsDir, last, "disk.qcow2"), `read -P 1 ${MiB} 64k`);
  await catalog.close();
});

it("sweeps snapshots nothing uses, and keeps those in use and the template's", async () => {
  const { layout, catalog, snapshots, pauses } = await fixture("sweep", 0);
  const used = await pauses(2);
  const unused = await pauses(1);
  await catalog.insertSandbox(pausedOn(used));
  assert.equal(await snapshots.sweep(), 1);
  assert.equal(await catalog.getSnapshot(unused), undefined);
  const kept = (await readdir(layout.snapshotsDir)).sort();
  assert.equal(kept.length, 3, "template, the paused sandbox's snapshot and its parent");
  assert.ok(kept.includes(used) && kept.includes("template"));
  await snapshots.close();
  await catalog.close();
});

it("records each capture's checksums after it returns, hands them to restores, and finishes a crash's at start", async () => {
  const { layout, catalog, snapshots, pauses } = await fixture("checksums", 0);
  const id = await pauses(1);
  const dir = join(layout.snapshotsDir, id);
  const files = await snapshots.sealedFiles(dir); // waits for the checksums in flight
  const names = (await readdir(dir)).sort();
  assert.deepEqual(
    files?.map((f) => f.name),
    names,
  );
  for (const file of files ?? []) {
    const bytes = await readFile(join(dir, file.name));
    assert.equal(file.sha256, createHash("sha256").update(bytes).digest("hex"), file.name);
  }
  assert.equal(await snapshots.sealedFiles(join(layout.snapshotsDir, "elsewhere")), undefined);
  // A crash between the capture's record and its checksums' leaves a row without them.
  const row = await catalog.getSnapshot(id);
  assert.ok(row);
  await catalog.putSnapshot({ ...row, files: undefined });
  // Two: this one, and the fixture's template (its row was put by hand, without checksums).
  assert.equal(await snapshots.checksumUnrecorded(), 2);
  assert.deepEqual((await catalog.getSnapshot(id))?.files, files);
  await snapshots.close();
  await catalog.close();
});
