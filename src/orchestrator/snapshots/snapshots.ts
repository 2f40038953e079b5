import { readdir, rm, stat } from "node:fs/promises";
import { basename, join } from "node:path";
import type { Catalog, SnapshotFileRecord, SnapshotRow } from "../../catalog/index.js";
import { crashPoint } from "../../shared/crash-point.js";
import { type Logger, WarrenError } from "../../shared/index.js";
import { phase } from "../../shared/phases.js";
import type { DiskChains, SnapshotTiming, Vm, VmmDriver } from "../../vmm/index.js";
import { newId } from "../ids.js";
import { type StateLayout, snapshotDir } from "../layout.js";
import type { LifecycleEvents } from "../lifecycle-events.js";
import { SerialLock } from "../serial-lock.js";
import { SnapshotCopies } from "./snapshot-copies.js";

export interface SnapshotsOptions {
  readonly catalog: Catalog;
  readonly driver: Pick<VmmDriver, "checksumSnapshot">;
  /** Flattens snapshot disks (and finishes flattens a crash cut short). */
  readonly disks: DiskChains;
  readonly layout: StateLayout;
  /** GuestArtifacts fingerprint recorded with every capture. */
  readonly imagesFingerprint: string;
  /**
   * Frozen disk layers a snapshot may stand on above its template before it is flattened
   * onto the template's disk in the background; 0 turns flattening off.
   */
  readonly flattenDepth: number;
  readonly logger: Logger;
  readonly events: LifecycleEvents;
  /**
   * How long the layers a flatten made redundant are kept: a VMM that opened the old disk
   * just before it was replaced still opens the layers below it by path.
   */
  readonly retireDelayMs?: number;
  /**
   * How long after a capture its checksums start (default 1 s): hashing competes for the
   * host's cores and file threads with whatever comes next (a resume straight after a
   * pause, a fork's children), which need not wait for it (the driver knows what it sealed).
   */
  readonly checksumDelayMs?: number;
  /** The cluster's shared snapshot store, when nodes share one (resume on another node). */
  readonly shared?: SharedSnapshots;
  /** Snapshots this node's warm pool restores from (their copies stay while it does). */
  readonly warmSnapshots?: () => Iterable<string>;
}

/**
 * The cluster's shared snapshot store as snapshots use it (the store component's SharedStore
 * by shape), and the catalog flag that tells other nodes a snapshot is there.
 */
export interface SharedSnapshots {
  publish(id: string, dir: string, files: readonly SnapshotFileRecord[]): Promise<unknown>;
  fetch(id: string, intoDir: string): Promise<unknown>;
  delete(id: string): Promise<void>;
  /** ClusterCatalog.markPublished. */
  markPublished(id: string): Promise<unknown>;
  /** Bytes this node's copies of other nodes' snapshots may take (SnapshotCopies). */
  readonly copiesMaxBytes: number;
  /** How long a copy just used is kept whatever stands on it (SnapshotCopies; default 2 min). */
  readonly copiesGraceMs?: number;
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
  /** A pause: keep the VMM stopped (Vm.snapshot's `keepStopped`; the timing says if it was). */
  readonly keepStopped?: boolean;
  /**
   * Publish it (and what it stands on) to the shared store in the background, so another
   * node can restore it: pauses, templates and persistent snapshots, not fork points.
   */
  readonly publish?: boolean;
}

/** Sandboxes that stand on a snapshot (killed ones stand on nothing). */
const LIVE_STATES = ["creating", "running", "pausing", "paused", "resuming", "killing"] as const;

function bytesOf(files: readonly SnapshotFileRecord[]): number {
  return files.reduce((sum, file) => sum + file.bytes, 0);
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
export class Snapshots {
  readonly #o: SnapshotsOptions;
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
  /** Publishes run one at a time, each after the flattens queued before it. */
  #publishes: Promise<void> = Promise.resolve();
  /** Other nodes' snapshots fetched into this node's snapshots directory. */
  readonly #copies: SnapshotCopies | undefined;

  constructor(options: SnapshotsOptions) {
    this.#o = options;
    const { shared } = options;
    this.#copies =
      shared &&
      new SnapshotCopies({
        dir: options.layout.snapshotsDir,
        maxBytes: shared.copiesMaxBytes,
        graceMs: shared.copiesGraceMs,
        fetch: (id, intoDir) => shared.fetch(id, intoDir),
        retained: () => this.#copiesInUse(),
        logger: options.logger,
        events: options.events,
      });
  }

  /** Captures a VM into a new snapshot and records it; its chain may then be flattened. */
  async capture(vm: Vm, input: CaptureInput): Promise<{ id: string; timing: SnapshotTiming }> {
    const id = newId();
    const dir = snapshotDir(this.#o.layout, id);
    let timing: SnapshotTiming;
    try {
      timing = await phase("vmm.snapshot", () =>
        vm.snapshot(dir, { resume: input.resume, keepStopped: input.keepStopped }),
      );
      crashPoint("snapshots.capture.after-snapshot");
    } catch (err) {
      await rm(dir, { recursive: true, force: true });
      throw err;
    }
    await phase("orchestrator.catalog", () =>
      this.#o.catalog.putSnapshot({
        id,
        dir,
        sandboxId: input.sandboxId,
        parentId: input.parentId,
        kind: input.kind,
        names: input.names ?? [],
        imagesFingerprint: this.#o.imagesFingerprint,
        createdAt: new Date().toISOString(),
      }),
    );
    this.#checksum(id, dir, this.#o.checksumDelayMs ?? 1_000);
    this.#queueFlatten(id);
    if (input.publish) this.publish(id).catch(() => {});
    return { id, timing };
  }

  /**
   * Where a snapshot's files are on this node: its own directory, or, for another node's
   * snapshot, a copy fetched from the shared store with every snapshot it stands on (into
   * this node's snapshots directory, where a relocatable chain resolves).
   */
  async localDir(snapshotId: string): Promise<string> {
    const { catalog, layout } = this.#o;
    const top = await catalog.getSnapshot(snapshotId);
    if (!top)
      throw new WarrenError("internal", `snapshot ${snapshotId} is missing from the catalog`);
    if (!top.nodeId) return top.dir;
    for (let row: SnapshotRow | undefined = top; row; ) {
      if (row.nodeId) await this.#ensureCopy(row);
      row = row.parentId ? await catalog.getSnapshot(row.parentId) : undefined;
    }
    return snapshotDir(layout, snapshotId);
  }

  /** This node's copy of another node's snapshot, fetched unless one is kept already. */
  async #ensureCopy(row: SnapshotRow): Promise<void> {
    const copies = this.#copies;
    if (!copies || !row.publishedAt || !row.files) {
      throw new WarrenError(
        "snapshot_not_found",
        `snapshot ${row.id} is on node ${row.nodeId} and not in the shared snapshot store`,
      );
    }
    const fetched = !copies.has(row.id);
    const started = performance.now();
    await copies.ensure(row.id, bytesOf(row.files));
    if (fetched)
      this.#o.events.emit("snapshot.fetched", {
        snapshotId: row.id,
        from: row.nodeId,
        durationMs: Math.round(performance.now() - started),
      });
  }

  /**
   * The copies of other nodes' snapshots this node stands on: under its sandboxes (running
   * or paused), its own snapshots and its warm pool, all the way down their chains.
   */
  async #copiesInUse(): Promise<Set<string>> {
    const { catalog } = this.#o;
    const tops = [...(this.#o.warmSnapshots?.() ?? [])];
    for (const row of await catalog.listSandboxes(LIVE_STATES))
      if (row.snapshotId) tops.push(row.snapshotId);
    for (const row of await catalog.listSnapshots()) if (row.parentId) tops.push(row.parentId);
    const seen = new Set<string>();
    const inUse = new Set<string>();
    for (const top of tops) {
      for (let id: string | undefined = top; id && !seen.has(id); ) {
        seen.add(id);
        const row: SnapshotRow | undefined = await catalog.getSnapshot(id);
        if (row?.nodeId) inUse.add(id);
        id = row?.parentId;
      }
    }
    return inUse;
  }

  /**
   * Publishes a snapshot of this node, and the ones it stands on first, to the shared store,
   * then marks each published in the catalog (so gateways may move a sandbox paused on it
   * to another node). Runs after the flattens queued so far: a capture's files change only
   * in its flatten, right after it, and a published id's files never change.
   */
  publish(snapshotId: string): Promise<void> {
    const { shared, logger } = this.#o;
    if (!shared) return Promise.resolve();
    const flattened = this.#flattens;
    const run = this.#publishes.then(async () => {
      await flattened;
      await this.#publishChain(shared, snapshotId);
    });
    this.#publishes = run.catch((err: unknown) =>
      logger.warn({ snapshotId, err }, "snapshot.publish_failed"),
    );
    return run;
  }

  async #publishChain(shared: SharedSnapshots, snapshotId: string): Promise<void> {
    const { catalog, events } = this.#o;
    const chain: string[] = [];
    for (let row = await catalog.getSnapshot(snapshotId); row; ) {
      // Another node's snapshot was fetched from the store, and a published one's ancestors
      // were published before it.
      if (row.nodeId || row.publishedAt) break;
      chain.unshift(row.id);
      row = row.parentId ? await catalog.getSnapshot(row.parentId) : undefined;
    }
    for (const id of chain) {
      await this.#checksums.get(id);
      const row = await catalog.getSnapshot(id);
      if (!row) return; // released meanwhile
      if (!row.files) throw new WarrenError("internal", `snapshot ${id} has no checksums`);
      const started = performance.now();
      await shared.publish(id, row.dir, row.files);
      // Released while it uploaded: its release may have unpublished it before the upload
      // finished, so it is unpublished again here.
      const kept = await this.#graph.run("graph", async () => {
        if (!(await catalog.getSnapshot(id))) return false;
        await shared.markPublished(id);
        return true;
      });
      if (!kept) {
        await shared.delete(id).catch(() => {});
        return;
      }
      events.emit("snapshot.published", {
        snapshotId: id,
        durationMs: Math.round(performance.now() - started),
      });
    }
  }

  /**
   * The files a snapshot directory was sealed with, as the catalog records them, once their
   * checksums are in (the VMM driver checks every restore against them).
   */
  async sealedFiles(dir: string): Promise<readonly SnapshotFileRecord[] | undefined> {
    const id = basename(dir);
    await this.#checksums.get(id);
    const row = await this.#o.catalog.getSnapshot(id);
    if (!row) return undefined;
    // Another node's snapshot is restored from the copy localDir fetched.
    const local = row.nodeId ? snapshotDir(this.#o.layout, id) : row.dir;
    return local === dir ? row.files : undefined;
  }

  /**
   * Checksums a sealed capture off the caller's path, after `delayMs`, and records them.
   * Until then no one but root can change its files (sealed at capture); a crash before the
   * record is finished at the next start (checksumUnrecorded).
   */
  #checksum(id: string, dir: string, delayMs = 0): void {
    const done = new Promise((resolve) => setTimeout(resolve, delayMs))
      .then(() => this.#o.driver.checksumSnapshot(dir))
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
        if (snapshot.nodeId) {
          // Another node's: only this node's copy goes (its owner keeps its row and files).
          await this.#copies?.drop(id);
          id = snapshot.parentId;
          continue;
        }
        await rm(snapshot.dir, { recursive: true, force: true });
        crashPoint("snapshots.release.after-rm");
        await catalog.deleteSnapshot(id);
        crashPoint("snapshots.release.after-delete");
        // Unpublished too (nothing on any node uses it: snapshotUsers is cluster-wide).
        const unpublished = id;
        await this.#o.shared
          ?.delete(unpublished)
          .catch((err: unknown) => this.#unpublishFailed(unpublished, err));
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
   * directory but never its row, so nothing can use it. Copies of other nodes' published
   * snapshots are kept (recency: their mtime), then the copies are brought within their
   * budget. Only at start: a capture or fetch in progress looks the same. Returns how many
   * were removed.
   */
  async removeUnrecorded(): Promise<number> {
    const { catalog, layout } = this.#o;
    const recorded = new Set((await catalog.listSnapshots()).map((row) => row.dir));
    let removed = 0;
    for (const entry of await readdir(layout.snapshotsDir).catch(() => [] as string[])) {
      const dir = join(layout.snapshotsDir, entry);
      if (recorded.has(dir) || (await this.#adoptCopy(entry, dir))) continue;
      await rm(dir, { recursive: true, force: true });
      removed += 1;
    }
    await this.#copies?.evict();
    return removed;
  }

  /** Indexes a copy a previous run fetched, if it is one of a snapshot still published. */
  async #adoptCopy(entry: string, dir: string): Promise<boolean> {
    if (!this.#copies || entry.startsWith(".")) return false;
    const row = await this.#o.catalog.getSnapshot(entry);
    if (!row?.nodeId || !row.publishedAt || !row.files) return false;
    const meta = await stat(join(dir, "meta.json")).catch(() => undefined);
    if (!meta) return false;
    this.#copies.adopt(entry, bytesOf(row.files), (await stat(dir)).mtimeMs);
    return true;
  }

  /**
   * At start: finishes or drops flattens a crash interrupted (see DiskChains.finishFlatten);
   * returns how many it finished.
   */
  async finishFlattens(): Promise<number> {
    let finished = 0;
    for (const row of await this.#o.catalog.listSnapshots()) {
      const meta = row.files?.find((f) => f.name === "meta.json")?.sha256;
      if (await this.#o.disks.finishFlatten(row.dir, meta)) finished += 1;
    }
    return finished;
  }

  #unpublishFailed(id: string, err: unknown): void {
    if (err instanceof WarrenError && err.reason === "snapshot_not_found") return;
    this.#o.logger.warn({ snapshotId: id, err }, "snapshot.unpublish_failed");
  }

  /** Waits for the flatten and publish in progress and deletes the layers waiting to be retired. */
  async close(): Promise<void> {
    await Promise.all(this.#checksums.values());
    await this.#flattens;
    await this.#publishes;
    await this.#copies?.close();
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
    while (anchor && !isAnchor(anchor) && anchor.parentId && !anchor.nodeId) {
      layers += 1;
      anchor = await catalog.getSnapshot(anchor.parentId);
    }
    // A chain through another node's snapshots stays as it is: their files are copies.
    if (!anchor || !isAnchor(anchor) || anchor.nodeId || layers <= this.#o.flattenDepth) return;

    const started = performance.now();
    this.#flattening = id;
    try {
      // Its checksums first: recorded after the flatten's, they would be the old files'.
      await this.#checksums.get(id);
      const plan = await this.#o.disks.flatten(snapshot.dir, anchor.dir);
      crashPoint("snapshots.flatten.after-plan");
      // Recorded before the files are swapped: a crash in between is finished at the next
      // start (recovery), never left with files the record does not match.
      const recorded = await this.#graph.run("graph", async () => {
        const current = await catalog.getSnapshot(id);
        if (current)
          await catalog.putSnapshot({ ...current, parentId: anchor.id, files: plan.files });
        return current !== undefined;
      });
      crashPoint("snapshots.flatten.after-record");
      if (recorded) await plan.commit();
      else await plan.discard();
      crashPoint("snapshots.flatten.after-commit");
      this.#o.events.emit("snapshot.flattened", {
        snapshotId: id,
        onto: anchor.id,
        layers,
        durationMs: Math.round(performance.now() - started),
      });
      this.#retire(snapshot.parentId);
    } finally {
      this.#flattening = undefined;
      if (this.#releaseAfterFlatten) {
        this.#releaseAfterFlatten = false;
        await this.release(id);
      }
    }
  }

  /**
   * Releases a snapshot after `delayMs` (or at close, or at the next start's sweep): a spilled
   * fork's capture, which other nodes' children are about to stand on.
   */
  releaseLater(snapshotId: string, delayMs: number): void {
    this.#retire(snapshotId, delayMs);
  }

  /** Releases the layers a flatten made redundant, after the grace period. */
  #retire(id: string, delayMs = this.#o.retireDelayMs ?? 10_000): void {
    const timer = setTimeout(() => {
      this.#retiring.delete(timer);
      this.#releaseRetired(id);
    }, delayMs);
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
