import type { Catalog, TemplateRow } from "../catalog/index.js";
import type { Capacity } from "./capacity.js";
import type { WarmPool } from "./pool/warm-pool.js";
import { configOf } from "./sandboxes/live-sandbox.js";
import type { SandboxTable } from "./sandboxes/sandbox-table.js";
import type { StartQueue } from "./start-queue.js";
import type { NodeLoad, NodeStats, SandboxLineage, SandboxSpan } from "./types.js";

/** How long the load's template list is reused, and how long a heartbeat waits for a new one. */
const TEMPLATES_FRESH_MS = 2_000;
const TEMPLATES_WAIT_MS = 250;

/**
 * What the node shows of itself, computed from what it holds, never asking a guest: its load
 * (a cluster's placement), its stats (metrics, `GET /node`), where each sandbox came from
 * (the dashboard's fork trees) and a team's history (E2B's team metrics).
 */
export class NodeViews {
  readonly #catalog: Catalog;
  readonly #table: SandboxTable;
  readonly #pool: WarmPool;
  readonly #capacity: Capacity;
  readonly #starts: StartQueue;
  #knownTemplates: { readonly rows: readonly TemplateRow[]; readonly at: number } | undefined;
  #reading: Promise<readonly TemplateRow[]> | undefined;

  constructor(parts: {
    catalog: Catalog;
    table: SandboxTable;
    pool: WarmPool;
    capacity: Capacity;
    starts: StartQueue;
  }) {
    this.#catalog = parts.catalog;
    this.#table = parts.table;
    this.#pool = parts.pool;
    this.#capacity = parts.capacity;
    this.#starts = parts.starts;
  }

  /**
   * What this node holds, for a cluster's placement (its heartbeats carry it): the sandboxes'
   * shapes (warm VMMs are not counted: a create takes their room) and the templates, by id
   * and alias, with a warm VMM ready.
   */
  async load(): Promise<NodeLoad> {
    let vcpusUsed = 0;
    let memoryMiBUsed = 0;
    const live = this.#table.values();
    for (const sandbox of live) {
      vcpusUsed += sandbox.row.vcpus;
      memoryMiBUsed += sandbox.row.memoryMiB;
    }
    const ready = this.#pool.readyBySnapshot();
    const warmTemplates = (await this.#templates())
      .filter((template) => (ready.get(template.snapshotId) ?? 0) > 0)
      .flatMap((template) => [template.id, ...template.aliases]);
    return { sandboxes: live.length, vcpusUsed, memoryMiBUsed, warmTemplates };
  }

  /**
   * The templates, for the load's warm names: read again when the last read is older than
   * TEMPLATES_FRESH_MS, but never waited on longer than TEMPLATES_WAIT_MS — heartbeats carry
   * the load, and a burst of creates holding every catalog connection must not make the
   * node look silent (a gateway would mark it down); the last list stands in meanwhile.
   */
  async #templates(): Promise<readonly TemplateRow[]> {
    const known = this.#knownTemplates;
    if (known && performance.now() - known.at < TEMPLATES_FRESH_MS) return known.rows;
    this.#reading ??= this.#catalog
      .listTemplates()
      .then((rows) => {
        this.#knownTemplates = { rows, at: performance.now() };
        return rows;
      })
      .finally(() => {
        this.#reading = undefined;
      });
    if (!known) return this.#reading;
    const late = new Promise<readonly TemplateRow[]>((resolve) =>
      setTimeout(() => resolve(known.rows), TEMPLATES_WAIT_MS).unref(),
    );
    return Promise.race([this.#reading.catch(() => known.rows), late]);
  }

  /** Where each running or paused sandbox came from, found in the snapshots it stands on. */
  async teamHistory(teamId: string): Promise<SandboxSpan[]> {
    return (await this.#catalog.listSandboxes())
      .filter((row) => row.teamId === teamId && !configOf(row).internal)
      .map((row) => ({
        startedAt: new Date(row.startedAt),
        // A killed row's updatedAt is its kill (nothing changes it after).
        ...(row.state === "killed" && { endedAt: new Date(row.updatedAt) }),
      }));
  }

  async lineage(): Promise<SandboxLineage[]> {
    const catalog = this.#catalog;
    // Forks of one source share their chains: each snapshot read once per call.
    const read = new Map<string, ReturnType<typeof catalog.getSnapshot>>();
    const snapshotOf = (id: string) => {
      const known = read.get(id);
      if (known) return known;
      const row = catalog.getSnapshot(id);
      read.set(id, row);
      return row;
    };
    const out: SandboxLineage[] = [];
    for (const live of this.#table.values()) {
      const { row } = live;
      if (configOf(row).internal) continue;
      let found: SandboxLineage = {
        sandboxId: row.id,
        templateId: row.templateId,
        via: "template",
      };
      // Its own pauses and fork points first, then what it was started from.
      let id = row.snapshotId;
      for (let depth = 0; id && depth < 1_000; depth++) {
        const snapshot = await snapshotOf(id);
        if (!snapshot?.sandboxId) break;
        if (snapshot.sandboxId !== row.id) {
          const via = snapshot.kind === "fork" || snapshot.kind === "pause" ? "fork" : "snapshot";
          found = { ...found, parentId: snapshot.sandboxId, via, snapshotId: snapshot.id };
          break;
        }
        id = snapshot.parentId;
      }
      out.push(found);
    }
    return out;
  }

  /** What the node holds now (NodeStats): counted, nothing asked of any guest. */
  stats(): NodeStats {
    const sandboxesByState: Record<string, number> = {};
    const sandboxes: NodeStats["sandboxes"][number][] = [];
    for (const live of this.#table.values()) {
      const { row } = live;
      sandboxesByState[row.state] = (sandboxesByState[row.state] ?? 0) + 1;
      if (row.state !== "running") continue;
      const last = live.metrics.at(-1);
      sandboxes.push({
        sandboxId: row.id,
        templateId: row.templateId,
        ...(last && { cpuUsedPct: last.cpuUsedPct, memUsedBytes: last.memUsed }),
      });
    }
    const { limits, usage } = this.#capacity;
    const starts = this.#starts;
    return {
      sandboxesByState,
      pool: this.#pool.stats,
      sandboxes,
      starts: {
        starting: starts.starting,
        queued: starts.queued,
        concurrency: starts.concurrency,
        maxQueued: starts.settings.maxQueued,
      },
      capacity: {
        maxSandboxes: limits.maxSandboxes,
        maxVcpus: limits.maxVcpus,
        maxMemoryMiB: limits.maxMemoryMiB,
        ...usage,
      },
    };
  }
}
