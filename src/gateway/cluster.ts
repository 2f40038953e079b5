import type { ClusterCatalog, TeamCatalog } from "../catalog/index.js";

export type { NodeRow, NodeState, SandboxLocation } from "../catalog/index.js";

/**
 * What the gateway reads and changes in the cluster catalog (PostgresCluster): node
 * membership and where each sandbox lives. Nothing else: every call about a sandbox itself
 * is the node's, relayed.
 */
export type GatewayCluster = Pick<
  ClusterCatalog,
  "listNodes" | "setNodeState" | "markDownStale" | "locateSandbox" | "claimSandbox" | "teamUsage"
> & {
  /** Teams and their limits (team quotas across nodes). */
  readonly teams: Pick<TeamCatalog, "getTeam">;
};
