// What every VmmDriver must do, seen through the interface alone: one cold boot, then fork
// capture, restore, prepared restores (warmed, started, discarded), pause, refusals, drift,
// checksums and orphans, all on that one guest's captures (a cold boot costs 10-20 s under
// TCG). The suite runs on FakeVmmDriver in the unit tier (test/unit/contracts/) and on
// QemuDriver with real guests in the e2e tier (test/e2e/vmm/driver-contract.test.ts).
// Its tests run in order and share the guest: each builds on the one before.
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync } from "node:fs";
import { readdir, readFile, stat } from "node:fs/promises";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  SnapshotMismatchError,
  type SnapshotTiming,
  type Vm,
  type VmmDriver,
  VmmError,
  type VmSpec,
} from "../../src/vmm/index.js";

/** What an implementation's test file hands the suite. */
export interface VmmDriverHarness {
  readonly driver: VmmDriver;
  /** Where every spec's runtime directory lies (killOrphans' argument). */
  readonly runDir: string;
  /** A new VM's spec: the base image, a network of its own, a runtime dir under `runDir`. */
  spec(id: string): Promise<VmSpec>;
  /** A snapshot directory's path (not yet made), beside every other the suite asks for. */
  snapshotDir(name: string): string;
  /** Resolves once the guest started with `spec` answers (its agent is up); fails past a deadline. */
  ready(spec: VmSpec): Promise<void>;
  /** Keeps `value` in the guest's memory (not its disk) under `key`. */
  remember(vm: Vm, key: string, value: string): Promise<void>;
  /** What the guest's memory holds under `key`, undefined when nothing. */
  recall(vm: Vm, key: string): Promise<string | undefined>;
  /** Stops whatever the suite left and removes what the harness made. */
  cleanup(): Promise<void>;
}

const sha256 = async (path: string) =>
  createHash("sha256")
    .update(await readFile(path))
    .digest("hex");

function assertTiming(timing: SnapshotTiming): void {
  for (const key of ["pausedMs", "deviceStateMs", "memoryMs", "diskMs", "dirtyPages"] as const)
    assert.ok(Number.isFinite(timing[key]) && timing[key] >= 0, `${key}: ${timing[key]}`);
}

/** Registers the suite; `open` is called once, before its first test. */
export function vmmDriverContract(name: string, open: () => Promise<VmmDriverHarness>): void {
  describe(`VmmDriver contract: ${name}`, () => {
    let h: VmmDriverHarness;
    let source: Vm;
    let child: Vm;
    let fork: string;

    before(async () => {
      h = await open();
    });
    after(() => h?.cleanup());

    /** Starts a VM from `dir` in a new spec and waits until its guest answers. */
    const restored = async (dir: string, id: string): Promise<Vm> => {
      const spec = await h.spec(id);
      const vm = await h.driver.restore(dir, spec);
      await h.ready(spec);
      return vm;
    };

    it("refuses to restore a directory that holds no snapshot, leaving no runtime directory", async () => {
      const spec = await h.spec("nosnap");
      await assert.rejects(h.driver.restore(h.snapshotDir("missing"), spec), VmmError);
      assert.equal(existsSync(spec.runtimeDir), false);
    });

    it("cold boots a guest from the base disk", async () => {
      const spec = await h.spec("boot");
      source = await h.driver.boot(spec);
      assert.equal(source.id, spec.id);
      assert.equal(source.spec.id, spec.id);
      assert.ok(Number.isInteger(source.pid) && source.pid > 0, `pid ${source.pid}`);
      assert.ok(existsSync(spec.runtimeDir), "runtime directory made");
      await h.ready(spec);
      assert.ok((await source.consoleTail()).length > 0, "the console shows the boot");
      await h.remember(source, "stage", "boot");
      assert.equal(await h.recall(source, "stage"), "boot");
    });

    it("captures a running guest for a fork: it keeps running, sealed files and their checksums", async () => {
      fork = h.snapshotDir("fork");
      assertTiming(await source.snapshot(fork, { resume: true }));
      assert.equal(await h.recall(source, "stage"), "boot", "the source runs on");
      await h.remember(source, "stage", "after-fork");
      const names = (await readdir(fork)).sort();
      assert.ok(names.includes("meta.json"), names.join(", "));
      const files = await h.driver.checksumSnapshot(fork);
      assert.deepEqual(
        files.map((f) => f.name),
        names,
      );
      for (const file of files) {
        const path = join(fork, file.name);
        const info = await stat(path);
        assert.equal(file.bytes, info.size, file.name);
        assert.equal(file.sha256, await sha256(path), file.name);
        assert.equal(info.mode & 0o222, 0, `${file.name} is read-only`);
      }
    });

    it("restores the capture: the child continues where the guest was, apart from its source", async () => {
      child = await restored(fork, "child");
      assert.equal(await h.recall(child, "stage"), "boot");
      await h.remember(child, "stage", "child");
      assert.equal(await h.recall(source, "stage"), "after-fork");
    });

    it("refuses a restore on another machine shape, starting nothing", async () => {
      const spec = await h.spec("wrong");
      const wrong = { ...spec, shape: { ...spec.shape, memoryMiB: spec.shape.memoryMiB * 2 } };
      await assert.rejects(h.driver.restore(fork, wrong), SnapshotMismatchError);
      assert.equal(existsSync(spec.runtimeDir), false);
    });

    it("reports drift only when a boot here would differ from the captured guest's", async () => {
      const spec = await h.spec("drift");
      assert.equal(await h.driver.bootDrift(fork, spec), undefined);
      const changed = { ...spec, extraKernelArgs: "warren.contract=1" };
      const drift = await h.driver.bootDrift(fork, changed);
      assert.equal(typeof drift, "string");
    });

    it("prepares a restore that waits: warm() runs the guest until ready, start() resumes it", async () => {
      const spec = await h.spec("warmed");
      const prepared = await h.driver.prepareRestore(fork, spec, { background: true });
      assert.ok(Number.isInteger(prepared.pid) && prepared.pid > 0);
      await prepared.warm(() => h.ready(spec));
      const vm = await prepared.start();
      assert.equal(vm.pid, prepared.pid);
      assert.equal(await h.recall(vm, "stage"), "boot");
      await vm.destroy();
    });

    it("gives a prepared restore up with discard(), its runtime directory with it", async () => {
      const spec = await h.spec("discarded");
      const prepared = await h.driver.prepareRestore(fork, spec);
      await prepared.discard();
      assert.equal(existsSync(spec.runtimeDir), false);
    });

    it("pauses a guest: the VMM exits as expected, and a restore continues it", async () => {
      const paused = h.snapshotDir("pause");
      assertTiming(await child.snapshot(paused, { resume: false }));
      const exit = await child.exited;
      assert.equal(exit.expected, true, exit.reason);
      await child.destroy();
      child = await restored(paused, "resumed");
      assert.equal(await h.recall(child, "stage"), "child");
    });

    it("destroys a VM: its VMM exits as expected and its runtime directory goes", async () => {
      await source.destroy();
      const exit = await source.exited;
      assert.equal(exit.expected, true, exit.reason);
      assert.equal(existsSync(source.spec.runtimeDir), false);
    });

    it("kills the VMMs left under a run directory, and no others", async () => {
      assert.equal(await h.driver.killOrphans(`${h.runDir}-elsewhere`), 0);
      assert.equal(await h.recall(child, "stage"), "child", "left alone");
      assert.equal(await h.driver.killOrphans(h.runDir), 1);
      const exit = await child.exited;
      assert.equal(exit.expected, false);
      await child.destroy();
    });
  });
}
