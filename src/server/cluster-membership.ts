import type {
  ClusterCatalog,
  NodeLoad,
  NodeRegistration,
  NodeState,
  TeamCatalog,
} from "../catalog/index.js";
import type { CapacityLimits, Orchestrator } from "../orchestrator/index.js";
import type { Config } from "../shared/config.js";
import type { Logger } from "../shared/index.js";
import { killRemovedTeams } from "./removed-teams.js";

export interface MembershipOptions {
  readonly cluster: Pick<ClusterCatalog, "registerNode" | "heartbeat">;
  readonly node: NodeRegistration;
  /** This node's load now (the orchestrator's, plus whether it is draining). */
  readonly load: () => Promise<NodeLoad>;
  readonly intervalMs: number;
  readonly logger: Logger;
  /**
   * The catalog says the node was marked down (it was silent too long: gateways reported its
   * running sandboxes lost). Called before the node registers again, so that it first stops
   * the VMs of sandboxes the cluster no longer counts as running.
   */
  readonly onMarkedDown: () => Promise<void>;
  /** Called when an operator changes the node's state (e.g. to draining) between beats. */
  readonly onState?: (state: NodeState) => void;
}

export interface Membership {
  /** Stops the heartbeats (the node's row stays: a gateway marks it down once silent). */
  stop(): Promise<void>;
}

/**
 * A node's membership in a cluster: registers (after its restart recovery, so that what it
 * reports is true), then heartbeats its load every `intervalMs`. A heartbeat that finds the
 * node marked down reconciles first, then registers again: the node is back, and holds only
 * what the cluster thinks it holds.
 */
export async function startMembership(options: MembershipOptions): Promise<Membership> {
  const { cluster, node, logger } = options;
  await cluster.registerNode(node);
  logger.info({ nodeId: node.id, url: node.url, capacity: node.capacity }, "cluster.registered");
  let state: NodeState = "up";
  let stopped = false;
  let beating: Promise<void> = Promise.resolve();

  async function beat(): Promise<void> {
    const now = await cluster.heartbeat(node.id, await options.load());
    if (now === "down") {
      logger.warn({ nodeId: node.id }, "cluster.marked_down");
      await options.onMarkedDown();
      await cluster.registerNode(node);
      logger.info({ nodeId: node.id }, "cluster.registered_again");
      state = "up";
      return;
    }
    if (now !== state) {
      logger.info({ nodeId: node.id, from: state, to: now }, "cluster.node_state");
      state = now;
      options.onState?.(now);
    }
  }

  const timer = setInterval(() => {
    if (stopped) return;
    // One beat at a time: a slow database must not stack them.
    beating = beating.then(beat).catch((err: unknown) => {
      logger.warn({ err, nodeId: node.id }, "cluster.heartbeat_failed");
    });
  }, options.intervalMs);
  timer.unref();
  return {
    async stop() {
      stopped = true;
      clearInterval(timer);
      await beating;
    },
  };
}

export interface JoinInput {
  readonly config: Readonly<Config>;
  readonly cluster: ClusterCatalog;
  /** The cluster's teams: a team removed through another node loses its sandboxes here. */
  readonly teams: Pick<TeamCatalog, "getTeam">;
  readonly orchestrator: Orchestrator;
  /** What the node admits: registered as its capacity. */
  readonly limits: CapacityLimits;
  /** Where gateways reach the node: its cluster port (https), or WARREN_NODE_URL. */
  readonly url: string;
  readonly logger: Logger;
}

/** The node joins its cluster: registered with its capacity, heartbeats from its orchestrator. */
export function joinCluster(input: JoinInput): Promise<Membership> {
  const { config, orchestrator, limits, logger } = input;
  return startMembership({
    cluster: input.cluster,
    node: {
      id: config.nodeId,
      url: input.url,
      capacity: {
        vcpus: limits.maxVcpus,
        memoryMiB: limits.maxMemoryMiB,
        maxSandboxes: limits.maxSandboxes,
      },
    },
    load: async () => {
      await orchestrator.syncPaused();
      await killRemovedTeams(orchestrator, input.teams, logger);
      return { ...(await orchestrator.load()), draining: orchestrator.draining };
    },
    intervalMs: config.heartbeatMs,
    logger,
    onMarkedDown: async () => {
      await orchestrator.reconcile();
    },
    // A gateway also tells the node at once (the internal API); this catches up on changes
    // made while that call failed, or straight in the catalog.
    onState: (state) => {
      const change = state === "draining" ? orchestrator.drain() : orchestrator.undrain();
      change.catch((err: unknown) => logger.warn({ err }, "cluster.drain_failed"));
    },
  });
}
