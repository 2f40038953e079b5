import type { LeftoverVm, ReattachedVm } from "../driver.js";
import type { QemuReattach } from "./driver.js";
import type { HeldVmm } from "./keeper-client.js";
import { parseVmRecord, type VmRecord } from "./vm-record.js";
import type { VmmProcess } from "./vmm-process.js";

/** What a leftover needs of its driver. */
export interface LeftoverDriver {
  reattach(record: VmRecord, proc: VmmProcess): Promise<QemuReattach>;
  /** Gives back what a killed VMM held but its process (its cgroup, its QMP socket). */
  cleanUp(id: string): Promise<void>;
}

/**
 * A VMM the keeper held for an earlier server, as the orchestrator sees it at start: its
 * record read from the keeper's note (none readable: `spec` undefined, and a reattach is
 * refused), reattached through the driver or killed.
 */
export function leftoverOf(held: HeldVmm, driver: LeftoverDriver): LeftoverVm {
  const { process: proc } = held;
  let record: VmRecord | undefined;
  let unreadable = "it left no record";
  try {
    if (held.note !== undefined) record = parseVmRecord(JSON.parse(held.note));
  } catch (err) {
    unreadable = err instanceof Error ? err.message : String(err);
  }
  return {
    id: proc.vmId,
    pid: proc.pid,
    spec: record?.spec,
    netnsHold: held.netnsHold,
    reattach: async (): Promise<ReattachedVm> => {
      if (!record) throw new Error(`VMM ${proc.vmId} cannot be reattached: ${unreadable}`);
      const { vm, running } = await driver.reattach(record, proc);
      return { vm, running, diskSnapshotDir: vm.record().backing.snapshotDir };
    },
    kill: async () => {
      await proc.kill();
      await driver.cleanUp(proc.vmId);
    },
  };
}
