/**
 * Snapshots across two nodes: the real PostgreSQL catalog (each node's PostgresCatalog,
 * and the cluster's markPublished), a real shared store on a directory (FsSharedStore), real
 * qcow2 chains (ScribeVm, test/helpers/scribe-vm.ts). Node a publishes; node b fetches a
 * chain into its own snapshots directory, where it resolves; releases respect ownership.
 */
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { access, mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, it } from "node:test";
import { promisify } from "node:util";
import pino from "pino";
import { PostgresCatalog, PostgresCluster } from "../../../src/catalog/index.js";
import { type StateLayout, stateLayout } from "../../../src/orchestrator/layout.js";
import { LifecycleEvents } from "../../../src/orchestrator/lifecycle-events.js";
import { Snapshots } from "../../../src/orchestrator/snapshots/snapshots.js";
import { FsSharedStore } from "../../../src/store/index.js";
import { Qcow2DiskChains, QemuDriver, VmmIdentities } from "../../../src/vmm/qemu/index.js";
import { createOverlay } from "../../../src/vmm/qemu/qcow2-overlay.js";
import { sealSnapshot } from "../../../src/vmm/qemu/sealed-files.js";
import { diskOf } from "../../../src/vmm/qemu/snapshot-chain.js";
import { startPostgres, type TestPostgres } from "../../helpers/postgres.js";
import { RUN_VMM_UID_COUNT, runVmmUidBase } from "../../helpers/run-env.js";
import { chainLength, MiB, qemuIo, ScribeVm, writeMeta } from "../../helpers/scribe-vm.js";

const run = promisify(execFile);
const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

let root: string;
let pg: TestPostgres;
let databases = 0;
const identities = new VmmIdentities(runVmmUidBase(), RUN_VMM_UID_COUNT);

before(async () => {
  root = await mkdtemp(join(tmpdir(), "warren-snapshot-sharing-"));
  pg = await startPostgres();
});
after(async () => {
  await pg?.stop();
  await rm(root, { recursive: true, force: true });
});

/**
 * Two nodes on one catalog and one shared store; node a holds a template on a raw base.
 * `fetches` counts the snapshots b fetched; `snapshotsOf` makes a node's Snapshots again.
 */
async function twoNodes(name: string) {
  const url = await pg.createDatabase(`sharing_${++databases}`);
  const cluster = await PostgresCluster.open({ connectionString: url });
  const shared = new FsSharedStore(join(root, name, "shared"));
  const base = join(root, name, "base.raw");
  await mkdir(join(root, name), { recursive: true });
  await writeFile(base, Buffer.alloc(0));
  await run("truncate", ["-s", "64M", base]);
  const fetches: string[] = [];
  const disks = new Qcow2DiskChains({ imagesDir: root, identities });
  const snapshotsOf = (
    id: string,
    catalog: PostgresCatalog,
    layout: StateLayout,
    copiesMaxBytes = 1 << 30,
  ) =>
    new Snapshots({
      catalog,
      driver: new QemuDriver({ accel: "tcg", qemuVersion: "test", disks }),
      disks,
      layout,
      imagesFingerprint: "test",
      flattenDepth: 0,
      logger: pino({ level: "silent" }),
      events: new LifecycleEvents({ logger: pino({ level: "silent" }), catalog }),
      shared: {
        publish: shared.publish.bind(shared),
        fetch: (snapshotId, intoDir) => {
          if (id === "b") fetches.push(snapshotId);
          return shared.fetch(snapshotId, intoDir);
        },
        delete: shared.delete.bind(shared),
        markPublished: (snapshotId) => cluster.markPublished(snapshotId),
        copiesMaxBytes,
        copiesGraceMs: 0,
      },
    });
  const node = async (id: string) => {
    const layout = stateLayout(join(root, name, id));
    await mkdir(layout.snapshotsDir, { recursive: true });
    const catalog = await PostgresCatalog.open({ connectionString: url, nodeId: id });
    return { id, layout, catalog, snapshots: snapshotsOf(id, catalog, layout) };
  };
  const a = await node("a");
  const b = await node("b");
  const templateDir = join(a.layout.snapshotsDir, "template");
  await mkdir(templateDir);
  await createOverlay(join(templateDir, "disk.qcow2"), base, "raw");
  await writeMeta(templateDir, { image: base, format: "raw" });
  await sealSnapshot(templateDir);
  await a.catalog.putSnapshot({
    id: "template",
    dir: templateDir,
    kind: "template",
    names: [],
    imagesFingerprint: "test",
    createdAt: new Date().toISOString(),
  });
  // The template row keeps its capture, as the base template's does.
  await a.catalog.putTemplate({
    id: "tpl",
    aliases: ["base"],
    kind: "base",
    snapshotId: "template",
    vcpus: 1,
    memoryMiB: 256,
    diskSizeMiB: 64,
    createdAt: new Date().toISOString(),
  });
  await a.snapshots.checksumUnrecorded();
  const vm = new ScribeVm({ path: join(templateDir, "disk.qcow2"), record: diskOf(templateDir) });
  const pause = async (parentId: string, publish: boolean) =>
    (
      await a.snapshots.capture(vm.asVm(), {
        sandboxId: "sbx",
        parentId,
        kind: "pause",
        resume: false,
        publish,
      })
    ).id;
  const close = async () => {
    for (const n of [a, b]) {
      await n.snapshots.close();
      await n.catalog.close();
    }
    await cluster.close();
    await shared.close();
  };
  return { a, b, shared, pause, close, fetches, snapshotsOf };
}

it("publishes a pause with what it stands on; another node fetches the chain and it resolves there", async () => {
  const { a, b, shared, pause, close } = await twoNodes("fetch");
  try {
    const first = await pause("template", false);
    const second = await pause(first, true);
    await a.snapshots.publish(second); // the capture's own publish is in flight: this one follows it
    assert.deepEqual((await shared.list()).sort(), [first, second, "template"].sort());
    for (const id of [first, second, "template"]) {
      const row = await b.catalog.getSnapshot(id);
      assert.ok(row?.publishedAt, `${id} marked published`);
      assert.equal(row.nodeId, "a", `${id} is a's, as b sees it`);
    }

    const dir = await b.snapshots.localDir(second);
    assert.equal(dir, join(b.layout.snapshotsDir, second));
    for (const id of [first, "template"]) assert.ok(await exists(join(b.layout.snapshotsDir, id)));
    // The copy stands on the copies beside it, not on a's files: all three layers, both writes.
    assert.equal(await chainLength(join(dir, "disk.qcow2")), 4);
    assert.match(await qemuIo(join(dir, "disk.qcow2"), `read -P 2 ${2 * MiB} 64k`), /read/);
    await rm(join(a.layout.snapshotsDir, first), { recursive: true, force: true });
    assert.match(await qemuIo(join(dir, "disk.qcow2"), `read -P 1 ${1 * MiB} 64k`), /read/);
    // Restores on b check the copy against the catalog's record of a's capture.
    assert.deepEqual(
      await b.snapshots.sealedFiles(dir),
      (await a.catalog.getSnapshot(second))?.files,
    );
    assert.equal(await b.snapshots.sealedFiles(join(a.layout.snapshotsDir, second)), undefined);
    assert.equal(await b.snapshots.localDir(second), dir, "fetched once");
  } finally {
    await close();
  }
});

it("refuses to restore another node's snapshot that is not published", async () => {
  const { a, b, pause, close } = await twoNodes("unpublished");
  try {
    const id = await pause("template", false);
    await assert.rejects(b.snapshots.localDir(id), { reason: "snapshot_not_found" });
    assert.equal(await exists(join(b.layout.snapshotsDir, id)), false);
    assert.equal(
      await a.snapshots.localDir(id),
      join(a.layout.snapshotsDir, id),
      "its own: in place",
    );
  } finally {
    await close();
  }
});

it("a release on another node drops its copy only; the owner's deletes and unpublishes", async () => {
  const { a, b, shared, pause, close } = await twoNodes("release");
  try {
    const id = await pause("template", true);
    await a.snapshots.publish(id);
    const copy = await b.snapshots.localDir(id);
    assert.deepEqual(await b.snapshots.release(id), [], "b deletes no row of a's");
    assert.equal(await exists(copy), false, "b's copy is gone");
    assert.ok(await exists(join(b.layout.snapshotsDir, "template")), "the template is in use");
    assert.ok(await a.catalog.getSnapshot(id), "a's row stays");
    assert.ok(await shared.manifest(id), "still published");

    assert.deepEqual(await a.snapshots.release(id), [id]);
    assert.equal(await shared.manifest(id), undefined, "unpublished with its row");
    assert.equal(await b.catalog.getSnapshot(id), undefined);
  } finally {
    await close();
  }
});

it("keeps copies within b's budget: what b stands on stays, the least recently used goes; a restart keeps them", async () => {
  const { a, b, pause, close, fetches, snapshotsOf } = await twoNodes("copies");
  try {
    const p1 = await pause("template", true);
    const p2 = await pause("template", true);
    const p3 = await pause("template", true);
    await a.snapshots.publish(p3);
    const sizeOf = async (id: string) =>
      ((await a.catalog.getSnapshot(id))?.files ?? []).reduce((n, f) => n + f.bytes, 0);
    const [template, s1, s2, s3] = (await Promise.all(["template", p1, p2, p3].map(sizeOf))) as [
      number,
      number,
      number,
      number,
    ];
    // Room for the template and two pauses, not three (pauses of one VM are about one size).
    const budget = template + s1 + s3 + Math.floor(Math.min(s1, s2, s3) / 2);
    await b.snapshots.close();
    b.snapshots = snapshotsOf("b", b.catalog, b.layout, budget);
    const now = new Date().toISOString();
    // A sandbox paused on b on p1 (moved there): p1 and the template stay while it does.
    await b.catalog.insertSandbox({
      id: "moved",
      teamId: "default",
      templateId: "tpl",
      state: "paused",
      clientId: "c",
      vcpus: 1,
      memoryMiB: 256,
      diskSizeMiB: 64,
      metadata: {},
      envVars: {},
      config: {},
      startedAt: now,
      endAt: new Date(Date.now() + 3_600_000).toISOString(),
      snapshotId: p1,
      updatedAt: now,
    });
    const copies = async () =>
      (await readdir(b.layout.snapshotsDir)).filter((name) => !name.startsWith(".")).sort();
    await b.snapshots.localDir(p1);
    await b.snapshots.localDir(p2);
    await b.snapshots.localDir(p3); // no room for three pauses: p2, unused and least recent, goes
    assert.deepEqual(await copies(), [p1, p3, "template"].sort());
    assert.deepEqual([...fetches].sort(), [p1, p2, p3, "template"].sort());

    await b.catalog.updateSandbox("moved", { state: "killed", snapshotId: undefined });
    await b.snapshots.localDir(p2); // p1 is stood on no more, and least recent
    assert.deepEqual(await copies(), [p2, p3, "template"].sort());
    assert.equal(fetches.filter((id) => id === p2).length, 2, "an evicted copy is fetched again");

    // A restart adopts the copies; the next restore fetches nothing.
    await b.snapshots.close();
    b.snapshots = snapshotsOf("b", b.catalog, b.layout, budget);
    assert.equal(await b.snapshots.removeUnrecorded(), 0, "the copies are kept");
    assert.deepEqual(await copies(), [p2, p3, "template"].sort());
    const fetched = fetches.length;
    assert.equal(await b.snapshots.localDir(p3), join(b.layout.snapshotsDir, p3));
    assert.equal(fetches.length, fetched, "kept copies are not fetched again");
  } finally {
    await close();
  }
});
