import { readdir, rm } from "node:fs/promises";
import { basename, join } from "node:path";
import type { Catalog, SnapshotFileRecord, SnapshotRow } from "../catalog/index.js";
import { crashPoint } from "../shared/crash-point.js";
import type { Logger } from "../shared/index.js";
import type { SnapshotTiming, Vm, VmmDriver } from "../vmm/index.js";
import { newId } from "./ids.js";
import { type StateLayout, snapshotDir } from "./layout.js";
import { SerialLock } from "./serial-lock.js";

export interface SnapshotStoreOptions {
  readonly catalog: Catalog;
  readonly driver: Pick<VmmDriver, "flattenDisk" | "finishFlatten" | "checksumSnapshot">;
  readonly layout: StateLayout;
  /** GuestArtifacts fingerprint recorded with every capture. */
  readonly imagesFingerprint: string;
  /**
   * Frozen disk layers a snapshot may stand on above its template before it is flattened
   * onto the template's disk in the background; 0 turns flattening off.
   */
  readonly flattenDepth: number;
  readonly logger: Logger;
  /**
   * How long the layers a flatten made redundant are kept: a VMM that opened the old disk
   * just before it was replaced still opens the layers below it by path.
   */
  readonly retireDelayMs?: number;
}

export interface CaptureInput {
  /** The sandbox captured; none for a template's build VM. */
  readonly sandboxId?: string;
  /** The snapshot the VM runs on (its disk is stacked on that one's), if any. */
  readonly parentId?: string;
  /** "template": a template's own capture (kept while its template row points at it). */
  readonly kind: "template" | "pause" | "fork" | "named";
  /** Names it is found by (a template capture's `base:default`). */
  readonly names?: readonly string[];
  /** Keep the VM running (fork, named snapshot) or let its VMM go (pause, template). */
  readonly resume: boolean;
}

/** A snapshot kind that ends a chain: templates are long-lived, so disks are flattened onto them. */
function isAnchor(row: SnapshotRow): boolean {
  return row.kind === "template" || row.kind === "named";
}

/**
 * Owns snapshot data on disk and in the catalog. Snapshots are shared: a later snapshot's
 * disk is stacked on its parent's, sandboxes run on (or are paused as) one, templates point
 * at one. So they are reference-counted, and long chains of pauses and forks are flattened in
 * the background (one at a time) so that reads and restores never walk a hundred layers.
 */
export class SnapshotStore {
  readonly #o: SnapshotStoreOptions;
  /** Serialises every change to the snapshot graph (deletes, re-parenting after a flatten). */
  readonly #graph = new SerialLock();
  #flattens: Promise<void> = Promise.resolve();
  /** The snapshot being flattened: kept even if released meanwhile (its release waits). */
  #flattening: string | undefined;
  #releaseAfterFlatten = false;
  readonly #retiring = new Map<NodeJS.Timeout, string>();
  readonly #retirements = new Set<Promise<unknown>>();
  /** Checksums being computed, by snapshot id: a restore or flatten of one waits for it. */
  readonly #checksums = new Map<string, Promise<void>>();

  constructor(options: SnapshotStoreOptions) {
    this.#o = options;
  }

  /** Captures a VM into a new snapshot and records it; its chain may then be flattened. */
  async capture(vm: Vm, input: CaptureInput): Promise<{ id: string; timing: SnapshotTiming }> {
    const id = newId();
    const dir = snapshotDir(this.#o.layout, id);
    let timing: SnapshotTiming;
    try {
      timing = await vm.snapshot(dir, { resume: input.resume });
      crashPoint("snapshot-store.capture.after-snapshot");
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    await this.#o.catalog.putSnapshot({
      id,
      dir,
      sandboxId: input.sandboxId,
      parentId: input.parentId,
      kind: input.kind,
      names: input.names ?? [],
      imagesFingerprint: this.#o.imagesFingerprint,
      createdAt: new Date().toISOString(),
    });
    this.#checksum(id, dir);
    this.#queueFlatten(id);
    return { id, timing };
  }

  /**
   * The files a snapshot directory was sealed with, as the catalog records them, once their
   * checksums are in (the VMM driver checks every restore against them).
   */
  async sealedFiles(dir: string): Promise<readonly SnapshotFileRecord[] | undefined> {
    const id = basename(dir);
    await this.#checksums.get(id);
    const row = await this.#o.catalog.getSnapshot(id);
    return row?.dir === dir ? row.files : undefined;
  }

  /**
   * Checksums a sealed capture off the caller's path and records them. Until then no one but
   * root can change its files (sealed at capture); a crash before the record is finished at
   * the next start (checksumUnrecorded).
   */
  #checksum(id: string, dir: string): void {
    const done = this.#o.driver
      .checksumSnapshot(dir)
      .then((files) =>
        this.#graph.run("graph", async () => {
          const row = await this.#o.catalog.getSnapshot(id);
          if (row && !row.files) await this.#o.catalog.putSnapshot({ ...row, files });
        }),
      )
      .catch(async (err: unknown) => {
        // Released (and deleted) while it was being read: nothing to record.
        if (await this.#o.catalog.getSnapshot(id))
          this.#o.logger.warn({ snapshotId: id, err }, "snapshot.checksum_failed");
      })
      .finally(() => this.#checksums.delete(id));
    this.#checksums.set(id, done);
  }

  /** At start: records the checksums of captures a crash left without them. */
  async checksumUnrecorded(): Promise<number> {
    let count = 0;
    for (const row of await this.#o.catalog.listSnapshots()) {
      if (row.files) continue;
      this.#checksum(row.id, row.dir);
      await this.#checksums.get(row.id);
      count += 1;
    }
    return count;
  }

  /**
   * Deletes `snapshotId` once nothing uses it any more (no sandbox stands on it, no template
   * points at it, no later snapshot is stacked on it), then walks up to its parent: a
   * template's capture goes once its template row is deleted and nothing stands on it.
   * Returns the ids deleted.
   */
  release(snapshotId: string | undefined): Promise<string[]> {
    return this.#graph.run("graph", async () => {
      const { catalog } = this.#o;
      const deleted: string[] = [];
      let id = snapshotId;
      while (id) {
        const snapshot = await catalog.getSnapshot(id);
        if (!snapshot) break;
        const users = await catalog.snapshotUsers(id);
        if (users.sandboxes.length + users.snapshots.length + users.templates.length > 0) break;
        if (id === this.#flattening) {
          this.#releaseAfterFlatten = true;
          break;
        }
        await rm(snapshot.dir, { recursive: true, force: true });
        crashPoint("snapshot-store.release.after-rm");
        await catalog.deleteSnapshot(id);
        crashPoint("snapshot-store.release.after-delete");
        deleted.push(id);
        id = snapshot.parentId;
      }
      return deleted;
    });
  }

  /**
   * Releases every snapshot nothing uses: left by a crash, a retire cut short, or a replaced
   * template whose last paused sandbox was killed while the server was down.
   */
  async sweep(): Promise<number> {
    let deleted = 0;
    for (const row of await this.#o.catalog.listSnapshots()) {
      deleted += (await this.release(row.id)).length;
    }
    return deleted;
  }

  /**
   * Removes snapshot directories no catalog row names: a capture the server died in wrote its
   * directory but never its row, so nothing can use it. Only at start: a capture in progress
   * looks the same. Returns how many were removed.
   */
  async removeUnrecorded(): Promise<number> {
    const { catalog, layout } = this.#o;
    const recorded = new Set((await catalog.listSnapshots()).map((row) => row.dir));
    let removed = 0;
    for (const entry of await readdir(layout.snapshotsDir).catch(() => [] as string[])) {
      const dir = join(layout.snapshotsDir, entry);
      if (recorded.has(dir)) continue;
      await rm(dir, { recursive: true, force: true });
      removed += 1;
    }
    return removed;
  }

  /**
   * At start: finishes or drops flattens a crash interrupted (see VmmDriver.finishFlatten);
   * returns how many it finished.
   */
  async finishFlattens(): Promise<number> {
    let finished = 0;
    for (const row of await this.#o.catalog.listSnapshots()) {
      const meta = row.files?.find((f) => f.name === "meta.json")?.sha256;
      if (await this.#o.driver.finishFlatten(row.dir, meta)) finished += 1;
    }
    return finished;
  }

  /** Waits for the flatten in progress and deletes the layers waiting to be retired. */
  async close(): Promise<void> {
    await Promise.all(this.#checksums.values());
    await this.#flattens;
    const retiring = [...this.#retiring];
    this.#retiring.clear();
    for (const [timer, id] of retiring) {
      clearTimeout(timer);
      this.#releaseRetired(id);
    }
    await Promise.all(this.#retirements);
  }

  #queueFlatten(id: string): void {
    if (this.#o.flattenDepth <= 0) return;
    this.#flattens = this.#flattens
      .then(() => this.#flattenIfDeep(id))
      .catch((err: unknown) =>
        this.#o.logger.warn({ snapshotId: id, err }, "snapshot.flatten_failed"),
      );
  }

  async #flattenIfDeep(id: string): Promise<void> {
    const { catalog } = this.#o;
    const snapshot = await catalog.getSnapshot(id);
    if (!snapshot?.parentId) return;
    let layers = 1;
    let anchor = await catalog.getSnapshot(snapshot.parentId);
    while (anchor && !isAnchor(anchor) && anchor.parentId) {
      layers += 1;
      anchor = await catalog.getSnapshot(anchor.parentId);
    }
    if (!anchor || !isAnchor(anchor) || layers <= this.#o.flattenDepth) return;

    const started = performance.now();
    this.#flattening = id;
    try {
      // Its checksums first: recorded after the flatten's, they would be the old files'.
      await this.#checksums.get(id);
      const plan = await this.#o.driver.flattenDisk(snapshot.dir, anchor.dir);
      crashPoint("snapshot-store.flatten.after-plan");
      // Recorded before the files are swapped: a crash in between is finished at the next
      // start (recovery), never left with files the record does not match.
      const recorded = await this.#graph.run("graph", async () => {
        const current = await catalog.getSnapshot(id);
        if (current)
          await catalog.putSnapshot({ ...current, parentId: anchor.id, files: plan.files });
        return current !== undefined;
      });
      crashPoint("snapshot-store.flatten.after-record");
      if (recorded) await plan.commit();
      else await plan.discard();
      crashPoint("snapshot-store.flatten.after-commit");
      this.#o.logger.info(
        {
          snapshotId: id,
          onto: anchor.id,
          layers,
          durationMs: Math.round(performance.now() - started),
        },
        "snapshot.flattened",
      );
      this.#retire(snapshot.parentId);
    } finally {
      this.#flattening = undefined;
      if (this.#releaseAfterFlatten) {
        this.#releaseAfterFlatten = false;
        await this.release(id);
      }
    }
  }

  /** Releases the layers a flatten made redundant, after the grace period. */
  #retire(id: string): void {
    const timer = setTimeout(() => {
      this.#retiring.delete(timer);
      this.#releaseRetired(id);
    }, this.#o.retireDelayMs ?? 10_000);
    timer.unref();
    this.#retiring.set(timer, id);
  }

  #releaseRetired(id: string): void {
    const done = this.release(id)
      .catch((err: unknown) =>
        this.#o.logger.warn({ snapshotId: id, err }, "snapshot.release_failed"),
      )
      .finally(() => this.#retirements.delete(done));
    this.#retirements.add(done);
  }
}
