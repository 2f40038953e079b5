import type { ServerResponse } from "node:http";
import type { CaptureForkRequest, InternalForkChild } from "../protocol/index.js";
import { apiErrorEntry } from "../relay/index.js";
import { type Logger, WarrenError } from "../shared/index.js";
import type { NodeRow, SandboxLocation } from "./cluster.js";
import type { NodeTarget } from "./forward.js";
import type { InternalCalls } from "./internal-calls.js";
import { answerError, type NodeAnswer, nodeUnreachable } from "./node-call.js";
import type { NodeDirectory } from "./node-directory.js";
import { freeRoom, type Reserved, rankNodes } from "./placement.js";
import { sendJson } from "./respond.js";

export interface ForkSpillOptions {
  readonly directory: NodeDirectory;
  /** The internal node API, on the gateway's control connections. */
  readonly internal: InternalCalls;
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

type ChildResult = InternalForkChild;

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
  // What the node reads is typed here: only the fields E2B's fork body has, as it gave them.
  const spillBody: Omit<CaptureForkRequest, "count"> = {
    ...(request.timeout !== undefined && { timeout: request.timeout as number }),
    ...(request.metadata !== undefined && {
      metadata: request.metadata as Record<string, string>,
    }),
  };
  const first = await options.internal.spillingFork(
    target(source),
    sandboxId,
    { ...spillBody, count: wanted, local },
    options.timeoutMs,
  );
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
  const answers = await Promise.all(
    shares.map(({ node, count: share }) =>
      childrenOn(node, share, () =>
        options.internal.forkFromCapture(
          target(node),
          sandboxId,
          snapshotId,
          { ...spillBody, count: share },
          options.timeoutMs,
        ),
      ),
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
  node: NodeRow,
  share: number,
  call: () => Promise<NodeAnswer>,
): Promise<ChildResult[]> {
  let answer: NodeAnswer;
  try {
    answer = await call();
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

/** A node's JSON, checked: a spilled child names the capture. */
function isSpilled(result: ChildResult): boolean {
  return spilledOf(result) !== undefined;
}

function spilledOf(result: ChildResult | undefined): string | undefined {
  const spilled: unknown = result && "spilled" in result ? result.spilled : undefined;
  const id = (spilled as { snapshotID?: unknown } | null | undefined)?.snapshotID;
  return typeof id === "string" ? id : undefined;
}

/** `count` error results, as a node reports a child that did not start. */
function failed(count: number, error: WarrenError): ChildResult[] {
  const json = { error: apiErrorEntry(error) };
  return Array.from({ length: count }, () => json);
}
