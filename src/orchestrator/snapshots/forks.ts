import type { Catalog, SandboxRow, TemplateRow } from "../../catalog/index.js";
import { crashPoint } from "../../shared/crash-point.js";
import { toWarrenError, WarrenError } from "../../shared/index.js";
import { newId } from "../ids.js";
import type { LifecycleEvents } from "../lifecycle-events.js";
import type { WarmPool } from "../pool/warm-pool.js";
import type { Lifecycle } from "../sandboxes/lifecycle.js";
import { configOf, type LiveSandbox, newRow } from "../sandboxes/live-sandbox.js";
import { requireState, type SandboxTable } from "../sandboxes/sandbox-table.js";
import { snapshotTemplateConfig } from "../sandboxes/volume-mounts.js";
import { listSnapshotTemplates, snapshotInfo } from "../templates/snapshot-templates.js";
import { findTemplate, reservedName } from "../templates/templates.js";
import type {
  ForkInput,
  ForkResult,
  SnapshotInfo,
  SpillingForkInput,
  SpillingForkResult,
} from "../types.js";
import type { Snapshots } from "./snapshots.js";

export interface ForksOptions {
  readonly catalog: Catalog;
  readonly table: SandboxTable;
  readonly lifecycle: Lifecycle;
  readonly snapshots: Snapshots;
  /** Its warmed VMMs go with a deleted template. */
  readonly pool: WarmPool;
  /** Most children one fork call may ask for. */
  readonly maxForkCount: number;
  readonly defaultTimeoutMs: number;
  readonly events: LifecycleEvents;
}

const SNAPSHOT_NAME = /^[a-z0-9][a-z0-9._-]{0,62}$/;

/** How long a spilled fork's capture waits for other nodes' children to stand on it. */
const SPILL_HOLD_MS = 10 * 60_000;

/**
 * Fork and persistent snapshots: both start from one capture of a sandbox. A running source
 * is stopped only while its state is written and continues on a fresh overlay stacked on the
 * capture; a paused source's pause snapshot is used as it is.
 */
export class Forks {
  readonly #o: ForksOptions;

  constructor(options: ForksOptions) {
    this.#o = options;
  }

  /** `count` children from one capture; each child's failure is reported in its result. */
  fork(sandboxId: string, input: ForkInput): Promise<ForkResult[]> {
    return this.#fork(sandboxId, input, input.count) as Promise<ForkResult[]>;
  }

  /**
   * A fork larger than this node (the cluster's): `local` children start here from one
   * capture, which is published for other nodes to start the others from (forkFromCapture).
   */
  forkSpilling(sandboxId: string, input: SpillingForkInput): Promise<SpillingForkResult[]> {
    if (!Number.isInteger(input.local) || input.local < 0) {
      throw new WarrenError(
        "invalid_argument",
        `local must be an integer of 0 or more, got ${input.local}`,
      );
    }
    return this.#fork(sandboxId, input, Math.min(input.count, input.local));
  }

  async #fork(sandboxId: string, input: ForkInput, here: number): Promise<SpillingForkResult[]> {
    const { snapshots, events } = this.#o;
    this.#checkCount(input.count);
    const source = this.#o.table.get(sandboxId);
    const snapshotId = await this.#capture(source, "fork");
    const started = performance.now();
    const spilled = input.count - here;
    const results: SpillingForkResult[] = await this.#children(source.row, snapshotId, input, here);
    if (spilled > 0) results.push(...(await this.#spill(snapshotId, spilled)));
    crashPoint("forks.fork.after-children");
    const startedCount = results.filter((r) => "sandbox" in r).length;
    const durationMs = Math.round(performance.now() - started);
    await events.emit("sandbox.forked", {
      sandboxId,
      snapshotId,
      count: input.count,
      started: startedCount,
      spilled,
      durationMs,
    });
    // A fork whose every child failed leaves a capture nobody uses. A spilled one's is kept a
    // while for the other nodes' children (who then stand on it), then released the same way.
    if (spilled > 0 && results.some((r) => "spilled" in r)) {
      snapshots.releaseLater(snapshotId, SPILL_HOLD_MS);
    } else await snapshots.release(snapshotId);
    return results;
  }

  #checkCount(count: number): void {
    const { maxForkCount } = this.#o;
    if (!Number.isInteger(count) || count < 1 || count > maxForkCount) {
      throw new WarrenError(
        "invalid_argument",
        `count must be an integer from 1 to ${maxForkCount}, got ${count}`,
      );
    }
  }

  /** Publishes the capture for the children other nodes start; their results say where. */
  async #spill(snapshotId: string, count: number): Promise<SpillingForkResult[]> {
    let result: SpillingForkResult = { spilled: { snapshotId } };
    try {
      await this.#o.snapshots.publish(snapshotId);
      if (!(await this.#o.catalog.getSnapshot(snapshotId))?.publishedAt) {
        throw new WarrenError("store_unavailable", "the fork's capture was not published");
      }
    } catch (err) {
      const error = toWarrenError(err);
      result = { error: { reason: error.reason, message: error.message } };
    }
    return Array.from({ length: count }, () => result);
  }

  /** Children of a fork another node spilled here: from its published capture. */
  async forkFromCapture(
    sandboxId: string,
    snapshotId: string,
    input: ForkInput,
  ): Promise<ForkResult[]> {
    const { catalog, snapshots } = this.#o;
    this.#checkCount(input.count);
    const capture = await catalog.getSnapshot(snapshotId);
    // A paused source forks from its pause snapshot.
    const forkable = capture?.kind === "fork" || capture?.kind === "pause";
    if (!forkable || capture.sandboxId !== sandboxId) {
      throw new WarrenError(
        "invalid_argument",
        `snapshot ${snapshotId} is not a fork capture of sandbox ${sandboxId}`,
      );
    }
    const source = await catalog.findSandbox(sandboxId);
    if (!source) throw new WarrenError("sandbox_not_found", `sandbox ${sandboxId} not found`);
    const results = await this.#children(source, snapshotId, input, input.count);
    this.#o.events.emit("sandbox.fork_spill_started", {
      sandboxId,
      snapshotId,
      count: input.count,
      from: capture.nodeId,
    });
    await snapshots.release(snapshotId); // this node's copy, if no child of it started
    return results;
  }

  /**
   * Children of a persistent snapshot, no live parent needed (E2B's proposed
   * `POST /snapshots/{id}/fork`): each as a fork's child, from the snapshot's capture, with
   * the env, metadata (plus `input.metadata`) and network of the sandbox it was taken of.
   * template_not_found for a name or id the team has no snapshot under.
   */
  async forkSnapshot(
    reference: string,
    teamId: string | undefined,
    input: ForkInput,
  ): Promise<ForkResult[]> {
    const { catalog } = this.#o;
    this.#checkCount(input.count);
    const template = await findTemplate(catalog, reference, { teamId });
    const capture = await catalog.getSnapshot(template.snapshotId);
    const source = capture?.sandboxId && (await catalog.findSandbox(capture.sandboxId));
    if (template.kind !== "snapshot" || !source) {
      throw new WarrenError(
        "template_not_found",
        `snapshot '${reference}' not found (a template made by POST /sandboxes/{id}/snapshots forks; a built template is created from)`,
      );
    }
    return this.#children(source, template.snapshotId, input, input.count);
  }

  #children(
    row: SandboxRow,
    snapshotId: string,
    input: ForkInput,
    count: number,
  ): Promise<ForkResult[]> {
    return Promise.all(
      Array.from({ length: count }, async (): Promise<ForkResult> => {
        try {
          const child = newRow({
            teamId: row.teamId,
            templateId: row.templateId,
            alias: row.alias,
            shape: row,
            metadata: { ...row.metadata, ...input.metadata },
            envVars: row.envVars,
            config: configOf(row),
            timeoutMs: input.timeoutMs ?? this.#o.defaultTimeoutMs,
            snapshotId,
          });
          const presentToken = row.envdAccessToken;
          return {
            sandbox: await this.#o.lifecycle.launch(child, { presentToken, patient: true }),
          };
        } catch (err) {
          const error = toWarrenError(err);
          return { error: { reason: error.reason, message: error.message } };
        }
      }),
    );
  }

  /** A persistent snapshot of the sandbox: a template pointing at a capture of it. */
  async createSnapshot(sandboxId: string, input: { name?: string }): Promise<SnapshotInfo> {
    // An unknown sandbox is a 404 before a bad name is a 400.
    const { teamId } = this.#o.table.get(sandboxId).row;
    if (input.name !== undefined) {
      if (!SNAPSHOT_NAME.test(input.name)) {
        throw new WarrenError(
          "invalid_argument",
          "name must be 1-63 characters of a-z, 0-9, '.', '_' or '-', starting with a letter or digit",
        );
      }
      await this.#checkName(input.name, teamId);
    }
    const source = this.#o.table.get(sandboxId).row;
    const template = await this.captureTemplate(sandboxId, {
      id: newId(),
      teamId: source.teamId,
      kind: "snapshot",
      aliases: input.name ? [input.name] : [],
      config: snapshotTemplateConfig(configOf(source).volumeMounts),
    });
    return snapshotInfo(template, sandboxId);
  }

  /**
   * template_name_taken unless the name is free in the team's namespace: not a built-in
   * template's, nor held by the team's own template or build. Another team's never counts
   * (names are per team): it is neither in the way nor told of.
   */
  async #checkName(name: string, teamId: string): Promise<void> {
    const { catalog } = this.#o;
    const reserved = await reservedName(catalog, name, teamId);
    if (reserved) throw new WarrenError("template_name_taken", reserved);
    const builds = await catalog.listBuilds();
    if (
      (await catalog.getTemplate(name, teamId)) ||
      builds.some((build) => build.teamId === teamId && build.name === name)
    ) {
      throw new WarrenError("template_name_taken", `a template named '${name}' already exists`);
    }
  }

  /**
   * A template from the sandbox's state now (a running sandbox keeps running): persistent
   * snapshots, and the layers and results of template builds.
   */
  async captureTemplate(
    sandboxId: string,
    template: Pick<TemplateRow, "id" | "kind" | "aliases" | "config" | "teamId">,
  ): Promise<TemplateRow> {
    const { catalog, events } = this.#o;
    const source = this.#o.table.get(sandboxId);
    const snapshotId = await this.#capture(source, "named");
    const row: TemplateRow = {
      ...template,
      snapshotId,
      vcpus: source.row.vcpus,
      memoryMiB: source.row.memoryMiB,
      diskSizeMiB: source.row.diskSizeMiB,
      createdAt: new Date().toISOString(),
    };
    await catalog.putTemplate(row);
    crashPoint("forks.template.after-put");
    await events.emit("sandbox.snapshotted", {
      sandboxId,
      template: row.id,
      kind: row.kind,
      snapshotId,
    });
    return row;
  }

  listSnapshots(filter: {
    sandboxId?: string;
    name?: string;
    teamId?: string;
  }): Promise<SnapshotInfo[]> {
    return listSnapshotTemplates(this.#o.catalog, filter);
  }

  /**
   * Deletes a snapshot template. Sandboxes made from it (and their forks, which inherit the
   * template) block deletion. Its data may stay a while longer: the source sandbox's disk
   * may stand on it (`Snapshots` counts references).
   */
  async deleteTemplate(templateId: string, teamId?: string): Promise<void> {
    const template = await findTemplate(this.#o.catalog, templateId, { teamId });
    if (template.kind === "layer") {
      throw new WarrenError("template_not_found", `template '${templateId}' not found`);
    }
    await this.dropTemplate(template);
  }

  /** Deletes any template but the built-in ones (template builds drop their layers with it). */
  async dropTemplate(template: TemplateRow): Promise<void> {
    const { catalog, table, snapshots, pool } = this.#o;
    const templateId = template.aliases[0] ?? template.id;
    if (template.kind === "base") {
      throw new WarrenError("template_protected", `'${templateId}' is a built-in template`);
    }
    const users = table
      .values()
      .filter((live) => live.row.templateId === template.id)
      .map((live) => live.row.id);
    if (users.length > 0) {
      const many = users.length > 1;
      throw new WarrenError(
        "template_in_use",
        `template ${templateId} is still used by sandbox${many ? "es" : ""} ${users.join(", ")}: kill ${many ? "them" : "it"} first`,
      );
    }
    await catalog.deleteTemplate(template.id);
    crashPoint("forks.drop-template.after-delete");
    // Pooled VMMs were restored from the snapshot: they go before it may.
    await pool.forget(template.snapshotId);
    crashPoint("forks.drop-template.after-forget");
    await snapshots.release(template.snapshotId);
  }

  /** The sandbox's state as a snapshot id: a new capture if running, its pause snapshot if paused. */
  #capture(live: LiveSandbox, kind: "fork" | "named"): Promise<string> {
    const { table, snapshots, lifecycle } = this.#o;
    return table.locked(live.row.id, async () => {
      if (live.row.state === "paused" && configOf(live.row).pausedWithoutMemory) {
        // Its capture holds memory the pause dropped: children would run what is gone.
        throw new WarrenError(
          "sandbox_paused",
          `sandbox ${live.row.id} was paused without its memory: resume it (a reboot from its disk) first`,
        );
      }
      if (live.row.state === "paused" && live.row.snapshotId) return live.row.snapshotId;
      requireState(live, "running");
      if (!live.vm) throw new WarrenError("sandbox_busy", `sandbox ${live.row.id} has no VM`);
      const { id: snapshotId, timing } = await snapshots.capture(live.vm, {
        sandboxId: live.row.id,
        parentId: live.row.snapshotId,
        kind,
        resume: true,
        publish: kind === "named",
      });
      crashPoint("forks.capture.after-capture");
      // Its disk now stands on the capture.
      await lifecycle.update(live, { snapshotId });
      crashPoint("forks.capture.after-update");
      this.#o.events.emit("sandbox.captured", {
        sandboxId: live.row.id,
        snapshotId,
        kind,
        ...timing,
      });
      return snapshotId;
    });
  }
}
