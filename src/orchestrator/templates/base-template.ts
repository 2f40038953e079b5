import { access, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import type { TemplateRow } from "../../catalog/index.js";
import { TAP_NAME } from "../../network/index.js";
import { GATEWAY_ADDRESS, GUEST_ADDRESS } from "../../protocol/index.js";
import { crashPoint } from "../../shared/crash-point.js";
import { type MachineShape, SnapshotMismatchError, type VmmDriver } from "../../vmm/index.js";
import { newId } from "../ids.js";
import { runtimeDir } from "../layout.js";
import type { LifecycleEvents } from "../lifecycle-events.js";
import type { NodeDrivers } from "../node-drivers.js";
import type { Snapshots } from "../snapshots/snapshots.js";
import { type GuestSpecInput, guestSpec } from "../vm-spec.js";

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

export interface BaseTemplateOptions extends NodeDrivers {
  readonly snapshots: Snapshots;
  readonly shape: MachineShape;
  readonly events: LifecycleEvents;
  /** How long the booted guest settles before its capture (default 2 s). */
  readonly settleMs?: number;
}

/** A template Warren makes itself from a rootfs of the host setup: `base`, `code-interpreter-v1`. */
export interface BuiltinTemplate {
  readonly alias: string;
  readonly rootfs: string;
  /**
   * The rootfs's sha256 when the images fingerprint does not cover it (only base's is one of
   * the guest artifacts): a capture on another image is stale.
   */
  readonly rootfsSha256?: string;
  /** Readies the booted guest, at `hostAddress`, for its capture (after envd's walk). */
  readonly prepare?: (hostAddress: string) => Promise<void>;
}

/**
 * The `base` template: the base rootfs booted once, envd up, captured. Reused while its
 * snapshot is on disk and was taken with the current images and shape; otherwise rebuilt
 * (a cold boot: seconds under TCG), and every create restores from it.
 */
export function ensureBaseTemplate(options: BaseTemplateOptions): Promise<TemplateRow> {
  return ensureBuiltinTemplate(options, {
    alias: BASE_TEMPLATE,
    rootfs: options.images.baseRootfs,
  });
}

/** A built-in template, reused while current (see ensureBaseTemplate), else built again. */
export async function ensureBuiltinTemplate(
  options: BaseTemplateOptions,
  builtin: BuiltinTemplate,
): Promise<TemplateRow> {
  const { catalog, shape, events, snapshots } = options;
  const current = await catalog.getTemplate(builtin.alias);
  await dropReplaced(options, builtin, current);
  if (current) {
    const reason = await staleReason(current, options, builtin);
    if (reason === undefined) return current;
    events.emit("template.stale", { template: current.id, reason });
  }
  const started = performance.now();
  events.emit("template.building", { alias: builtin.alias, shape });
  const row = await bootTemplate(options, {
    id: newId(),
    kind: "base",
    aliases: [builtin.alias],
    rootfs: builtin.rootfs,
    shape,
    prepare: builtin.prepare,
    ...(builtin.rootfsSha256 && { config: { rootfsSha256: builtin.rootfsSha256 } }),
  });
  events.emit("template.built", {
    template: row.id,
    durationMs: Math.round(performance.now() - started),
  });
  if (current) {
    // Its capture goes too, unless paused sandboxes or later snapshots still stand on it.
    await catalog.deleteTemplate(current.id);
    crashPoint("base-template.replace.after-delete");
    const deleted = await snapshots.release(current.snapshotId);
    if (deleted.length === 0)
      events.emit("template.snapshot_kept", { snapshot: current.snapshotId });
  }
  return row;
}

/**
 * Deletes the built-in templates `current` replaced: a rebuild moves the alias to the new
 * template before it deletes the old one, so a server that died in between left the old row
 * (which nothing would ever delete: the API refuses to delete a built-in template) and its data.
 */
async function dropReplaced(
  options: BaseTemplateOptions,
  builtin: BuiltinTemplate,
  current: TemplateRow | undefined,
): Promise<void> {
  const { catalog, snapshots, events } = options;
  for (const old of await catalog.listTemplates()) {
    if (old.kind !== "base" || old.id === current?.id) continue;
    // A row with no alias left lost it to its replacement; another built-in's row is not ours.
    if (old.aliases.length > 0 && !old.aliases.includes(builtin.alias)) continue;
    await catalog.deleteTemplate(old.id);
    await snapshots.release(old.snapshotId);
    events.emit("template.replaced_dropped", { template: old.id, snapshot: old.snapshotId });
  }
}

/** Why the stored template is not what a build now would make, or undefined if it is. */
async function staleReason(
  current: TemplateRow,
  options: BaseTemplateOptions,
  builtin: BuiltinTemplate,
): Promise<string | undefined> {
  const { catalog, driver, shape, layout } = options;
  const images = { ...options.images, baseRootfs: builtin.rootfs };
  const snapshot = await catalog.getSnapshot(current.snapshotId);
  if (!snapshot || !(await exists(join(snapshot.dir, "meta.json")))) return "its snapshot is gone";
  if (snapshot.imagesFingerprint !== images.fingerprint) return "the guest images changed";
  if (builtin.rootfsSha256 !== undefined && current.config?.rootfsSha256 !== builtin.rootfsSha256)
    return "its rootfs changed";
  if (current.vcpus !== shape.vcpus || current.memoryMiB !== shape.memoryMiB)
    return `the machine shape changed to ${shape.vcpus} vCPUs, ${shape.memoryMiB} MiB`;
  const spec = guestSpec({
    id: "template",
    slot: ANY_SLOT,
    images,
    shape,
    runtimeDir: runtimeDir(layout, "template"),
  });
  try {
    return await driver.bootDrift(snapshot.dir, spec);
  } catch (err) {
    // A capture this host cannot restore (an older format, another QEMU or CPU model) is stale.
    if (err instanceof SnapshotMismatchError) return err.message;
    throw err;
  }
}

/** What a cold-booted template is made of (`bootTemplate`). */
export interface BootedTemplateInput {
  readonly id: string;
  readonly kind: TemplateRow["kind"];
  readonly aliases: readonly string[];
  /** The root filesystem image the VM's disk is an overlay on. */
  readonly rootfs: string;
  /** diskSizeMiB larger than the image: the guest grows its filesystem to it. */
  readonly shape: MachineShape & { readonly diskSizeMiB?: number };
  readonly config?: TemplateRow["config"];
  /** Readies the booted guest for its capture, after envd's walk (a built-in's `prepare`). */
  readonly prepare?: (hostAddress: string) => Promise<void>;
}

/**
 * A template from a cold boot: `rootfs` booted with `shape`, envd up and walked once, the
 * guest settled, captured. Nothing is left behind when any step fails.
 */
export async function bootTemplate(
  options: Omit<BaseTemplateOptions, "shape">,
  input: BootedTemplateInput,
): Promise<TemplateRow> {
  const { catalog, driver, slots, agent, layout, snapshots } = options;
  const { shape } = input;
  const images = { ...options.images, baseRootfs: input.rootfs };
  const slot = await slots.acquire();
  crashPoint("base-template.boot.after-slot");
  const vmId = `template${newId()}`;
  let vm: Awaited<ReturnType<VmmDriver["boot"]>> | undefined;
  let snapshotId: string;
  try {
    vm = await driver.boot(
      guestSpec({ id: vmId, slot, images, shape, runtimeDir: runtimeDir(layout, vmId) }),
    );
    crashPoint("base-template.boot.after-boot");
    await agent.waitForHealth(slot.hostAddress, { deadlineMs: 180_000, exited: vm.exited });
    await agent.exercise(slot.hostAddress);
    await input.prepare?.(slot.hostAddress);
    // Captured from a quiet guest: right after boot, every restore would re-run the guest's
    // follow-up work (~6k more TCG blocks to translate, ~80 ms) before answering (bench/vmm.ts).
    await new Promise((resolve) => setTimeout(resolve, options.settleMs ?? TEMPLATE_SETTLE_MS));
    ({ id: snapshotId } = await snapshots.capture(vm, {
      kind: "template",
      names: input.aliases.map((alias) => `${alias}:default`),
      resume: false,
      // Each node boots its own base; built templates are every node's.
      publish: input.kind !== "base",
    }));
    crashPoint("base-template.boot.after-capture");
    await rm(vm.spec.runtimeDir, { recursive: true, force: true });
  } catch (err) {
    await vm?.destroy().catch(() => {});
    throw err;
  } finally {
    await slots.release(slot);
  }
  const createdAt = new Date().toISOString();
  const imageMiB = Math.ceil((await stat(input.rootfs)).size / 1024 / 1024);
  const row: TemplateRow = {
    id: input.id,
    aliases: input.aliases,
    kind: input.kind,
    snapshotId,
    vcpus: shape.vcpus,
    memoryMiB: shape.memoryMiB,
    diskSizeMiB: Math.max(imageMiB, shape.diskSizeMiB ?? 0),
    createdAt,
    ...(input.config && { config: input.config }),
  };
  await catalog.putTemplate(row);
  crashPoint("base-template.boot.after-put");
  return row;
}

async function exists(path: string): Promise<boolean> {
  return access(path).then(
    () => true,
    () => false,
  );
}
