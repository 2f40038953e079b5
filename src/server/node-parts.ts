import { writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { Logger } from "pino";
import { registryImages, TemplateBuilds } from "../builds/index.js";
import {
  type Catalog,
  PostgresCatalog,
  PostgresCluster,
  type SecretCatalog,
  SqliteCatalog,
  type TeamCatalog,
  type VolumeCatalog,
  type WebhookCatalog,
} from "../catalog/index.js";
import { Deliverer, Webhooks } from "../events/index.js";
import { type GateSupplies, GuestServices, MAPPED_IDS } from "../guest-services/index.js";
import { ensureHostSetup, GUEST_ARTIFACTS, type GuestArtifacts } from "../host-setup/index.js";
import {
  installServicesRules,
  listenInNamespace,
  NetnsSlotPool,
  runCommand,
  type SlotPool,
  slotNamesFor,
} from "../network/index.js";
import {
  type CapacityLimits,
  EnvdGuestAgent,
  type EventSource,
  type GuestAgent,
  mountedVolumeIds,
  Orchestrator,
  type StateLayout,
  type VolumeServer,
} from "../orchestrator/index.js";
import { VOLUME_NFS_PORT } from "../protocol/index.js";
import { SecretBox, Secrets } from "../secrets/index.js";
import { type Config, hostResources } from "../shared/config.js";
import { WarrenError } from "../shared/index.js";
import { openSharedStore } from "../store/index.js";
import type { TeamSandboxes } from "../tenancy/index.js";
import { EgressCa } from "../tls/index.js";
import type { DiskChains, VmmDriver } from "../vmm/index.js";
import {
  createQemuDriver,
  KeeperClient,
  type QemuDriverConfig,
  type QemuDriverSetup,
  VmCgroups,
} from "../vmm/qemu/index.js";
import { GuestIds, Volumes } from "../volumes/index.js";
import { bundleEntry } from "./bundle-entry.js";
import { startEventsPurge, startKilledPurge } from "./catalog-purge.js";
import type { CloseStack } from "./close-stack.js";
import { joinCluster } from "./cluster-membership.js";
import { egressSupplies } from "./egress-supplies.js";
import { keeperSocketPath, launchKeeper } from "./keeper-launch.js";
import type { Late } from "./late.js";
import type { NodeMetrics } from "./prometheus.js";
import { teamSandboxes } from "./removed-teams.js";

/**
 * Benchmarks only (bench/lib/simulated-nodes.ts), set from code, never from a setting: what
 * a node drives, handed in instead of made, so that one machine hosts many nodes whose
 * server (API, orchestrator, catalog, cluster membership, cluster port) is the real one.
 * No host setup, QEMU, keeper, network namespaces, guest services or envd; volumes are not
 * served (creates that mount one are refused).
 */
export interface SimulatedMachine {
  readonly images: GuestArtifacts;
  readonly driver: VmmDriver;
  readonly disks: DiskChains;
  readonly slots: SlotPool;
  readonly agent: GuestAgent;
}

/** The VMM side the orchestrator takes: QEMU's (QemuDriverSetup), or a simulated machine's. */
interface NodeVmm {
  readonly driver: VmmDriver;
  readonly disks: DiskChains;
  readonly accelerator: { readonly accel: "kvm" | "tcg"; readonly reason: string };
}

/** What starting the node's parts needs, and where it hands them over. */
export interface NodePartsInput {
  readonly config: Readonly<Config>;
  /** The root logger: each part gets its component's child. */
  readonly logger: Logger;
  readonly layout: StateLayout;
  /** Where this node answers on its plain port. */
  readonly url: string;
  /** Its cluster port (registered with the cluster unless WARREN_NODE_URL says). */
  readonly clusterUrl?: string;
  /** Told what the start is doing (the API's 503 says it). */
  readonly step: (message: string) => void;
  readonly orchestrator: Late<Orchestrator>;
  readonly builds: Late<TemplateBuilds>;
  /** See QemuDriverConfig: benchmarks only. */
  readonly uncontainedForBenchmarks?: boolean;
  /** Benchmarks only: the machine handed in (SimulatedMachine), none made. */
  readonly simulatedForBenchmarks?: SimulatedMachine;
  /** Teams and their keys, bound as soon as the catalog is open. */
  readonly teams: Late<TeamCatalog>;
  /** A team's sandboxes for removing it, bound once the orchestrator runs. */
  readonly teamSandboxes: Late<TeamSandboxes>;
  /** Volumes, bound as soon as the catalog is open. */
  readonly volumes: Late<Volumes>;
  readonly secrets: Late<Secrets>;
  readonly webhooks: Late<Webhooks>;
  readonly metrics: NodeMetrics;
  /** Each part started is added, to be stopped with the server. */
  readonly closers: CloseStack;
  /** What the orchestrator's close does with running sandboxes (NodeServer.close's). */
  readonly onStop: () => "pause" | "detach";
}

/**
 * Starts what runs sandboxes, in order: the host and guest images, the VMM driver, the
 * catalog (and the cluster's, in one), the orchestrator with its base template, the template
 * builds; binds them to the front; then, in a cluster, joins it (gateways route here from then).
 */
export async function startNodeParts(input: NodePartsInput): Promise<void> {
  const { config, logger, closers } = input;
  const log = logger.child({ component: "server" });
  if (config.sharedStore && !config.databaseUrl) {
    throw new WarrenError(
      "invalid_argument",
      "WARREN_SHARED_STORE is a cluster setting: set WARREN_DATABASE_URL too, or unset it",
    );
  }
  const simulated = input.simulatedForBenchmarks;
  const images = simulated?.images ?? (await hostImages(config));
  input.step("choosing the accelerator");
  let orchestrator: Orchestrator | undefined;
  // Restores happen only once the orchestrator runs (it checksums captures).
  const vmm: NodeVmm = simulated
    ? { ...simulated, accelerator: { accel: "tcg", reason: "simulated for benchmarks" } }
    : await startVmm(input, images, async (dir) => orchestrator?.sealedFiles(dir));
  // The OOM killer takes a VM (VMM_OOM_SCORE_ADJ) long before the server supervising them.
  if (!simulated) {
    await writeFile("/proc/self/oom_score_adj", "-500").catch((err: unknown) =>
      log.warn({ err }, "server.oom_score_unchanged"),
    );
  }
  const catalogs = await openCatalogs(input);
  const { catalog, cluster, teams, volumes: volumeRows, secrets } = catalogs;
  const box = await SecretBox.open(input.layout.secretsDir);
  const teamSecrets = new Secrets({ catalog: secrets, box });
  input.secrets.bind(teamSecrets);
  const webhooks = bindWebhooks(input, catalogs.webhooks, box);
  // The CA every guest trusts for the domains of its network.rules (egress-gate/intercept.ts).
  const egressCa = await EgressCa.open(join(input.layout.secretsDir, "egress-ca"));
  const egress = await egressSupplies(egressCa, teamSecrets, config);
  input.teams.bind(teams);
  // Root's server: guests' files and the guest services process live in a range of its own.
  const ids = process.getuid?.() === 0 && !simulated ? new GuestIds(config.guestIdBase) : undefined;
  const volumes = new Volumes({
    catalog: volumeRows,
    dir: input.config.volumesDir ?? join(input.layout.dataDir, "volumes"),
    diskReserveMiB: config.diskReserveMiB,
    ...(ids && { ids }),
    limitOf: async (teamId) => (await teams.getTeam(teamId))?.limits.maxVolumeBytes,
    mountedBy: async (volumeId) => {
      const rows = cluster ? await cluster.listSandboxes() : await catalog.listSandboxes();
      return rows
        .filter((row) => row.state !== "killed" && mountedVolumeIds(row).includes(volumeId))
        .map((row) => row.id);
    },
  });
  await volumes.prepare();
  input.volumes.bind(volumes);
  input.step("starting the guest services");
  const services = simulated ? undefined : await startGuestServices(input, ids);
  const host = hostResources();
  const limits = capacityLimits(config, host);
  const started = newOrchestrator(input, {
    images,
    vmm,
    catalog,
    cluster,
    limits,
    host,
    teams,
    volumes,
    services,
    egress: { ca: egressCa, supplies: egress },
  });
  orchestrator = started;
  closers.add("orchestrator", () => started.close());
  input.metrics.follow(started);
  if (services) startDeliveries(input, catalogs.webhooks, webhooks, services, started);
  input.step("preparing the base template");
  await started.start();
  const purge = startKilledPurge(catalog, {
    retentionMs: config.killedRetentionMs,
    logger: logger.child({ component: "catalog" }),
  });
  closers.add("killed purge", () => purge.stop()); // before the orchestrator closes the catalog
  const eventsPurge = startEventsPurge(catalog, {
    retentionMs: config.eventsRetentionMs,
    logger: logger.child({ component: "catalog" }),
  });
  closers.add("events purge", () => eventsPurge.stop());
  const builds = newTemplateBuilds(input, {
    catalog,
    orchestrator: started,
    images,
    host,
    teams,
  });
  input.metrics.follow(builds);
  await builds.start();
  closers.add("template builds", () => builds.close());
  input.builds.bind(builds);
  input.teamSandboxes.bind(
    teamSandboxes(started, async (teamId) => {
      const rows = cluster ? await cluster.listSandboxes() : await catalog.listSandboxes();
      return rows.filter((row) => row.teamId === teamId && row.state !== "killed").length;
    }),
  );
  input.orchestrator.bind(started);
  if (cluster) {
    const url = config.nodeUrl ?? input.clusterUrl;
    if (!url) throw new WarrenError("internal", "a cluster member with no cluster port");
    // Registered once recovery is done and the API serves: gateways may route here now.
    const membership = await joinCluster({
      config,
      cluster,
      teams,
      orchestrator: started,
      limits,
      url,
      logger: logger.child({ component: "cluster" }),
    });
    closers.add("cluster membership", () => membership.stop());
  }
  log.info({ url: input.url }, "server.ready");
}

/** The guest kernel, initramfs, agent drive and rootfs host setup makes (or finds made). */
function hostImages(config: Readonly<Config>): Promise<GuestArtifacts> {
  return ensureHostSetup({
    dataDir: config.dataDir,
    imagesDir: config.imagesDir,
    only: [
      ...GUEST_ARTIFACTS,
      ...(config.codeInterpreter === "on" ? (["code-interpreter-rootfs"] as const) : []),
    ],
  });
}

async function startVmm(
  input: NodePartsInput,
  images: GuestArtifacts,
  sealedFiles: QemuDriverConfig["sealedFiles"],
): Promise<QemuDriverSetup> {
  const { config } = input;
  const keeper = await connectKeeper(input);
  const vmm = await createQemuDriver({
    accel: config.accel,
    kernel: images.kernel,
    initramfs: images.initramfs,
    accelCacheFile: join(config.dataDir, "accel.json"),
    imagesDir: dirname(images.baseRootfs),
    cgroupName: `${config.networkPrefix}-vms`,
    keeper,
    qmpDir: join(config.dataDir, "qmp"),
    vmmUidBase: config.vmmUidBase,
    vmmUidCount: config.vmmUidCount,
    tcgCacheMiB: config.tcgCacheMiB,
    guestAslr: config.guestAslr === "auto" ? undefined : config.guestAslr === "on",
    mergeMemory: config.ksm === "on",
    sealedFiles,
    logger: input.logger.child({ component: "vmm" }),
    uncontainedForBenchmarks: input.uncontainedForBenchmarks,
  });
  input.closers.add("vmm keeper", () => vmm.close());
  const { accel, reason, source } = vmm.accelerator;
  input.logger
    .child({ component: "server" })
    .info({ accelerator: accel, reason, source, qemu: vmm.qemuVersion }, "server.accelerator");
  return vmm;
}

/**
 * The keeper holding this node's VMMs (src/keeper): the one answering at `<data>/keeper`, or
 * one started now (WARREN_KEEPER=auto); with `external`, a supervisor's, waited for.
 */
async function connectKeeper(input: NodePartsInput): Promise<KeeperClient> {
  const { config, logger } = input;
  const place = {
    dir: join(config.dataDir, "keeper"),
    runDir: input.layout.runDir,
    ...(!input.uncontainedForBenchmarks && { cgroupName: `${config.networkPrefix}-vms` }),
    logLevel: config.logLevel,
  };
  const log = logger.child({ component: "vmm" });
  return KeeperClient.connect({
    socketPath: keeperSocketPath(place.dir),
    ...(config.keeper === "auto" && { launch: () => launchKeeper(place, log) }),
    logger: log,
  });
}

/** A team's webhooks for the API, bound as soon as the catalog is open. */
function bindWebhooks(input: NodePartsInput, catalog: WebhookCatalog, box: SecretBox): Webhooks {
  const privateHosts = new Set(input.config.webhookPrivateHosts);
  const webhooks = new Webhooks({ catalog, box, privateHosts });
  input.webhooks.bind(webhooks);
  return webhooks;
}

/** Sends the team's webhook deliveries, each POST made by the guest services process. */
function startDeliveries(
  input: NodePartsInput,
  catalog: WebhookCatalog,
  webhooks: Webhooks,
  services: GuestServices,
  events: EventSource,
): void {
  const deliverer = new Deliverer({
    catalog,
    secretOf: (webhook) => webhooks.secretOf(webhook),
    post: (request) => services.post(request),
    privateHosts: input.config.webhookPrivateHosts,
    logger: input.logger.child({ component: "webhooks" }),
  });
  deliverer.start();
  // A sandbox's event here is delivered at once, not at the next poll.
  const unfollow = events.onEvent((event) => {
    if (event.name.startsWith("sandbox.")) deliverer.wake();
  });
  input.closers.add("webhook deliveries", () => {
    unfollow();
    return deliverer.stop();
  });
}

/** The node's catalog: SQLite alone, or in a cluster the shared PostgreSQL, scoped to this node. */
async function openCatalogs(input: NodePartsInput): Promise<{
  catalog: Catalog;
  cluster?: PostgresCluster;
  teams: TeamCatalog;
  volumes: VolumeCatalog;
  secrets: SecretCatalog;
  webhooks: WebhookCatalog;
}> {
  const { config, layout } = input;
  if (!config.databaseUrl) {
    const catalog = await SqliteCatalog.open(layout.catalog);
    return {
      catalog,
      teams: catalog.teams,
      volumes: catalog.volumes,
      secrets: catalog.secrets,
      webhooks: catalog.webhooks,
    };
  }
  const connectionString = config.databaseUrl;
  const catalog = await PostgresCatalog.open({ connectionString, nodeId: config.nodeId });
  const cluster = await PostgresCluster.open({ connectionString });
  input.closers.add("cluster catalog", async () => {
    // Leaving, not dead: "down" set by the node itself reports nothing lost (its sandboxes
    // are paused, rows kept) and gateways route nothing here until it is back.
    await cluster
      .setNodeState(config.nodeId, "down")
      .catch((err: unknown) => input.logger.warn({ err }, "cluster.leave_failed"));
    await cluster.close();
  });
  return {
    catalog,
    cluster,
    teams: catalog.teams,
    volumes: catalog.volumes,
    secrets: catalog.secrets,
    webhooks: catalog.webhooks,
  };
}

/** This machine's cores and memory (`hostResources`), which the limits are shares of. */
type HostResources = ReturnType<typeof hostResources>;

function capacityLimits(config: Readonly<Config>, host: HostResources): CapacityLimits {
  return {
    maxSandboxes: config.maxSandboxes,
    maxVcpus: Math.floor(host.cpus * config.vcpuOvercommit),
    maxMemoryMiB: Math.floor(host.memoryMiB * config.memoryOvercommit),
    memoryReserveMiB: config.memoryReserveMiB,
    diskReserveMiB: config.diskReserveMiB,
  };
}

/** The guest services process's entry, beside the server's bundle (npm run build). */
const GUEST_SERVICES_ENTRY = bundleEntry("guest-services");

/**
 * The process that parses what guests send (their volumes' NFS): not the server, in the
 * guest id range's user namespace when the server is root, in a cgroup of its own bounding
 * its memory; stopped with the server.
 */
async function startGuestServices(
  input: NodePartsInput,
  ids: GuestIds | undefined,
): Promise<GuestServices> {
  const { config, closers, logger } = input;
  const cgroups = ids && VmCgroups.detect(`${config.networkPrefix}-services`);
  // What an earlier run left (its server died) goes first.
  await cgroups?.sweep();
  const cgroup = await cgroups?.create("guest-services", {
    memoryBytes: config.guestServicesMemoryMiB * 1024 * 1024,
    cpuQuotaUs: 100_000,
    cpuPeriodUs: 100_000,
    pids: 256,
  });
  // Taken over through a parser of its, the process still reaches no local port nor metadata.
  const removeRules =
    ids &&
    (await installServicesRules(runCommand, slotNamesFor(config.networkPrefix).ruleTag, {
      first: ids.base,
      last: ids.base + MAPPED_IDS - 1,
    }));
  const services = await GuestServices.start({
    entry: GUEST_SERVICES_ENTRY,
    ...(ids && { idBase: ids.base }),
    ...(cgroup && { cgroupProcs: cgroup.procs }),
    // Its own environment: nothing of the server's (database URL, keys, credentials).
    env: {
      PATH: process.env.PATH ?? "/usr/sbin:/usr/bin:/sbin:/bin",
      WARREN_LOG_LEVEL: config.logLevel,
    },
    logger: logger.child({ component: "server" }),
  }).catch(async (err: unknown) => {
    await cgroup?.remove();
    await removeRules?.();
    throw err;
  });
  closers.add("guest services", async () => {
    await services.close();
    await cgroup?.remove();
    await removeRules?.();
  });
  return services;
}

function newOrchestrator(
  input: NodePartsInput,
  parts: {
    images: GuestArtifacts;
    vmm: NodeVmm;
    catalog: Catalog;
    cluster?: PostgresCluster;
    limits: CapacityLimits;
    host: HostResources;
    teams: TeamCatalog;
    volumes: Volumes;
    /** None on a simulated machine. */
    services?: GuestServices;
    egress: { ca: EgressCa; supplies: GateSupplies };
  },
): Orchestrator {
  const { config, logger } = input;
  return new Orchestrator({
    catalog: parts.catalog,
    driver: parts.vmm.driver,
    disks: parts.vmm.disks,
    ...guestSide(input, parts),
    images: parts.images,
    layout: input.layout,
    limits: parts.limits,
    teamLimits: async (teamId) => (await parts.teams.getTeam(teamId))?.limits,
    templateShape: { vcpus: config.templateVcpus, memoryMiB: config.templateMemoryMiB },
    codeInterpreter: config.codeInterpreter === "on",
    defaultTimeoutMs: config.defaultTimeoutMs,
    maxForkCount: config.maxForkCount,
    flattenDepth: config.flattenDepth,
    maxConcurrentStarts: config.maxConcurrentStarts || parts.host.cpus * 2,
    startQueue: { maxQueued: config.startQueueDepth, maxWaitMs: config.startQueueWaitMs },
    pool: {
      baseFloor: config.poolSize,
      maxPerTemplate: config.poolMaxPerTemplate,
      maxMemoryMiB: config.poolMaxMemoryMiB,
      idleMs: config.poolIdleMs,
      minAvailableMiB: config.poolMinAvailableMiB,
    },
    keptVmms: { keepMs: config.pauseKeepMs, maxKept: config.pauseKeepMax },
    accelerator: { accel: parts.vmm.accelerator.accel, reason: parts.vmm.accelerator.reason },
    logger: logger.child({ component: "orchestrator" }),
    shared: parts.cluster && sharedSnapshots(input, parts.cluster),
    metricsIntervalMs: config.metricsIntervalMs,
    guestCaCertificate: parts.egress.ca.certificate,
    onStop: input.onStop,
  });
}

/**
 * What the orchestrator reaches guests through: network slots (each with its egress gate in
 * the guest services process), envd, and each sandbox's volumes on a socket in its slot's
 * namespace, for its guest alone; or a simulated machine's slots and agent, with no volumes.
 */
function guestSide(
  input: NodePartsInput,
  parts: { volumes: Volumes; services?: GuestServices; egress: { supplies: GateSupplies } },
): { slots: SlotPool; agent: GuestAgent; volumes?: VolumeServer } {
  const { config, logger } = input;
  const { services } = parts;
  const simulated = input.simulatedForBenchmarks;
  if (simulated || !services) {
    if (!simulated) throw new WarrenError("internal", "a node with no guest services");
    return { slots: simulated.slots, agent: simulated.agent };
  }
  return {
    slots: new NetnsSlotPool({
      size: config.slotPoolSize,
      baseCidr: config.networkCidr,
      ...slotNamesFor(config.networkPrefix),
      logger: logger.child({ component: "network" }),
      // Each slot's egress gate runs in the guest services process, not here.
      gates: services.gates(parts.egress.supplies),
    }),
    agent: new EnvdGuestAgent(),
    volumes: {
      serve: async (slot, ids, teamId) =>
        services.serveNfs(
          slot.netns,
          () => ({ fd: listenInNamespace(slot.netns, slot.gateway, VOLUME_NFS_PORT) }),
          await parts.volumes.exportFor(ids, teamId),
        ),
    },
  };
}

/** WARREN_SHARED_STORE, as snapshots publish to and fetch from it; none without it. */
function sharedSnapshots(input: NodePartsInput, cluster: PostgresCluster) {
  const { config } = input;
  if (!config.sharedStore) return undefined;
  const store = openSharedStore(config.sharedStore, {
    region: config.s3Region,
    ...(config.s3Endpoint && { endpoint: config.s3Endpoint, forcePathStyle: true }),
  });
  input.closers.add("shared store", () => store.close());
  return {
    publish: store.publish.bind(store),
    fetch: store.fetch.bind(store),
    delete: store.delete.bind(store),
    markPublished: (id: string) => cluster.markPublished(id),
    copiesMaxBytes: config.storeCacheMiB * 1024 * 1024,
  };
}

function newTemplateBuilds(
  input: NodePartsInput,
  parts: {
    catalog: Catalog;
    orchestrator: Orchestrator;
    images: GuestArtifacts;
    host: HostResources;
    teams: TeamCatalog;
  },
): TemplateBuilds {
  const { config } = input;
  const { host } = parts;
  return new TemplateBuilds({
    catalog: parts.catalog,
    host: parts.orchestrator,
    images: registryImages({
      cacheDir: join(dirname(parts.images.baseRootfs), "oci"),
      mirrors: config.registryMirrors,
      insecureRegistries: config.insecureRegistries,
      privateRegistries: config.privateRegistries,
    }),
    dir: join(config.dataDir, "builds"),
    logger: input.logger.child({ component: "builds" }),
    uploadLimitBytes: config.buildUploadLimitMiB * 1024 * 1024,
    uploadQuotaBytes: config.buildUploadsMaxMiB * 1024 * 1024,
    teamLimits: async (teamId) => (await parts.teams.getTeam(teamId))?.limits,
    uploadRetentionMs: config.buildUploadRetentionMs,
    diskReserveMiB: config.diskReserveMiB,
    stepTimeoutMs: config.buildStepTimeoutMs,
    readyTimeoutMs: config.buildReadyTimeoutMs,
    maxVcpus: host.cpus * 4,
    maxMemoryMiB: Math.floor(host.memoryMiB / 2),
  });
}
