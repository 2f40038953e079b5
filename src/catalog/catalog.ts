/**
 * The catalog seam: what Warren remembers across restarts. `sqlite/` implements it for one
 * node; `postgres/` for many nodes sharing one database, each seeing its own sandboxes
 * (README: "Node scoping"). Rows are plain data: the catalog
 * knows nothing of VMs or HTTP. Methods are async so that both kinds fit one interface.
 */

/** A sandbox's lifecycle state (docs/lifecycle.md); killed rows are kept as its history. */
export type SandboxState =
  | "creating"
  | "running"
  | "pausing"
  | "paused"
  | "resuming"
  | "killing"
  | "killed";

export interface SandboxRow {
  readonly id: string;
  /** The team that owns it (teams.ts); only that team's keys reach it. */
  readonly teamId: string;
  readonly templateId: string;
  readonly alias?: string;
  readonly state: SandboxState;
  readonly clientId: string;
  readonly envdAccessToken?: string;
  readonly trafficAccessToken?: string;
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly diskSizeMiB: number;
  readonly metadata: Readonly<Record<string, string>>;
  readonly envVars: Readonly<Record<string, string>>;
  /** Opaque JSON the orchestrator owns (network settings, lifecycle, secure flag...). */
  readonly config: Readonly<Record<string, unknown>>;
  /** ISO 8601. startedAt orders listings; endAt is the TTL deadline. */
  readonly startedAt: string;
  readonly endAt: string;
  /** The snapshot a paused sandbox resumes from. */
  readonly snapshotId?: string;
  /** Why it ended (killed rows): "killed", "timeout", "lost", "failed: ...". */
  readonly endedReason?: string;
  readonly updatedAt: string;
}

export interface TemplateRow {
  readonly id: string;
  /** The team that owns it; absent: every team's (the built-in `base`, build layers). */
  readonly teamId?: string;
  /**
   * Names it is found by besides its id (e.g. "base"), in its team's namespace: unique within
   * that team, and within the global namespace for a template without a team (whose names
   * every team sees). Two teams may each have a template of the same name.
   */
  readonly aliases: readonly string[];
  /**
   * "base": built by Warren at start; "snapshot": captured from a sandbox; "build": a named
   * template from the build API (its snapshot is its `default` tag's build); "layer": a
   * template build's cached step (never listed).
   */
  readonly kind: TemplateKind;
  readonly snapshotId: string;
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly diskSizeMiB: number;
  readonly createdAt: string;
  /** Opaque JSON its maker owns (a build's env, user, workdir, start command...). */
  readonly config?: Readonly<Record<string, unknown>>;
}

export type TemplateKind = "base" | "snapshot" | "build" | "layer";

export type BuildStatus = "waiting" | "building" | "ready" | "error";

/** One run of the template build API: requested, then started with its steps. */
export interface BuildRow {
  readonly id: string;
  /** The team that requested it. */
  readonly teamId: string;
  /** The E2B template id it builds (the "build" template row once a build succeeded). */
  readonly templateId: string;
  /** The name the template is found by. */
  readonly name: string;
  /** Tags the build gets when it succeeds. */
  readonly tags: readonly string[];
  readonly status: BuildStatus;
  readonly vcpus: number;
  readonly memoryMiB: number;
  readonly diskSizeMiB: number;
  /** The snapshot a sandbox of this build restores (set when ready). */
  readonly snapshotId?: string;
  /** Cached layers (template ids) this build made; deleted with it when it fails. */
  readonly layers: readonly string[];
  /** Why it failed: E2B's BuildStatusReason. */
  readonly reason?: { readonly message: string; readonly step?: string };
  readonly createdAt: string;
  readonly updatedAt: string;
  readonly finishedAt?: string;
}

/** A template's tag: `name:tag` restores that build. */
export interface TagRow {
  readonly templateId: string;
  readonly tag: string;
  readonly buildId: string;
  readonly createdAt: string;
}

export interface SnapshotRow {
  readonly id: string;
  /** Directory holding meta.json, device state, memory diff/image and frozen disk. */
  readonly dir: string;
  /** The sandbox it was captured from, if any. */
  readonly sandboxId?: string;
  /** The snapshot this one depends on (its memory image or backing disk), if any. */
  readonly parentId?: string;
  /** "template", "pause", "fork", "named". */
  readonly kind: string;
  readonly names: readonly string[];
  /** GuestImages fingerprint it was taken with (a rebuilt image set invalidates it). */
  readonly imagesFingerprint: string;
  readonly createdAt: string;
  /** Its files as sealed at capture, with checksums: a restore checks them first. */
  readonly files?: readonly SnapshotFileRecord[];
  /**
   * When its files were published to the cluster's shared store (ClusterCatalog
   * markPublished), so another node can fetch and restore them. Only the PostgreSQL catalog
   * keeps it; putSnapshot ignores it (the flag is markPublished's alone).
   */
  readonly publishedAt?: string;
  /**
   * Set on another node's snapshot alone: the node that captured it and holds its files (the
   * PostgreSQL catalog's getSnapshot returns every node's). putSnapshot ignores it.
   */
  readonly nodeId?: string;
}

/** One sealed file of a snapshot (the VMM driver's SnapshotFile). */
export interface SnapshotFileRecord {
  readonly name: string;
  readonly bytes: number;
  readonly sha256: string;
}

export interface EventRow {
  readonly at: string;
  readonly sandboxId: string;
  /** Event name, e.g. "sandbox.created", "sandbox.paused". */
  readonly kind: string;
  readonly detail?: Readonly<Record<string, unknown>>;
  /**
   * E2B's lifecycle event type when the event is one (`sandbox.lifecycle.paused`, ...): such
   * events are listed by team (listLifecycleEvents), each under an id of its own.
   */
  readonly lifecycle?: string;
}

/** A lifecycle event as a team lists it: its history entry, its id, the sandbox it is about. */
export interface LifecycleEventRow {
  /** A UUID, given when it was recorded. */
  readonly id: string;
  readonly at: string;
  readonly lifecycle: string;
  readonly kind: string;
  readonly detail?: Readonly<Record<string, unknown>>;
  readonly sandbox: Pick<
    SandboxRow,
    "id" | "teamId" | "templateId" | "metadata" | "startedAt" | "vcpus" | "memoryMiB"
  > & { readonly snapshotId?: string };
}

/** Which lifecycle events a team lists, newest first unless `ascending`. */
export interface LifecycleEventQuery {
  /** Absent: every team's (the admin's view). */
  readonly teamId?: string;
  /** One sandbox's only. */
  readonly sandboxId?: string;
  /** Of these lifecycle types only (absent or empty: every type). */
  readonly types?: readonly string[];
  readonly offset: number;
  readonly limit: number;
  readonly ascending: boolean;
}

export type SandboxPatch = Partial<Omit<SandboxRow, "id">>;

/** Keys a patch may not clear (given as undefined): every catalog refuses with invalid_argument. */
export const REQUIRED_SANDBOX_KEYS = [
  "teamId",
  "templateId",
  "state",
  "clientId",
  "vcpus",
  "memoryMiB",
  "diskSizeMiB",
  "metadata",
  "envVars",
  "config",
  "startedAt",
  "endAt",
] as const satisfies readonly (keyof SandboxPatch)[];

/** States in which a sandbox holds CPU and memory: what a team's running quotas count. */
export const HOLDING_STATES = [
  "creating",
  "running",
  "pausing",
  "resuming",
] as const satisfies readonly SandboxState[];

/** What a team's sandboxes hold, as its quotas count it. */
export interface TeamUsage {
  /** Sandboxes in a HOLDING_STATE. */
  readonly sandboxes: number;
  readonly vcpus: number;
  readonly memoryMiB: number;
  /** Disk of every sandbox not killed (a paused one keeps its disk). */
  readonly diskMiB: number;
}

/**
 * A write that a team's quotas admit: called with what the team's other sandboxes hold, on
 * every node the catalog's database serves (Warren's own, `config.internal`, left out),
 * inside the write and under a lock no other admission of that team passes; it throws to
 * refuse the write. So concurrent creates and resumes on any nodes, through any gateways,
 * are admitted one at a time against one count.
 */
export type TeamAdmit = (usage: TeamUsage) => void;

export interface Catalog {
  /** Inserts a new sandbox; with `admit`, only once its team's quotas admit it (see TeamAdmit). */
  insertSandbox(row: SandboxRow, admit?: TeamAdmit): Promise<void>;
  /**
   * Applies the patch and sets updatedAt; returns the new row, undefined when the id is
   * unknown. With `admit`, only once the team's quotas admit the sandbox (a resume).
   */
  updateSandbox(
    id: string,
    patch: SandboxPatch,
    admit?: TeamAdmit,
  ): Promise<SandboxRow | undefined>;
  getSandbox(id: string): Promise<SandboxRow | undefined>;
  /**
   * A sandbox on any node (PostgreSQL: not scoped to this node's, as getSandbox is): the
   * source of another node's snapshot, whose envd token that snapshot's guest holds and
   * whose settings the children of a fork spilled here take.
   */
  findSandbox(id: string): Promise<SandboxRow | undefined>;
  /** Sandboxes in the given states (all when absent), ordered by startedAt then id. */
  listSandboxes(states?: readonly SandboxState[]): Promise<SandboxRow[]>;
  deleteSandbox(id: string): Promise<void>;
  /**
   * Forgets the secrets of sandboxes killed before `killedBefore` (ISO 8601, compared with
   * their updatedAt, which the kill set last): env vars become `{}`, the traffic token and
   * the envd access token are cleared, except the envd token of a sandbox some snapshot was
   * captured from (the envd inside that snapshot holds it; a create from it presents it).
   * The rows stay (id, template, reason it ended, metadata: its history), updatedAt included.
   * Returns how many rows it changed; a second call with the same bound changes none.
   */
  purgeKilledSecrets(killedBefore: string): Promise<number>;

  /**
   * Inserts or replaces by id. An alias another template of the same namespace (its team,
   * or the global one) holds moves to this one; another namespace's are never touched.
   */
  putTemplate(row: TemplateRow): Promise<void>;
  /**
   * A template by id or alias as `teamId` sees it: that team's templates and the global
   * ones, never another team's (its ids and names read as unknown). Without `teamId`
   * (Warren's own lookups: layers, built-in templates, a build's result): any template by
   * id, the global ones by alias. An id beats an alias; a global alias beats a team's.
   */
  getTemplate(idOrAlias: string, teamId?: string): Promise<TemplateRow | undefined>;
  listTemplates(): Promise<TemplateRow[]>;
  deleteTemplate(id: string): Promise<void>;

  /** Inserts or replaces by id. */
  putBuild(row: BuildRow): Promise<void>;
  getBuild(id: string): Promise<BuildRow | undefined>;
  /** A template's builds (all when absent), oldest first. */
  listBuilds(templateId?: string): Promise<BuildRow[]>;
  deleteBuild(id: string): Promise<void>;

  /** Inserts or moves the tag to `buildId`. */
  putTag(row: TagRow): Promise<void>;
  getTag(templateId: string, tag: string): Promise<TagRow | undefined>;
  /** A template's tags, ordered by tag. */
  listTags(templateId: string): Promise<TagRow[]>;
  deleteTag(templateId: string, tag: string): Promise<void>;

  putSnapshot(row: SnapshotRow): Promise<void>;
  getSnapshot(id: string): Promise<SnapshotRow | undefined>;
  /** Filter by source sandbox and/or name; ordered by createdAt then id. */
  listSnapshots(filter?: { sandboxId?: string; name?: string }): Promise<SnapshotRow[]>;
  deleteSnapshot(id: string): Promise<void>;
  /** Ids of snapshots whose parentId is `id`, of templates built on it and sandboxes paused on it. */
  snapshotUsers(
    id: string,
  ): Promise<{ snapshots: string[]; templates: string[]; sandboxes: string[] }>;

  /** Records `event`; a lifecycle one gets its id and the team of the sandbox it is about. */
  recordEvent(event: EventRow): Promise<void>;
  /** Most recent last; `since` inclusive; at most `limit` (newest kept). */
  listEvents(sandboxId: string, options?: { since?: string; limit?: number }): Promise<EventRow[]>;
  /**
   * A team's lifecycle events (on every node, where the catalog is shared), ordered by time
   * then recording order; Warren's internal VMs' are never listed.
   */
  listLifecycleEvents(query: LifecycleEventQuery): Promise<LifecycleEventRow[]>;
  /** Deletes the events recorded before `before` (ISO time); returns how many. */
  purgeEvents(before: string): Promise<number>;

  close(): Promise<void>;
}
