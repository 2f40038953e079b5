import { basename } from "node:path";
import type { Catalog, SandboxRow } from "../catalog/index.js";
import { type SlotPool, validateEgressPolicy } from "../network/index.js";
import type { Logger } from "../shared/index.js";
import type { LeftoverVm, VmmDriver } from "../vmm/index.js";
import { runtimeDir, type StateLayout, snapshotDir } from "./layout.js";
import type { LifecycleEvents } from "./lifecycle-events.js";
import { markLost } from "./recovery.js";
import type { Lifecycle } from "./sandboxes/lifecycle.js";
import { configOf, type LiveSandbox } from "./sandboxes/live-sandbox.js";
import { egressPolicyOf } from "./sandboxes/network-config.js";
import type { SandboxVms } from "./sandboxes/sandbox-vms.js";
import type { Snapshots } from "./snapshots/snapshots.js";

export interface ReattachOptions {
  readonly catalog: Catalog;
  readonly driver: Pick<VmmDriver, "leftovers">;
  readonly slots: SlotPool;
  readonly vms: SandboxVms;
  readonly lifecycle: Lifecycle;
  readonly snapshots: Snapshots;
  readonly layout: StateLayout;
  readonly events: LifecycleEvents;
  readonly logger: Logger;
}

/**
 * At start, before anything else touches VMMs, slots or runtime directories: every running
 * sandbox whose VMM the keeper still holds (an earlier server died, or stopped with
 * WARREN_ON_STOP=detach) is taken back — its VM made again from the record it left
 * (`LeftoverVm.reattach`: same QEMU, memory and processes), its network slot taken back with
 * its row's policy (its gate reopened), its volumes served again, its capacity held, its
 * exit watched and its TTL armed from the row's end time. A sandbox that cannot be taken
 * back is lost, saying why, and everything it held goes. Every other VMM the keeper held
 * (a warm pool's, a kept pause's, a template build's, one whose row is not running) is
 * killed. Returns the ids re-adopted.
 */
export async function reattachRunning(options: ReattachOptions): Promise<Set<string>> {
  const { catalog, driver, logger } = options;
  const leftovers = new Map(driver.leftovers().map((vm) => [vm.id, vm]));
  const reattached = new Set<string>();
  if (leftovers.size === 0) return reattached;
  for (const row of await catalog.listSandboxes(["running"])) {
    const leftover = leftovers.get(row.id);
    if (!leftover || configOf(row).internal) continue;
    leftovers.delete(row.id);
    const started = performance.now();
    try {
      const live = await takeBack(options, row, leftover);
      options.lifecycle.adopt(live);
      reattached.add(row.id);
      const durationMs = Math.round(performance.now() - started);
      await options.events.emit("sandbox.reattached", {
        sandboxId: row.id,
        pid: leftover.pid,
        durationMs,
      });
    } catch (err) {
      const why = err instanceof Error ? err.message : String(err);
      logger.warn({ sandboxId: row.id, err }, "sandbox.reattach_failed");
      await markLost(options, row, `its VMM could not be taken back after a restart (${why})`);
    }
  }
  for (const vm of leftovers.values()) {
    await vm.kill().catch((err: unknown) => logger.warn({ vmId: vm.id, err }, "vmm.kill_failed"));
  }
  if (leftovers.size > 0) logger.info({ count: leftovers.size }, "recovery.keeper_vmms_killed");
  return reattached;
}

/** One sandbox's VM, slot and volumes taken back; on failure, each given up again. */
async function takeBack(
  options: ReattachOptions,
  row: SandboxRow,
  leftover: LeftoverVm,
): Promise<LiveSandbox> {
  const { slots, vms, layout } = options;
  const spec = leftover.spec;
  if (!spec) throw new Error("its VMM left no record");
  if (spec.runtimeDir !== runtimeDir(layout, row.id))
    throw new Error(`its VMM runs in ${spec.runtimeDir}, not this node's runtime directory`);
  if (spec.network.kind !== "tap") throw new Error("its VMM is in no network slot");
  const policy = validateEgressPolicy(egressPolicyOf(configOf(row), row.teamId));
  const live: LiveSandbox = { row, metrics: [] };
  try {
    live.slot = await slots.adopt(spec.network.netns, policy, leftover.netnsHold);
    const { vm, running, diskSnapshotDir } = await leftover.reattach();
    live.vm = vm;
    await standOnRowSnapshot(options, live, diskSnapshotDir);
    // Stopped for a capture the server's end cut short (settled: nothing was switched).
    if (!running) await vm.continue();
    live.guestCalls = new AbortController();
    await vms.serveVolumes(live);
    return live;
  } catch (err) {
    await live.volumes?.close().catch(() => {});
    if (live.vm) await live.vm.destroy().catch(() => {});
    else await leftover.kill().catch(() => {});
    if (live.slot) await slots.release(live.slot).catch(() => {});
    throw err;
  }
}

/**
 * Checks that the VM's disk stands on the row's snapshot (what its next pause or capture
 * stacks on, and what keeps that chain from being deleted). A capture of this sandbox the
 * catalog recorded but the row was not moved onto yet (the server died in between) is taken
 * as the row's; anything else (a capture cut short before its row) cannot be trusted.
 */
async function standOnRowSnapshot(
  options: ReattachOptions,
  live: LiveSandbox,
  diskSnapshotDir: string | undefined,
): Promise<void> {
  const { catalog, layout, lifecycle } = options;
  const { row } = live;
  const own = row.snapshotId ? await catalog.getSnapshot(row.snapshotId) : undefined;
  if (own && row.snapshotId && diskSnapshotDir !== undefined) {
    if ([own.dir, snapshotDir(layout, own.id)].includes(diskSnapshotDir)) return;
    const capture = await catalog.getSnapshot(basename(diskSnapshotDir));
    if (
      capture?.dir === diskSnapshotDir &&
      capture.sandboxId === row.id &&
      capture.parentId === row.snapshotId
    ) {
      await lifecycle.update(live, { snapshotId: capture.id });
      return;
    }
  }
  throw new Error(
    `its disk stands on ${diskSnapshotDir ?? "the base image"}, not on its snapshot ${row.snapshotId}: the server stopped during a capture`,
  );
}
