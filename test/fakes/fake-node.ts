/**
 * A node of fakes: the real Orchestrator over FakeVmmDriver, FakeSlotPool, FakeGuestAgent and
 * InMemoryCatalog, in a temporary data dir (snapshot and runtime directories are real
 * directories). No root, no VMs, no network namespaces. Restarts keep the catalog, the data
 * dir and the driver (VMMs outlive a crashed server, as QEMU processes do).
 */
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { GuestArtifacts } from "../../src/host-setup/index.js";
import {
  Orchestrator,
  type OrchestratorOptions,
  type PoolSettings,
  stateLayout,
} from "../../src/orchestrator/index.js";
import type { Logger } from "../../src/shared/index.js";
import type { SandboxServiceHarness } from "../contracts/sandbox-service.contract.js";
import { FakeDiskChains } from "./fake-disk-chains.js";
import { FakeGuestAgent } from "./fake-guest-agent.js";
import { fakeGuestImages } from "./fake-images.js";
import { FakeSlotPool } from "./fake-slot-pool.js";
import { FakeVmmDriver } from "./fake-vmm-driver.js";
import { FakeVolumeServer } from "./fake-volume-server.js";
import { InMemoryCatalog } from "./in-memory-catalog.js";
import { ServerLife } from "./server-life.js";

export interface LogLine {
  readonly level: "debug" | "info" | "warn" | "error";
  readonly event: string;
  readonly fields: Record<string, unknown>;
}

/** Keeps every line, so tests can look for an event. */
export class RecordingLogger implements Logger {
  readonly lines: LogLine[] = [];
  debug(fields: Record<string, unknown>, event: string) {
    this.lines.push({ level: "debug", event, fields });
  }
  info(fields: Record<string, unknown>, event: string) {
    this.lines.push({ level: "info", event, fields });
  }
  warn(fields: Record<string, unknown>, event: string) {
    this.lines.push({ level: "warn", event, fields });
  }
  error(fields: Record<string, unknown>, event: string) {
    this.lines.push({ level: "error", event, fields });
  }
  events(event: string): LogLine[] {
    return this.lines.filter((line) => line.event === event);
  }
}

export type FakeNodeSettings = Partial<
  Pick<
    OrchestratorOptions,
    | "maxForkCount"
    | "defaultTimeoutMs"
    | "flattenDepth"
    | "maxConcurrentStarts"
    | "startQueue"
    | "envdDeadlineMs"
    | "startPermitLeaseMs"
    | "metricsIntervalMs"
    | "teamLimits"
    | "keptVmms"
  >
> & {
  readonly maxSandboxes?: number;
  /** Free disk creates leave (WARREN_DISK_RESERVE_MIB) in the real temporary data dir; default 0. */
  readonly diskReserveMiB?: number;
  readonly maxSlots?: number;
  /** Warmed VMMs base keeps (`pool.baseFloor`); default 0. */
  readonly poolSize?: number;
  /** The rest of the pool's settings; default: no demand-sized pools, no memory pressure. */
  readonly pool?: Partial<PoolSettings>;
  /**
   * Its catalog: default a store of its own; a node of a cluster passes its view of the
   * cluster's store (`InMemoryCluster.catalog(nodeId)`), as a node's PostgresCatalog.
   */
  readonly catalog?: InMemoryCatalog;
  /**
   * VMMs outlive a crashed server in a keeper, and the next one re-adopts running
   * sandboxes (FakeVmmDriver.keeper); unset: they are orphans it kills.
   */
  readonly keeper?: boolean;
  /** What a graceful restart does with running sandboxes (OrchestratorOptions.onStop). */
  readonly onStop?: "pause" | "detach";
};

export class FakeNode {
  readonly driver = new FakeVmmDriver();
  readonly disks = new FakeDiskChains();
  readonly logger = new RecordingLogger();
  readonly volumes = new FakeVolumeServer();
  slots: FakeSlotPool;
  agent: FakeGuestAgent;
  catalog: InMemoryCatalog;
  orchestrator!: Orchestrator;
  /** The running server's life: what its orchestrator is handed is bound to it. */
  #life = new ServerLife();

  private constructor(
    readonly dataDir: string,
    readonly images: GuestArtifacts,
    readonly settings: FakeNodeSettings,
  ) {
    this.slots = new FakeSlotPool(settings.maxSlots);
    this.agent = new FakeGuestAgent(this.driver, this.slots);
    this.catalog = settings.catalog ?? new InMemoryCatalog();
    this.driver.keeper = settings.keeper === true;
  }

  static async start(settings: FakeNodeSettings = {}): Promise<FakeNode> {
    const dataDir = await mkdtemp(join(tmpdir(), "warren-fake-node-"));
    const node = new FakeNode(dataDir, await fakeGuestImages(dataDir), settings);
    await node.#startOrchestrator();
    return node;
  }

  get layout() {
    return stateLayout(this.dataDir);
  }

  /**
   * Stops gracefully (close) or as a crash would, then starts a new orchestrator. A crashed
   * server does nothing more (its pool warms no VMM, its timers reach nothing): the VMMs it
   * had spawned are orphans for the next one to kill.
   */
  async restart(mode: "graceful" | "crash"): Promise<void> {
    if (mode === "graceful") await this.orchestrator.close();
    else {
      await this.#life.crash();
      this.agent.stop();
    }
    // A crashed server's slots and the NFS servers in it are gone with it; its VMMs and files are not.
    if (mode === "crash") this.volumes.open.clear();
    this.catalog = await this.catalog.reopen();
    this.slots = new FakeSlotPool(this.settings.maxSlots);
    this.agent = new FakeGuestAgent(this.driver, this.slots);
    await this.#startOrchestrator();
  }

  /**
   * What is held beyond an idle node: VMMs alive, slots in use, runtime dirs, snapshot dirs
   * no template or sandbox needs. Pooled VMMs are part of idle (counted once the pool settled).
   */
  async leaks(): Promise<string[]> {
    // A VMM being warmed (a refill after the last create) is the pool's, but not counted yet.
    await this.orchestrator.settled();
    const pooled = this.orchestrator.status().pooledVmms ?? 0;
    const found: string[] = [];
    if (this.driver.alive.size > pooled) {
      found.push(...[...this.driver.alive].map((vm) => `vmm ${vm.id}`));
    }
    if (this.slots.inUse.size > pooled) found.push(`${this.slots.inUse.size} slots in use`);
    if (this.volumes.open.size > 0) found.push(`${this.volumes.open.size} volume servers open`);
    const runtimeDirs = await readdir(this.layout.runDir).catch(() => [] as string[]);
    if (runtimeDirs.length > pooled) found.push(...runtimeDirs.map((d) => `runtime dir ${d}`));
    const needed = new Set<string>();
    for (const template of await this.catalog.listTemplates()) needed.add(template.snapshotId);
    for (const row of await this.catalog.listSandboxes([
      "creating",
      "running",
      "pausing",
      "paused",
      "resuming",
    ])) {
      if (row.snapshotId) needed.add(row.snapshotId);
    }
    // A needed snapshot keeps its ancestors.
    for (const id of [...needed]) {
      let parent = (await this.catalog.getSnapshot(id))?.parentId;
      while (parent) {
        needed.add(parent);
        parent = (await this.catalog.getSnapshot(parent))?.parentId;
      }
    }
    for (const dir of await readdir(this.layout.snapshotsDir).catch(() => [] as string[])) {
      if (!needed.has(dir)) found.push(`snapshot ${dir}`);
    }
    return found;
  }

  /** The contract suite's view of this node. */
  harness(): SandboxServiceHarness {
    const node = this;
    return {
      get service() {
        return node.orchestrator;
      },
      get router() {
        return node.orchestrator;
      },
      templateId: "base",
      maxSandboxes: this.settings.maxSandboxes ?? 4,
      maxForkCount: this.settings.maxForkCount ?? 4,
      faults: {
        holdStarts: () => node.driver.holdStarts(),
        failNextPause: (how) => node.driver.failNextSnapshot(how),
      },
      restart: (mode) => node.restart(mode),
      leaks: () => node.leaks(),
      cleanup: () => node.close(),
    };
  }

  async close(): Promise<void> {
    await this.orchestrator.close().catch(() => {});
    for (const vm of [...this.driver.alive]) await vm.destroy();
    await rm(this.dataDir, { recursive: true, force: true });
  }

  async #startOrchestrator(): Promise<void> {
    const s = this.settings;
    const life = new ServerLife();
    this.#life = life;
    this.orchestrator = new Orchestrator({
      catalog: life.bind(this.catalog, { finishOnCrash: true }),
      driver: life.bind(this.driver, { finishOnCrash: true }),
      disks: life.bind(this.disks, { finishOnCrash: true }),
      slots: life.bind(this.slots),
      agent: life.bind(this.agent),
      images: this.images,
      layout: this.layout,
      limits: {
        maxSandboxes: s.maxSandboxes ?? 4,
        maxVcpus: 64,
        maxMemoryMiB: 64 * 1024,
        diskReserveMiB: s.diskReserveMiB ?? 0,
      },
      templateShape: { vcpus: 1, memoryMiB: 512 },
      maxForkCount: s.maxForkCount ?? 4,
      flattenDepth: s.flattenDepth ?? 0,
      maxConcurrentStarts: s.maxConcurrentStarts ?? 4,
      startQueue: s.startQueue,
      pool: {
        baseFloor: s.poolSize ?? 0,
        maxPerTemplate: 0,
        maxMemoryMiB: 64 * 1024,
        idleMs: 300_000,
        minAvailableMiB: 0,
        ...s.pool,
      },
      defaultTimeoutMs: s.defaultTimeoutMs ?? 60_000,
      accelerator: { accel: "tcg", reason: "fake driver" },
      logger: this.logger,
      envdDeadlineMs: s.envdDeadlineMs ?? 2_000,
      startPermitLeaseMs: s.startPermitLeaseMs,
      metricsIntervalMs: s.metricsIntervalMs,
      keptVmms: s.keptVmms,
      teamLimits: s.teamLimits,
      templateSettleMs: 0,
      volumes: this.volumes,
      onStop: () => s.onStop ?? "pause",
    });
    await this.orchestrator.start();
  }
}
