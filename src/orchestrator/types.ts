/**
 * What the orchestrator offers the API and the proxy. Framework-free: the API turns HTTP
 * into these calls, the proxy asks `SandboxRouter` where a sandbox's port is. Errors are
 * WarrenErrors (src/shared) whose `reason` says what happened (docs/errors.md), e.g.
 * sandbox_not_found, sandbox_paused, capacity_exhausted, not_ready.
 */

import type { LifecycleEventQuery, LifecycleEventRow, TemplateRow } from "../catalog/index.js";
import type { NodeView } from "../protocol/index.js";
import type { ErrorReason } from "../shared/index.js";

/** The two states the E2B API knows. */
export type PublicState = "running" | "paused";

export interface SandboxNetwork {
  /** CIDRs (or addresses) always allowed out; allow wins over deny. */
  readonly allowOut: readonly string[];
  readonly denyOut: readonly string[];
  /** False: ports other than envd's need the `e2b-traffic-access-token` header. */
  readonly allowPublicTraffic: boolean;
  /** Upstream Host header for app ports; `${PORT}` is replaced by the port. */
  readonly maskRequestHost?: string;
  /** Guest ports that serve HTTPS: the proxy speaks TLS to them (certificate not verified). */
  readonly httpsPorts?: readonly number[];
  /**
   * E2B's `network.rules`: per domain (`api.example.com`, `*.example.com`, lower case), the
   * headers set on the sandbox's HTTPS requests there; values may name the team's secrets
   * (`${e2b.secrets.NAME}`), filled in by the node's egress gate.
   */
  readonly rules?: SandboxNetworkRules;
}

export type SandboxNetworkRules = Readonly<
  Record<
    string,
    readonly { readonly transform?: { readonly headers?: Readonly<Record<string, string>> } }[]
  >
>;

export interface SandboxLifecycle {
  /** What the TTL does when it runs out. */
  readonly onTimeout: "kill" | "pause";
  /** Traffic through the proxy to a paused sandbox resumes it. */
  readonly autoResume: boolean;
  /**
   * What a timeout pause keeps: the memory too (default), or the filesystem only (E2B's
   * `autoPauseMemory: false`), in which case connect cold-boots it from its disk.
   */
  readonly keepMemory?: boolean;
}

export interface PauseOptions {
  /** false: filesystem only, the next resume cold-boots from the disk. Default true. */
  readonly keepMemory?: boolean;
}

export interface ResumeOptions {
  /**
   * Cold-boot from the sandbox's disk even when its memory was kept (E2B's `onResume:
   * 'reboot'`). A sandbox paused without memory always reboots.
   */
  readonly reboot?: boolean;
}

export interface CreateSandboxInput {
  /** The team it is created for: it owns the sandbox, and may use only its own templates and shared ones. */
  readonly teamId: string;
  /** Template name, alias or id (a snapshot id is a template id too). */
  readonly templateId: string;
  readonly timeoutMs: number;
  readonly metadata: Readonly<Record<string, string>>;
  readonly envVars: Readonly<Record<string, string>>;
  readonly lifecycle: SandboxLifecycle;
  readonly network: SandboxNetwork;
  readonly allowInternetAccess: boolean;
  /** Secured envd: an access token is issued and required. */
  readonly secure: boolean;
  /** Warren's own VM (a template build's): never listed. */
  readonly internal?: boolean;
  /** The team's volumes to mount, found by name (the API checks they are the team's). */
  readonly volumeMounts?: readonly SandboxVolumeMount[];
}

/** A volume mounted in a sandbox: which (its id and name) and where in the guest. */
export interface SandboxVolumeMount {
  readonly volumeId: string;
  readonly name: string;
  /** Absolute, normalized. */
  readonly path: string;
}

export interface SandboxInfo {
  readonly sandboxId: string;
  /** The team that owns it. */
  readonly teamId: string;
  readonly templateId: string;
  readonly alias?: string;
  readonly clientId: string;
  readonly state: PublicState;
  readonly metadata: Readonly<Record<string, string>>;
  readonly startedAt: Date;
  readonly endAt: Date;
  readonly cpuCount: number;
  readonly memoryMiB: number;
  readonly diskSizeMiB: number;
  readonly envdVersion: string;
  readonly envdAccessToken?: string;
  readonly trafficAccessToken?: string;
  readonly network: SandboxNetwork;
  readonly allowInternetAccess: boolean;
  readonly lifecycle: SandboxLifecycle;
  readonly volumeMounts: readonly { readonly name: string; readonly path: string }[];
}

export interface ListFilter {
  /** Only this team's; absent: every team's (the admin's view). */
  readonly teamId?: string;
  /** Absent: both. */
  readonly states?: readonly PublicState[];
  /** AND-ed exact matches. */
  readonly metadata?: Readonly<Record<string, string>>;
  /** Template id or alias. */
  readonly template?: string;
  readonly startedAfter?: Date;
}

/** One sample of envd's /metrics (E2B's SandboxMetric, times as Dates, sizes in bytes). */
export interface SandboxMetric {
  readonly timestamp: Date;
  readonly cpuCount: number;
  readonly cpuUsedPct: number;
  readonly memUsed: number;
  readonly memTotal: number;
  readonly memCache: number;
  readonly diskUsed: number;
  readonly diskTotal: number;
}

export interface SandboxLogEntry {
  readonly timestamp: Date;
  readonly level: "debug" | "info" | "warn" | "error";
  readonly message: string;
  /**
   * Where the line comes from: "lifecycle" (orchestrator events), "envd" (the agent's own
   * log) or "console" (the guest's serial console).
   */
  readonly source: "lifecycle" | "envd" | "console";
}

/** PUT /sandboxes/{id}/network: replace-all for the fields given. */
export interface NetworkUpdate {
  readonly allowOut?: readonly string[];
  readonly denyOut?: readonly string[];
  readonly rules?: SandboxNetworkRules;
  readonly allowInternetAccess?: boolean;
}

export interface ForkInput {
  /** Children to make, 1..maxForkCount. */
  readonly count: number;
  /** TTL of each child; absent: the default TTL. */
  readonly timeoutMs?: number;
  /** Merged over the source's metadata for every child. */
  readonly metadata?: Readonly<Record<string, string>>;
}

/** One child of a fork: started, or why not (the API turns it into E2B's SandboxForkResult). */
export type ForkResult =
  | { readonly sandbox: SandboxInfo }
  | { readonly error: { readonly reason: ErrorReason; readonly message: string } };

/** A fork larger than this node: `local` children start here, the rest on other nodes. */
export interface SpillingForkInput extends ForkInput {
  /** Children to start here, 0..count; the others are `spilled`. */
  readonly local: number;
}

/** A child of a spilling fork: as ForkResult, or left to another node with the capture to start from. */
export type SpillingForkResult = ForkResult | { readonly spilled: { readonly snapshotId: string } };

/** A persistent snapshot: a template made from a sandbox's captured state. */
export interface SnapshotInfo {
  /** The template's raw id ([a-z0-9]+). */
  readonly templateId: string;
  /** The team that owns it (its sandbox's). */
  readonly teamId?: string;
  /** Usable as `templateID` in create: `<name or template id>:default`. */
  readonly snapshotId: string;
  readonly names: readonly string[];
  readonly sandboxId?: string;
  readonly createdAt: Date;
}

/** One sandbox's life: started, and ended unless it still runs or is paused. */
export interface SandboxSpan {
  readonly startedAt: Date;
  readonly endedAt?: Date;
}

/** A node's load as its cluster heartbeats report it (Orchestrator.load()). */
export interface NodeLoad {
  readonly sandboxes: number;
  readonly vcpusUsed: number;
  readonly memoryMiBUsed: number;
  /** Templates (ids and aliases) with a warm VMM ready: a create of one is a pool take. */
  readonly warmTemplates: readonly string[];
}

/** Where a live sandbox came from (the dashboard's fork trees). */
export interface SandboxLineage {
  readonly sandboxId: string;
  readonly templateId: string;
  /** The sandbox it was forked from, or whose persistent snapshot it started from. */
  readonly parentId?: string;
  /** fork: a child of `parentId`'s fork; snapshot: from its persistent snapshot; template. */
  readonly via: "fork" | "snapshot" | "template";
  /** The capture it stands on (a fork's: every child of one fork shares it). */
  readonly snapshotId?: string;
}

/**
 * What the node holds now, for its Prometheus gauges, the dashboard and `warren top`: the
 * body of `GET /node` (protocol's NodeView) but the server's own status.
 */
export type NodeStats = Omit<NodeView, "status" | "accelerator">;

export interface ServerStatus {
  /**
   * Only `ready` serves sandboxes; the others answer 503: `starting` (host setup, base
   * template), `stopping` (shutdown, sandboxes being paused), `failed` (the start failed).
   */
  readonly phase: "starting" | "ready" | "stopping" | "failed";
  readonly accelerator?: "kvm" | "tcg";
  /** Why the accelerator was chosen (probe result or configuration). */
  readonly acceleratorReason?: string;
  readonly message?: string;
  /** Warmed VMMs ready for creates. */
  readonly pooledVmms?: number;
}

/** Everything the E2B API routes need. */
export interface SandboxService {
  status(): ServerStatus;
  /** What the node holds: sandboxes by state, warm pools, capacity (the dashboard's node view). */
  stats(): NodeStats;
  /** Where each running or paused sandbox came from (the dashboard's fork trees). */
  lineage(): Promise<SandboxLineage[]>;
  /**
   * When each of the team's sandboxes on this node started and (killed ones) ended, kept
   * rows included: its concurrency and start rate over time (E2B's team metrics).
   */
  teamHistory(teamId: string): Promise<SandboxSpan[]>;
  create(input: CreateSandboxInput): Promise<SandboxInfo>;
  /** Throws not_found for unknown or killed ids. */
  get(sandboxId: string): SandboxInfo;
  /** Running and paused sandboxes matching the filter, oldest first (startedAt, then id). */
  list(filter: ListFilter): SandboxInfo[];
  kill(sandboxId: string): Promise<void>;
  /** conflict when already paused. */
  pause(sandboxId: string, options?: PauseOptions): Promise<void>;
  /**
   * Resumes a paused sandbox (resumed: true) or extends a running one's TTL, never
   * shortening it. `timeoutMs` absent: the default TTL.
   */
  connect(
    sandboxId: string,
    timeoutMs: number | undefined,
    options?: ResumeOptions,
  ): Promise<{ sandbox: SandboxInfo; resumed: boolean }>;
  /** Deprecated route: conflict when the sandbox is running. */
  resume(
    sandboxId: string,
    timeoutMs: number | undefined,
    autoPause?: boolean,
    options?: ResumeOptions,
  ): Promise<SandboxInfo>;
  /** Replaces the deadline with now + timeoutMs (may shorten). */
  setTimeout(sandboxId: string, timeoutMs: number): Promise<void>;
  /** Extends the deadline to now + durationMs when that is later. */
  refresh(sandboxId: string, durationMs: number): Promise<void>;
  metrics(sandboxId: string, window: { start?: Date; end?: Date }): Promise<SandboxMetric[]>;
  logs(sandboxId: string, options: { start?: Date; limit?: number }): Promise<SandboxLogEntry[]>;
  /**
   * A team's lifecycle events (E2B's `GET /events/sandboxes`), of sandboxes live or long
   * gone, for as long as they are kept; on every node where the catalog is shared.
   */
  lifecycleEvents(query: LifecycleEventQuery): Promise<LifecycleEventRow[]>;
  updateNetwork(sandboxId: string, update: NetworkUpdate): Promise<void>;
  /**
   * Captures the sandbox once (a running source is stopped only for the capture and keeps
   * running; a paused one is not resumed) and starts `count` children from the capture.
   * not_found for the source; each child's failure is reported in its own result.
   */
  fork(sandboxId: string, input: ForkInput): Promise<ForkResult[]>;
  /**
   * `count` children of a persistent snapshot (by id or name, as `teamId` sees it), each as a
   * fork's child from its capture: no live parent needed. template_not_found when it is none.
   */
  forkSnapshot(
    snapshot: string,
    teamId: string | undefined,
    input: ForkInput,
  ): Promise<ForkResult[]>;
  /** A persistent snapshot of the sandbox, usable as a template. */
  createSnapshot(sandboxId: string, input: { name?: string }): Promise<SnapshotInfo>;
  /** Persistent snapshots, oldest first; `teamId`: only that team's. */
  listSnapshots(filter: {
    sandboxId?: string;
    name?: string;
    teamId?: string;
  }): Promise<SnapshotInfo[]>;
  /**
   * Deletes a snapshot template by id or name. not_found when unknown; conflict, naming
   * them, while sandboxes still run on it; invalid_argument for the built-in base.
   */
  deleteTemplate(templateId: string, teamId?: string): Promise<void>;
}

/**
 * What only the cluster asks of a node (the internal node API, called by gateways, never by
 * tenants): the two halves of a fork larger than one node, taking in a paused sandbox moved
 * here, and draining.
 */
export interface ClusterNodeService {
  /**
   * Captures the sandbox once, starts `local` children here and publishes the capture to the
   * shared store; the other children are `spilled` entries naming it (or errors, when it
   * could not be published), for other nodes to start with `forkFromCapture`.
   */
  forkSpilling(sandboxId: string, input: SpillingForkInput): Promise<SpillingForkResult[]>;
  /**
   * Children of another node's sandbox, from the fork capture it spilled (`snapshotId`,
   * fetched from the shared store). invalid_argument when that is no capture of the sandbox.
   */
  forkFromCapture(sandboxId: string, snapshotId: string, input: ForkInput): Promise<ForkResult[]>;
  /**
   * Takes in a paused sandbox a gateway moved here (ClusterCatalog.claimSandbox), its
   * snapshot fetched, so that the connect or resume that follows only restores it.
   * sandbox_not_found unless the catalog has it paused on this node.
   */
  adopt(sandboxId: string): Promise<void>;
  /** Takes no new sandboxes; pauses the running ones and publishes every paused one's snapshot. */
  drain(): Promise<void>;
  /** Takes new sandboxes again. */
  undrain(): Promise<void>;
}

/** A template to boot cold from a root filesystem image (a build's first layer). */
export interface BootTemplateInput {
  readonly id: string;
  readonly kind: TemplateRow["kind"];
  readonly aliases: readonly string[];
  readonly rootfs: string;
  readonly shape: {
    readonly vcpus: number;
    readonly memoryMiB: number;
    readonly diskSizeMiB?: number;
  };
  readonly config?: TemplateRow["config"];
}

/**
 * What template builds need of the node besides `SandboxService`: build VMs (internal
 * sandboxes), their envd, templates captured from them or booted cold, and dropping them.
 */
export interface TemplateHost {
  /** The node's default machine shape (what `base` was built with). */
  readonly templateShape: { readonly vcpus: number; readonly memoryMiB: number };
  /** The guest images' fingerprint: a cache key part (a new envd or kernel is a new base). */
  readonly imagesFingerprint: string;
  /** The base root filesystem image. */
  readonly baseRootfs: string;
  /**
   * A template by id, name or `name:tag` (template_not_found), as `teamId` sees it: its own
   * and the shared ones (absent: any).
   */
  findTemplate(reference: string, teamId?: string): Promise<TemplateRow>;
  /** Where the host reaches a running sandbox's envd, and its access token. */
  guestEndpoint(sandboxId: string): { host: string; accessToken?: string };
  captureTemplate(
    sandboxId: string,
    template: Pick<TemplateRow, "id" | "kind" | "aliases" | "config" | "teamId">,
  ): Promise<TemplateRow>;
  bootTemplate(input: BootTemplateInput): Promise<TemplateRow>;
  /** Deletes a template of any kind but base, and its snapshot data when nothing else uses it. */
  dropTemplate(template: TemplateRow): Promise<void>;
}

/** Where the proxy sends a sandbox's traffic. */
export interface ProxyRoute {
  readonly sandboxId: string;
  /** The sandbox's address as the host reaches it (its network slot). */
  readonly host: string;
  readonly port: number;
  readonly trafficAccessToken?: string;
  readonly allowPublicTraffic: boolean;
  readonly maskRequestHost?: string;
  /** The port serves HTTPS (the sandbox's `httpsPorts`): the proxy speaks TLS to it. */
  readonly https?: boolean;
  /** The token envd wants: the proxy's loopback tunnel through envd presents it. */
  readonly envdAccessToken?: string;
}

/** What a sandbox asks of a request to the port routed (checked by the proxy). */
export type RouteAccess = Pick<
  ProxyRoute,
  "sandboxId" | "allowPublicTraffic" | "trafficAccessToken" | "envdAccessToken"
>;

/**
 * Whether a request may wake a paused sandbox: it carries what the sandbox asks of traffic
 * to that port (E2B's auto-resume checks: the traffic token on a private sandbox's app
 * ports, envd's token on a secure sandbox's envd port). Asked before any resume.
 */
export type WakeCheck = (access: RouteAccess) => boolean;

export type RouteResult =
  | { readonly kind: "ok"; readonly route: ProxyRoute }
  /** Unknown, killed, or paused without autoResume: 502 "The sandbox was not found". */
  | { readonly kind: "not_found" }
  /** Paused with autoResume, but the request may not wake it (WakeCheck): 403, still paused. */
  | { readonly kind: "wake_refused" }
  /** Mid-transition (pausing, killing): 409. */
  | { readonly kind: "conflict"; readonly message: string };

export interface SandboxRouter {
  /**
   * Resolves a sandbox's port, resuming a paused sandbox with autoResume first when
   * `mayWake` lets the request wake it.
   */
  route(sandboxId: string, port: number, mayWake: WakeCheck): Promise<RouteResult>;
  /**
   * Called when a sandbox stops serving traffic (paused, killed, crashed): the proxy then
   * cuts its open streams and drops its connection pool. Returns an unsubscribe function.
   */
  onSandboxStopped(listener: (sandboxId: string) => void): () => void;
  /**
   * The live sandbox whose envd access token satisfies `matches` (a signed file URL that
   * names no sandbox is checked against each), or undefined.
   */
  sandboxWithToken(matches: (envdAccessToken: string) => boolean): string | undefined;
}
