import { access, chmod, mkdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { Catalog, TemplateRow } from "../catalog/index.js";
import type { GuestArtifacts } from "../images/index.js";
import { type SlotPool, TAP_NAME } from "../network/index.js";
import { GATEWAY_ADDRESS, GUEST_ADDRESS } from "../protocol/index.js";
import type { Logger } from "../shared/index.js";
import type { MachineShape, VmmDriver } from "../vmm/index.js";
import { exerciseEnvd, waitForHealth } from "./envd-client.js";
import { newId } from "./ids.js";
import { runtimeDir, type StateLayout, snapshotDir } from "./layout.js";
import { type GuestSpecInput, guestSpec } from "./vm-spec.js";

export const BASE_TEMPLATE = "base";
const TEMPLATE_SETTLE_MS = 2_000;
/**
 * A slot's guest-facing side, the same in every slot: enough to say how a template guest
 * would boot without taking a real slot.
 */
const ANY_SLOT: GuestSpecInput["slot"] = {
  netns: "",
  tapName: TAP_NAME,
  guestAddress: GUEST_ADDRESS,
  gateway: GATEWAY_ADDRESS,
};

export interface BaseTemplateOptions {
  readonly catalog: Catalog;
  readonly driver: VmmDriver;
  readonly slots: SlotPool;
  readonly images: GuestArtifacts;
  readonly layout: StateLayout;
  readonly shape: MachineShape;
  readonly logger: Logger;
}

/**
 * The `base` template: the base rootfs booted once, envd up, captured. Reused while its
 * snapshot is on disk and was taken with the current images and shape; otherwise rebuilt
 * (a cold boot: seconds under TCG), and every create restores from it.
 */
export async function ensureBaseTemplate(options: BaseTemplateOptions): Promise<TemplateRow> {
  const { catalog, shape, logger } = options;
  const current = await catalog.getTemplate(BASE_TEMPLATE);
  if (current) {
    const reason = await staleReason(current, options);
    if (reason === undefined) return current;
    logger.info({ template: current.id, reason }, "template.stale");
  }
  const started = performance.now();
  logger.info({ shape }, "template.building");
  const row = await buildBaseTemplate(options);
  logger.info(
    { template: row.id, durationMs: Math.round(performance.now() - started) },
    "template.built",
  );
  if (current) await retireTemplate(catalog, current, logger);
  return row;
}

/** Why the stored template is not what a build now would make, or undefined if it is. */
async function staleReason(
  current: TemplateRow,
  options: BaseTemplateOptions,
): Promise<string | undefined> {
  const { catalog, driver, images, shape, layout } = options;
  const snapshot = await catalog.getSnapshot(current.snapshotId);
  if (!snapshot || !(await exists(join(snapshot.dir, "meta.json")))) return "its snapshot is gone";
  if (snapshot.imagesFingerprint !== images.fingerprint) return "the guest images changed";
  if (current.vcpus !== shape.vcpus || current.memoryMiB !== shape.memoryMiB)
    return `the machine shape changed to ${shape.vcpus} vCPUs, ${shape.memoryMiB} MiB`;
  const spec = guestSpec({
    id: "template",
    slot: ANY_SLOT,
    images,
    shape,
    runtimeDir: runtimeDir(layout, "template"),
  });
  return driver.bootDrift(snapshot.dir, spec);
}

async function buildBaseTemplate(options: BaseTemplateOptions): Promise<TemplateRow> {
  const { catalog, driver, slots, images, layout, shape } = options;
  const snapshotId = newId();
  const dir = snapshotDir(layout, snapshotId);
  const slot = await slots.acquire();
  const vmId = `template${snapshotId}`;
  let vm: Awaited<ReturnType<VmmDriver["boot"]>> | undefined;
  try {
    vm = await driver.boot(
      guestSpec({ id: vmId, slot, images, shape, runtimeDir: runtimeDir(layout, vmId) }),
    );
    await waitForHealth(slot.hostAddress, { deadlineMs: 180_000, exited: vm.exited });
    await exerciseEnvd(slot.hostAddress);
    // Captured from a quiet guest: right after boot, every restore would re-run the guest's
    // follow-up work (~6k more TCG blocks to translate, ~80 ms) before answering (bench/vmm.ts).
    await new Promise((resolve) => setTimeout(resolve, TEMPLATE_SETTLE_MS));
    await mkdir(dir, { recursive: true });
    await vm.snapshot(dir, { resume: false });
    // The VMM account reads snapshot files when it opens backing chains after dropping root.
    await chmod(dir, 0o755);
    await rm(vm.spec.runtimeDir, { recursive: true, force: true });
  } catch (err) {
    await vm?.destroy().catch(() => {});
    await rm(dir, { recursive: true, force: true });
    throw err;
  } finally {
    await slots.release(slot);
  }
  const createdAt = new Date().toISOString();
  await catalog.putSnapshot({
    id: snapshotId,
    dir,
    kind: "template",
    names: [`${BASE_TEMPLATE}:default`],
    imagesFingerprint: images.fingerprint,
    createdAt,
  });
  const diskSizeMiB = Math.ceil((await stat(images.baseRootfs)).size / 1024 / 1024);
  const row: TemplateRow = {
    id: newId(),
    aliases: [BASE_TEMPLATE],
    kind: "base",
    snapshotId,
    vcpus: shape.vcpus,
    memoryMiB: shape.memoryMiB,
    diskSizeMiB,
    createdAt,
  };
  await catalog.putTemplate(row);
  return row;
}

/** Drops a replaced template; its snapshot goes too unless paused sandboxes still use it. */
async function retireTemplate(catalog: Catalog, old: TemplateRow, logger: Logger): Promise<void> {
  await catalog.deleteTemplate(old.id);
  const users = await catalog.snapshotUsers(old.snapshotId);
  if (users.snapshots.length > 0 || users.sandboxes.length > 0 || users.templates.length > 0) {
    logger.info({ snapshot: old.snapshotId, users }, "template.snapshot_kept");
    return;
  }
  const snapshot = await catalog.getSnapshot(old.snapshotId);
  if (snapshot) await rm(snapshot.dir, { recursive: true, force: true });
  await catalog.deleteSnapshot(old.snapshotId);
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
