import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { ExitInfo } from "../driver.js";
import type { VmCgroups } from "./cgroups.js";
import type { VmRecord } from "./vm-record.js";
import { VmmHolds } from "./vmm-holds.js";
import { VmmIdentities } from "./vmm-ids.js";
import type { VmmProcess } from "./vmm-process.js";

/** A process that exits when told to. */
function fakeProcess(pid: number): VmmProcess & { exit(): void } {
  let exit: (info: ExitInfo) => void = () => {};
  const exited = new Promise<ExitInfo>((resolve) => {
    exit = resolve;
  });
  return {
    vmId: "vm",
    pid,
    exited,
    running: true,
    stderr: () => "",
    expectExit: () => {},
    kill: () => exited,
    exit: () => exit({ code: 0, signal: null, expected: true, reason: "stopped" }),
  };
}

/** Cgroups whose every VM group is found, or none (`missing`), counting removals. */
function cgroups(missing = false) {
  const removed: string[] = [];
  const groups = {
    existing: async (vmId: string) => {
      if (missing) throw new Error(`no cgroup for ${vmId}`);
      return { procs: [], remove: async () => void removed.push(vmId) };
    },
  } as unknown as VmCgroups;
  return { groups, removed };
}

const record = (uid?: number) =>
  ({
    spec: { id: "vm" },
    identity: uid === undefined ? undefined : { uid, gid: uid },
    cgroup: true,
  }) as VmRecord;

describe("VmmHolds", () => {
  it("gives back what a VMM held once, when it exits", async () => {
    const ids = new VmmIdentities(100_000, 2);
    const { groups, removed } = cgroups();
    const holds = new VmmHolds(ids, groups);
    const proc = fakeProcess(7);
    const hold = await holds.claim(record(100_001), 7, "/nonexistent/vm.sock");
    holds.keep(proc, hold);
    holds.keep(proc, hold);
    assert.equal(holds.of(7), hold);
    assert.equal(ids.inUse, 1);
    proc.exit();
    await proc.exited;
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(ids.inUse, 0);
    assert.deepEqual(removed, ["vm"], "removed once");
    assert.equal(holds.of(7), undefined);
    holds.keep(proc, hold);
    assert.equal(holds.of(7), undefined, "a released hold is never kept again");
  });

  it("claims nothing when the VM runs outside the jail, or its cgroup is missing", async () => {
    const ids = new VmmIdentities(100_000, 2);
    const jailed = new VmmHolds(ids, cgroups().groups);
    await assert.rejects(jailed.claim(record(), 7, "/s"), /outside the jail/);
    const lost = new VmmHolds(ids, cgroups(true).groups);
    await assert.rejects(lost.claim(record(100_000), 7, "/s"), /no cgroup/);
    assert.equal(ids.inUse, 0, "the uid went back");
    await jailed.claim(record(100_000), 7, "/s");
    await assert.rejects(jailed.claim(record(100_000), 8, "/s"), /already in use/);
  });
});
