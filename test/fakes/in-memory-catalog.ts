/**
 * InMemoryCatalog: a STAND-IN for SqliteCatalog in orchestrator unit tests: the same
 * `Catalog` contract (test/contracts/catalog.contract.ts runs against it), kept in plain maps.
 * `reopen()` hands out a new catalog over the same data, as a restarted server would find
 * its SQLite file. Several catalogs with node ids of their own on one store are the nodes of
 * a cluster, scoped as PostgresCatalog's are (InMemoryCluster reads and changes the store
 * across them): a node sees its own sandboxes and lists its own snapshots, and reads any
 * node's snapshot (with that node's id) and any sandbox by `findSandbox`.
 */
import { randomUUID } from "node:crypto";
import {
  type BuildRow,
  type Catalog,
  type EventRow,
  HOLDING_STATES,
  type LifecycleEventQuery,
  type LifecycleEventRow,
  REQUIRED_SANDBOX_KEYS,
  type SandboxPatch,
  type SandboxRow,
  type SandboxState,
  type SnapshotRow,
  type TagRow,
  type TeamAdmit,
  type TeamUsage,
  type TemplateKind,
  type TemplateRow,
} from "../../src/catalog/index.js";
import { checkLifecycleQuery, typesFilter } from "../../src/catalog/lifecycle-query.js";
import { WarrenError } from "../../src/shared/index.js";

/** What a catalog remembers; shared by every catalog reopened on it (and a cluster's nodes). */
export interface CatalogStore {
  /** Rows by id, each with the node that holds it ("" alone). */
  readonly sandboxes: Map<string, SandboxRow>;
  readonly sandboxNodes: Map<string, string>;
  /** By `templateKey(scope, id)`: a node's own kinds (base, layer) in its scope, others in "". */
  readonly templates: Map<string, TemplateRow>;
  /** Rows without nodeId and publishedAt, which the maps below keep. */
  readonly snapshots: Map<string, SnapshotRow>;
  readonly snapshotNodes: Map<string, string>;
  /** When a snapshot was marked published (ClusterCatalog.markPublished). */
  readonly published: Map<string, string>;
  readonly builds: Map<string, BuildRow>;
  /** Keyed by `<template id> <tag>`. */
  readonly tags: Map<string, TagRow>;
  /** In recording order; a lifecycle one with its id and its sandbox's team. */
  readonly events: StoredEvent[];
}

interface StoredEvent {
  readonly row: EventRow;
  readonly id?: string;
  readonly teamId?: string;
}

/** Kinds each node makes for itself (as PostgresCatalog's); the others have one row. */
const NODE_LOCAL_KINDS: ReadonlySet<TemplateKind> = new Set(["base", "layer"]);

function templateKey(scope: string, id: string): string {
  return `${scope}\u0000${id}`;
}

/** A deep copy without keys set to undefined: rows leave unset optional fields absent. */
function copy<T extends object>(row: T): T {
  const out = structuredClone(row) as Record<string, unknown>;
  for (const [key, value] of Object.entries(out)) if (value === undefined) delete out[key];
  return out as T;
}

function byKeys<T>(...keys: ((row: T) => string)[]): (a: T, b: T) => number {
  return (a, b) => {
    for (const key of keys) {
      const [x, y] = [key(a), key(b)];
      if (x !== y) return x < y ? -1 : 1;
    }
    return 0;
  };
}

export function emptyCatalogStore(): CatalogStore {
  return {
    sandboxes: new Map(),
    sandboxNodes: new Map(),
    templates: new Map(),
    snapshots: new Map(),
    snapshotNodes: new Map(),
    published: new Map(),
    builds: new Map(),
    tags: new Map(),
    events: [],
  };
}

/** A snapshot row as `node` reads it: another node's carries that node's id. */
export function snapshotAsSeenBy(store: CatalogStore, row: SnapshotRow, node: string): SnapshotRow {
  const publishedAt = store.published.get(row.id);
  const owner = store.snapshotNodes.get(row.id) ?? "";
  return copy({
    ...row,
    ...(publishedAt !== undefined && { publishedAt }),
    ...(owner !== node && { nodeId: owner }),
  });
}

export class InMemoryCatalog implements Catalog {
  readonly #store: CatalogStore;
  /** The node whose rows this catalog holds ("" when there is only one). */
  readonly #node: string;
  #open = true;

  constructor(store: CatalogStore = emptyCatalogStore(), nodeId = "") {
    this.#store = store;
    this.#node = nodeId;
  }

  /** A new catalog on the same data (this one is closed first). */
  async reopen(): Promise<InMemoryCatalog> {
    await this.close();
    return new InMemoryCatalog(this.#store, this.#node);
  }

  /** This node's sandbox rows, by id. */
  #own(): Map<string, SandboxRow> {
    const { sandboxes, sandboxNodes } = this.#data();
    return new Map([...sandboxes].filter(([id]) => sandboxNodes.get(id) === this.#node));
  }

  async insertSandbox(row: SandboxRow, admit?: TeamAdmit): Promise<void> {
    const { sandboxes, sandboxNodes } = this.#data();
    if (sandboxes.has(row.id)) {
      throw new WarrenError("already_exists", `insert sandbox ${row.id}: the id is taken`);
    }
    // One turn of the event loop: admissions of a team are one at a time, as under a lock.
    admit?.(this.#teamUsage(row.teamId, row.id));
    sandboxes.set(row.id, copy(row));
    sandboxNodes.set(row.id, this.#node);
  }

  async updateSandbox(
    id: string,
    patch: SandboxPatch,
    admit?: TeamAdmit,
  ): Promise<SandboxRow | undefined> {
    const { sandboxes } = this.#data();
    for (const key of REQUIRED_SANDBOX_KEYS) {
      if (key in patch && patch[key] === undefined) {
        throw new WarrenError("invalid_argument", `${key} cannot be cleared`);
      }
    }
    const current = this.#own().get(id);
    if (!current) return undefined;
    admit?.(this.#teamUsage(current.teamId, id));
    const next = copy({ ...current, ...patch, id, updatedAt: new Date().toISOString() });
    sandboxes.set(id, next);
    return copy(next);
  }

  #teamUsage(teamId: string, except: string): TeamUsage {
    return teamUsageIn(this.#data().sandboxes.values(), teamId, except);
  }

  async getSandbox(id: string): Promise<SandboxRow | undefined> {
    const row = this.#own().get(id);
    return row && copy(row);
  }

  async findSandbox(id: string): Promise<SandboxRow | undefined> {
    const row = this.#data().sandboxes.get(id);
    return row && copy(row);
  }

  async listSandboxes(states?: readonly SandboxState[]): Promise<SandboxRow[]> {
    return [...this.#own().values()]
      .filter((row) => !states || states.includes(row.state))
      .sort(
        byKeys(
          (r) => r.startedAt,
          (r) => r.id,
        ),
      )
      .map(copy);
  }

  async deleteSandbox(id: string): Promise<void> {
    if (!this.#own().has(id)) return;
    this.#data().sandboxes.delete(id);
    this.#store.sandboxNodes.delete(id);
  }

  async purgeKilledSecrets(killedBefore: string): Promise<number> {
    const { sandboxes, snapshots } = this.#data();
    const snapshotted = new Set([...snapshots.values()].map((s) => s.sandboxId));
    let changed = 0;
    for (const [id, row] of this.#own()) {
      if (row.state !== "killed" || row.updatedAt >= killedBefore) continue;
      const keepToken = snapshotted.has(id);
      const secrets =
        Object.keys(row.envVars).length > 0 ||
        row.trafficAccessToken !== undefined ||
        (row.envdAccessToken !== undefined && !keepToken);
      if (!secrets) continue;
      sandboxes.set(
        id,
        copy({
          ...row,
          envVars: {},
          trafficAccessToken: undefined,
          envdAccessToken: keepToken ? row.envdAccessToken : undefined,
        }),
      );
      changed++;
    }
    return changed;
  }

  async putTemplate(row: TemplateRow): Promise<void> {
    const { templates } = this.#data();
    const scope = NODE_LOCAL_KINDS.has(row.kind) ? this.#node : "";
    // Put again under another kind, it may change scope: the old scope's row goes.
    for (const other of this.#scopes()) {
      if (other !== scope) templates.delete(templateKey(other, row.id));
    }
    // An alias moves to the template put last, within its scope and its namespace (its
    // team, or the global names): another team's names are never touched.
    for (const [key, other] of this.#scoped(scope)) {
      if (other.id === row.id || other.teamId !== row.teamId) continue;
      const aliases = other.aliases.filter((alias) => !row.aliases.includes(alias));
      if (aliases.length !== other.aliases.length) templates.set(key, { ...other, aliases });
    }
    templates.set(templateKey(scope, row.id), copy(row));
  }

  /**
   * As `teamId` sees it (absent: any id, the global names): its own and the global
   * templates. An id first, then a global name, then the team's; this node's row before a
   * cluster-wide one.
   */
  async getTemplate(idOrAlias: string, teamId?: string): Promise<TemplateRow | undefined> {
    const rows = this.#scopes()
      .flatMap((scope) => [...this.#scoped(scope).values()])
      .filter((r) => teamId === undefined || r.teamId === undefined || r.teamId === teamId);
    const named = (global: boolean) => (r: TemplateRow) =>
      r.aliases.includes(idOrAlias) && (global ? r.teamId === undefined : r.teamId === teamId);
    const row =
      rows.find((r) => r.id === idOrAlias) ??
      rows.find(named(true)) ??
      (teamId === undefined ? undefined : rows.find(named(false)));
    return row && copy(row);
  }

  async listTemplates(): Promise<TemplateRow[]> {
    const rows = this.#scopes().flatMap((scope) => [...this.#scoped(scope).values()]);
    return rows
      .sort(
        byKeys(
          (r) => r.createdAt,
          (r) => r.id,
        ),
      )
      .map(copy);
  }

  async deleteTemplate(id: string): Promise<void> {
    this.#data().templates.delete(templateKey(this.#node, id));
    this.#data().templates.delete(templateKey("", id));
  }

  /** Where this catalog finds templates: its node's own scope first, then the global one. */
  #scopes(): string[] {
    return this.#node === "" ? [""] : [this.#node, ""];
  }

  /** The templates of one scope, by key. */
  #scoped(scope: string): Map<string, TemplateRow> {
    return new Map(
      [...this.#data().templates].filter(([key]) => key.startsWith(templateKey(scope, ""))),
    );
  }

  async putBuild(row: BuildRow): Promise<void> {
    this.#data().builds.set(row.id, copy(row));
  }

  async getBuild(id: string): Promise<BuildRow | undefined> {
    const row = this.#data().builds.get(id);
    return row && copy(row);
  }

  async listBuilds(templateId?: string): Promise<BuildRow[]> {
    return [...this.#data().builds.values()]
      .filter((row) => templateId === undefined || row.templateId === templateId)
      .sort(
        byKeys(
          (r) => r.createdAt,
          (r) => r.id,
        ),
      )
      .map(copy);
  }

  async deleteBuild(id: string): Promise<void> {
    this.#data().builds.delete(id);
  }

  async putTag(row: TagRow): Promise<void> {
    this.#data().tags.set(`${row.templateId} ${row.tag}`, copy(row));
  }

  async getTag(templateId: string, tag: string): Promise<TagRow | undefined> {
    const row = this.#data().tags.get(`${templateId} ${tag}`);
    return row && copy(row);
  }

  async listTags(templateId: string): Promise<TagRow[]> {
    return [...this.#data().tags.values()]
      .filter((row) => row.templateId === templateId)
      .sort(byKeys((r) => r.tag))
      .map(copy);
  }

  async deleteTag(templateId: string, tag: string): Promise<void> {
    this.#data().tags.delete(`${templateId} ${tag}`);
  }

  /** Puts the row on this node (moving it here if another node held it); publishedAt stays. */
  async putSnapshot(row: SnapshotRow): Promise<void> {
    const { nodeId: _node, publishedAt: _published, ...own } = row;
    this.#data().snapshots.set(row.id, copy(own));
    this.#store.snapshotNodes.set(row.id, this.#node);
  }

  async getSnapshot(id: string): Promise<SnapshotRow | undefined> {
    const row = this.#data().snapshots.get(id);
    return row && snapshotAsSeenBy(this.#store, row, this.#node);
  }

  async listSnapshots(filter: { sandboxId?: string; name?: string } = {}): Promise<SnapshotRow[]> {
    const { snapshotNodes } = this.#data();
    return [...this.#store.snapshots.values()]
      .filter((row) => snapshotNodes.get(row.id) === this.#node)
      .filter((row) => filter.sandboxId === undefined || row.sandboxId === filter.sandboxId)
      .filter((row) => filter.name === undefined || row.names.includes(filter.name))
      .sort(
        byKeys(
          (r) => r.createdAt,
          (r) => r.id,
        ),
      )
      .map((row) => snapshotAsSeenBy(this.#store, row, this.#node));
  }

  async deleteSnapshot(id: string): Promise<void> {
    const { snapshots, snapshotNodes, published } = this.#data();
    if (snapshotNodes.get(id) !== this.#node) return;
    snapshots.delete(id);
    snapshotNodes.delete(id);
    published.delete(id);
  }

  async snapshotUsers(
    id: string,
  ): Promise<{ snapshots: string[]; templates: string[]; sandboxes: string[] }> {
    const { snapshots, templates, sandboxes } = this.#data();
    const ids = (rows: Iterable<{ id: string }>, uses: (row: never) => boolean) =>
      [...rows]
        .filter(uses as (row: { id: string }) => boolean)
        .map((row) => row.id)
        .sort();
    return {
      snapshots: ids(snapshots.values(), (row: SnapshotRow) => row.parentId === id),
      templates: ids(templates.values(), (row: TemplateRow) => row.snapshotId === id),
      sandboxes: ids(
        sandboxes.values(),
        (row: SandboxRow) => row.snapshotId === id && row.state !== "killed",
      ),
    };
  }

  async recordEvent(event: EventRow): Promise<void> {
    const { events, sandboxes } = this.#data();
    if (event.lifecycle === undefined) {
      events.push({ row: copy(event) });
      return;
    }
    const teamId = sandboxes.get(event.sandboxId)?.teamId;
    events.push({ row: copy(event), id: randomUUID(), ...(teamId !== undefined && { teamId }) });
  }

  async listLifecycleEvents(query: LifecycleEventQuery): Promise<LifecycleEventRow[]> {
    checkLifecycleQuery(query);
    const { events, sandboxes } = this.#data();
    const types = typesFilter(query);
    const listed: LifecycleEventRow[] = [];
    for (const { row, id, teamId } of events) {
      const sandbox = sandboxes.get(row.sandboxId);
      if (id === undefined || row.lifecycle === undefined || teamId === undefined) continue;
      if (query.teamId !== undefined && teamId !== query.teamId) continue;
      if (!sandbox || sandbox.config.internal === true) continue;
      if (query.sandboxId !== undefined && row.sandboxId !== query.sandboxId) continue;
      if (types && !types.includes(row.lifecycle)) continue;
      const { id: sandboxId, templateId, metadata, startedAt, vcpus, memoryMiB } = sandbox;
      listed.push(
        copy({
          id,
          at: row.at,
          lifecycle: row.lifecycle,
          kind: row.kind,
          detail: row.detail,
          sandbox: {
            id: sandboxId,
            teamId,
            templateId,
            metadata,
            startedAt,
            vcpus,
            memoryMiB,
            ...(sandbox.snapshotId !== undefined && { snapshotId: sandbox.snapshotId }),
          },
        }),
      );
    }
    // Stable sort: ties keep recording order (reversed, newest first).
    listed.sort((a, b) => (a.at === b.at ? 0 : a.at < b.at ? -1 : 1));
    if (!query.ascending) listed.reverse();
    return listed.slice(query.offset, query.offset + query.limit);
  }

  async purgeEvents(before: string): Promise<number> {
    const { events } = this.#data();
    const kept = events.filter((event) => event.row.at >= before);
    const purged = events.length - kept.length;
    events.splice(0, events.length, ...kept);
    return purged;
  }

  async listEvents(
    sandboxId: string,
    options: { since?: string; limit?: number } = {},
  ): Promise<EventRow[]> {
    const { since, limit } = options;
    if (limit !== undefined && !(Number.isSafeInteger(limit) && limit >= 0)) {
      throw new WarrenError("invalid_argument", `limit must be an integer >= 0, got ${limit}`);
    }
    // Stable sort: ties keep recording order.
    const events = this.#data()
      .events.map((e) => e.row)
      .filter((e) => e.sandboxId === sandboxId && (since === undefined || e.at >= since))
      .sort((a, b) => (a.at === b.at ? 0 : a.at < b.at ? -1 : 1));
    return (limit === undefined ? events : events.slice(Math.max(0, events.length - limit))).map(
      copy,
    );
  }

  async close(): Promise<void> {
    this.#open = false;
  }

  #data(): CatalogStore {
    if (!this.#open) throw new WarrenError("unavailable", "the catalog is closed");
    return this.#store;
  }
}

/** What a team's sandboxes other than `except` hold among `rows` (as the databases count). */
export function teamUsageIn(rows: Iterable<SandboxRow>, teamId: string, except = ""): TeamUsage {
  const usage = { sandboxes: 0, vcpus: 0, memoryMiB: 0, diskMiB: 0 };
  for (const row of rows) {
    if (row.teamId !== teamId || row.id === except || row.config.internal === true) continue;
    if ((HOLDING_STATES as readonly string[]).includes(row.state)) {
      usage.sandboxes += 1;
      usage.vcpus += row.vcpus;
      usage.memoryMiB += row.memoryMiB;
    }
    if (row.state !== "killed") usage.diskMiB += row.diskSizeMiB;
  }
  return usage;
}
