import type { NodeRow } from "./cluster.js";

/** What a create needs from a node, as far as the gateway can tell before the node decides. */
export interface PlacementRequest {
  /** The template (id or alias) it starts from: nodes with it warm are preferred. */
  readonly templateId: string;
  readonly vcpus: number;
  readonly memoryMiB: number;
}

/** Room a node has promised to creates the gateway sent it since its last heartbeat. */
export interface Reserved {
  sandboxes: number;
  vcpus: number;
  memoryMiB: number;
}

export interface RankOptions {
  /** A node whose last heartbeat is older than this is not placed on (ms). */
  readonly heartbeatTimeoutMs: number;
  /** Time since the node list was read (ms): heartbeat ages are the database's, as read. */
  readonly sinceReadMs: number;
  /** Node ids to leave out (those that just refused this create). */
  readonly exclude?: ReadonlySet<string>;
}

/** Free room of a node after its last reported load and what the gateway sent it since. */
export function freeRoom(node: NodeRow, reserved: Reserved | undefined) {
  const load = node.load;
  return {
    sandboxes: node.capacity.maxSandboxes - (load?.sandboxes ?? 0) - (reserved?.sandboxes ?? 0),
    vcpus: node.capacity.vcpus - (load?.vcpusUsed ?? 0) - (reserved?.vcpus ?? 0),
    memoryMiB: node.capacity.memoryMiB - (load?.memoryMiBUsed ?? 0) - (reserved?.memoryMiB ?? 0),
  };
}

/**
 * The nodes a create may go to, best first: up, not draining, heard from recently, with room
 * for the request. A node holding a warm VMM of the template comes first (its create is a
 * take from the pool, not a restore); then the one with the most free memory, so load spreads.
 * The node decides for itself (its own admission); this only orders the attempts.
 */
export function rankNodes(
  nodes: readonly NodeRow[],
  request: PlacementRequest,
  reserved: ReadonlyMap<string, Reserved>,
  options: RankOptions,
): NodeRow[] {
  const candidates = nodes.filter((node) => {
    if (node.state !== "up" || node.load?.draining) return false;
    if (options.exclude?.has(node.id)) return false;
    if (node.heartbeatAgeMs + options.sinceReadMs > options.heartbeatTimeoutMs) return false;
    const room = freeRoom(node, reserved.get(node.id));
    return (
      room.sandboxes >= 1 && room.vcpus >= request.vcpus && room.memoryMiB >= request.memoryMiB
    );
  });
  const warm = (node: NodeRow) => (node.load?.warmTemplates.includes(request.templateId) ? 1 : 0);
  const memoryFree = (node: NodeRow) =>
    freeRoom(node, reserved.get(node.id)).memoryMiB / Math.max(1, node.capacity.memoryMiB);
  return candidates.sort(
    (a, b) => warm(b) - warm(a) || memoryFree(b) - memoryFree(a) || (a.id < b.id ? -1 : 1),
  );
}
