import { WarrenError } from "../shared/index.js";
import type { Caller } from "../tenancy/index.js";
import type { SandboxLocation } from "./cluster.js";
import type { NodeTarget } from "./forward.js";
import { type RelocateOptions, relocatePaused } from "./relocate.js";

export interface Located {
  readonly target: NodeTarget;
  readonly location: SandboxLocation;
}

/** Which node a call goes to: the node holding a sandbox, or the one serving templates. */
export class SandboxLocator {
  constructor(private readonly o: RelocateOptions) {}

  /**
   * Where a sandbox is, or why it cannot be reached. `resuming`: a resume or connect, which
   * moves a paused sandbox off a node that is down or draining (relocatePaused).
   */
  /**
   * Where the sandbox is, for `caller`: another team's sandbox reads as unknown, before
   * anything is moved or relayed (a node's own check would come too late for a relocation
   * or a fork spread over nodes with the cluster's credentials).
   */
  async locate(sandboxId: string, caller: Caller, resuming = false): Promise<Located> {
    const { cluster } = this.o;
    let location = await cluster.locateSandbox(sandboxId);
    if (location && caller.teamId !== undefined && location.teamId !== caller.teamId) {
      location = undefined;
    }
    if (resuming && location?.state === "paused" && location.nodeState !== "up") {
      const moved = await relocatePaused(sandboxId, location, this.o);
      if (moved) return { target: moved, location };
      location = await cluster.locateSandbox(sandboxId);
    }
    return { target: reachable(sandboxId, location), location: location as SandboxLocation };
  }

  /** Template and snapshot-template calls go to one node: the up node first by id. */
  async templateNode(): Promise<NodeTarget> {
    const up = (await this.o.directory.nodes()).filter((node) => node.state === "up");
    const node = up.sort((a, b) => (a.id < b.id ? -1 : 1))[0];
    if (!node) throw new WarrenError("no_nodes", "no node server is up to serve templates");
    return { nodeId: node.id, url: node.url };
  }
}

/** The node to relay to, or why there is none: gone, lost with its node, or on a node down. */
function reachable(sandboxId: string, location: SandboxLocation | undefined): NodeTarget {
  if (!location) throw new WarrenError("sandbox_not_found", `sandbox ${sandboxId} not found`);
  if (location.state === "killed") {
    if (location.endedReason?.startsWith("lost")) {
      throw new WarrenError(
        "sandbox_lost",
        `sandbox ${sandboxId} was lost: its node ${location.nodeId} went down while it ran`,
      );
    }
    throw new WarrenError("sandbox_not_found", `sandbox ${sandboxId} not found`);
  }
  if (location.nodeState === "down") {
    throw new WarrenError(
      "node_unreachable",
      `sandbox ${sandboxId} is ${location.state} on node ${location.nodeId}, which is down`,
    );
  }
  return { nodeId: location.nodeId, url: location.nodeUrl };
}
