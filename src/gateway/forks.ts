import type { IncomingMessage, ServerResponse } from "node:http";
import { INTERNAL_PATHS } from "../protocol/index.js";
import { apiErrorEntry } from "../relay/index.js";
import { type Logger, WarrenError } from "../shared/index.js";
import type { NodeRow, SandboxLocation } from "./cluster.js";
import type { NodeAgents, NodeTarget } from "./forward.js";
import { answerError, callNode, type NodeAnswer, nodeUnreachable } from "./node-call.js";
import type { NodeDirectory } from "./node-directory.js";
import { freeRoom, type Reserved, rankNodes } from "./placement.js";
import { sendJson } from "./respond.js";

export interface ForkSpillOptions {
  readonly directory: NodeDirectory;
  readonly agents: NodeAgents;
  readonly heartbeatTimeoutMs: number;
  /** How long one node may take to start its children (ms). */
  readonly timeoutMs: number;
  readonly logger: Logger;
}

/** What the gateway reads of a fork request; the rest is relayed as sent. */
interface ForkBody {
  readonly count?: unknown;
  readonly timeout?: unknown;
  readonly metadata?: unknown;
}

type ChildResult = Record<string, unknown>;

const MAX_FORK_ANSWER = 16 * 1024 * 1024;

/**
 * How many more sandboxes of this shape a node has room for, by its last heartbeat less what
 * was sent to it since.
 */
function fits(node: NodeRow, reserved: Reserved | undefined, shape: Shape): number {
  const room = freeRoom(node, reserved);
  return Math.max(
    0,
    Math.min(
      room.sandboxes,
      Math.floor(room.vcpus / Math.max(1, shape.vcpus)),
      Math.floor(room.memoryMiB / Math.max(1, shape.memoryMiB)),
    ),
  );
}

interface Shape {
  readonly vcpus: number;
  readonly memoryMiB: number;
}

/**
 * The children of a fork that its source's node has no room for, when it lacks room for
 * all (`POST /sandboxes/:id/fork`); undefined when it has room, and the request is relayed
 * as it is. Otherwise the source's node starts what fits (`local`) from one capture and
 * publishes it; the rest go to the other nodes with room, each starting its share from that
 * capture, so every child starts from the same instant (both calls on the internal node
 * API). The answer is the source node's, its spilled entries replaced by the other nodes'
 * results, in order; a child no node had room for is a `cluster_full` error result.
 */
export async function forkAcrossNodes(
  req: IncomingMessage,
  res: ServerResponse,
  body: Buffer,
  sandboxId: string,
  location: SandboxLocation,
  options: ForkSpillOptions,
): Promise<boolean> {
  const { directory, logger } = options;
  const request = parse(body);
  const count = request?.count ?? 1;
  if (!request || !Number.isInteger(count) || (count as number) < 1) return false;
  const wanted = count as number;
  const source = await directory.node(location.nodeId);
  if (!source) return false;
  const shape = { vcpus: location.vcpus, memoryMiB: location.memoryMiB };
  const local = fits(source, directory.reserved.get(source.id), shape);
  if (local >= wanted) return false;

  for (let i = 0; i < local; i++) directory.reserve(source, shape);
  const first = await callNode(req, target(source), options.agents, {
    method: "POST",
    path: INTERNAL_PATHS.spillingFork(sandboxId),
    body: { ...request, local },
    timeoutMs: options.timeoutMs,
    maxBytes: MAX_FORK_ANSWER,
  });
  if (first.status !== 201 || !Array.isArray(first.json)) {
    sendJson(res, first.status, first.json);
    return true;
  }
  const results = first.json as ChildResult[];
  const spilledAt = results.flatMap((r, i) => (isSpilled(r) ? [i] : []));
  const snapshotId = spilledAt.length > 0 ? spilledOf(results[spilledAt[0] as number]) : undefined;
  if (snapshotId === undefined) {
    sendJson(res, 201, results);
    return true;
  }

  const { shares, left } = await shareOut(spilledAt.length, source, shape, options);
  const spillBody = {
    ...(request.timeout !== undefined && { timeout: request.timeout }),
    ...(request.metadata !== undefined && { metadata: request.metadata }),
  };
  const answers = await Promise.all(
    shares.map(({ node, count: share }) =>
      childrenOn(req, node, share, {
        path: INTERNAL_PATHS.forkFromCapture(sandboxId, snapshotId),
        body: { ...spillBody, count: share },
        options,
      }),
    ),
  );
  const spilled = [
    ...answers.flat(),
    ...failed(left, new WarrenError("cluster_full", "no node had room for this child of the fork")),
  ];
  spilledAt.forEach((at, i) => {
    results[at] = spilled[i] as ChildResult;
  });
  logger.info(
    {
      sandboxId,
      count: wanted,
      source: source.id,
      local,
      spilled: shares.map((s) => `${s.node.id}:${s.count}`),
      unplaced: left,
    },
    "gateway.fork_spilled",
  );
  sendJson(res, 201, results);
  return true;
}

interface Share {
  readonly node: NodeRow;
  readonly count: number;
}

/** Shares of `count` spilled children, best nodes first, each within its room (reserved). */
async function shareOut(
  count: number,
  source: NodeRow,
  shape: Shape,
  options: ForkSpillOptions,
): Promise<{ shares: Share[]; left: number }> {
  const { directory } = options;
  const shares: Share[] = [];
  let left = count;
  const ranked = rankNodes(
    await directory.nodes(),
    { templateId: "", ...shape },
    directory.reserved,
    {
      heartbeatTimeoutMs: options.heartbeatTimeoutMs,
      sinceReadMs: directory.sinceReadMs,
      exclude: new Set([source.id]),
    },
  );
  for (const node of ranked) {
    if (left === 0) break;
    const share = Math.min(left, fits(node, directory.reserved.get(node.id), shape));
    if (share === 0) continue;
    for (let i = 0; i < share; i++) directory.reserve(node, shape);
    shares.push({ node, count: share });
    left -= share;
  }
  return { shares, left };
}

/** A node's share of the children from the capture: its results, or an error entry each. */
async function childrenOn(
  req: IncomingMessage,
  node: NodeRow,
  share: number,
  call: { path: string; body: unknown; options: ForkSpillOptions },
): Promise<ChildResult[]> {
  const { options } = call;
  let answer: NodeAnswer;
  try {
    answer = await callNode(req, target(node), options.agents, {
      method: "POST",
      path: call.path,
      body: call.body,
      timeoutMs: options.timeoutMs,
      maxBytes: MAX_FORK_ANSWER,
    });
  } catch (err) {
    return failed(share, nodeUnreachable(node.id, err));
  }
  const { status, json } = answer;
  if (status === 201 && Array.isArray(json) && json.length === share) return json as ChildResult[];
  return failed(share, answerError(answer, node.id));
}

function parse(body: Buffer): ForkBody | undefined {
  if (body.length === 0) return {};
  try {
    const json: unknown = JSON.parse(body.toString("utf8"));
    return json !== null && typeof json === "object" && !Array.isArray(json)
      ? (json as ForkBody)
      : undefined;
  } catch {
    return undefined; // the node answers the 400
  }
}

function target(node: NodeRow): NodeTarget {
  return { nodeId: node.id, url: node.url };
}

function isSpilled(result: ChildResult): boolean {
  return typeof result.spilled === "object" && result.spilled !== null;
}

function spilledOf(result: ChildResult | undefined): string | undefined {
  const id = (result?.spilled as { snapshotID?: unknown } | undefined)?.snapshotID;
  return typeof id === "string" ? id : undefined;
}

/** `count` error results, as a node reports a child that did not start. */
function failed(count: number, error: WarrenError): ChildResult[] {
  const json = { error: apiErrorEntry(error) };
  return Array.from({ length: count }, () => json);
}
