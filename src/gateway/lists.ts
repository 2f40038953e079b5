import type { IncomingMessage } from "node:http";
import {
  compareAscending,
  encodeNextToken,
  type ListOrder,
  type ListPosition,
} from "../protocol/index.js";
import type { NodeRow } from "./cluster.js";
import type { NodeAgents } from "./forward.js";
import { callNode } from "./node-call.js";
import { requestUrl } from "./routes.js";

/** A listed sandbox as E2B's `ListedSandbox` (only what the merge reads is typed). */
interface Listed {
  readonly sandboxID: string;
  readonly startedAt: string;
  readonly [field: string]: unknown;
}

export interface NodePage {
  readonly items: Listed[];
  readonly nextToken?: string;
  readonly totalRunning: number;
}

export interface MergedList {
  readonly status: number;
  readonly body: unknown;
  readonly headers: Readonly<Record<string, string>>;
}

const MAX_LIST_BYTES = 16 * 1024 * 1024;

/**
 * `GET /sandboxes` and `GET /v2/sandboxes` over every node: each node is asked the same query
 * (its API checks the key and the filters), the pages are merged in E2B's order, and the
 * merged page's token names its last sandbox — a position, not an index, so every node can
 * continue from it. A node that does not answer is left out (it is soon marked down, its
 * sandboxes lost); an error a node does answer (a bad query, a bad key) is the answer.
 */
export async function mergeLists(
  req: IncomingMessage,
  nodes: readonly NodeRow[],
  agents: NodeAgents,
  version: 1 | 2,
  timeoutMs: number,
): Promise<MergedList> {
  const answers = await Promise.all(
    nodes.map((node) =>
      fetchPage(req, node, agents, timeoutMs).catch((err: unknown) => ({ failed: err })),
    ),
  );
  const pages: NodePage[] = [];
  for (const answer of answers) {
    if ("failed" in answer) continue;
    if (!("page" in answer)) return { status: answer.status, body: answer.json, headers: {} };
    pages.push(answer.page);
  }
  const url = requestUrl(req);
  const all = pages.flatMap((page) => page.items);
  if (version === 1) {
    all.sort((a, b) => compareAscending(position(a), position(b)));
    return { status: 200, body: all, headers: {} };
  }
  const order: ListOrder = url.searchParams.get("order") === "desc" ? "desc" : "asc";
  const limit = Number(url.searchParams.get("limit") ?? 100);
  const sign = order === "asc" ? 1 : -1;
  all.sort((a, b) => sign * compareAscending(position(a), position(b)));
  const items = all.slice(0, limit);
  const last = items.at(-1);
  // More exist when this page left some out, or a node had more than it sent.
  const more = all.length > limit || pages.some((page) => page.nextToken !== undefined);
  const headers: Record<string, string> = {
    "x-total-running": String(pages.reduce((sum, page) => sum + page.totalRunning, 0)),
  };
  if (more && last) headers["x-next-token"] = encodeNextToken(position(last), order);
  return { status: 200, body: items, headers };
}

function position(item: Listed): ListPosition {
  return { startedAt: new Date(item.startedAt), sandboxId: item.sandboxID };
}

/**
 * `GET /sandboxes/metrics` over every node: each answers for the sandboxes it holds (its API
 * checks the key and which are the caller's), and the `sandboxes` maps are joined. As for
 * lists, a node that does not answer is left out and an error one answers is the answer.
 */
export async function mergeMetrics(
  req: IncomingMessage,
  nodes: readonly NodeRow[],
  agents: NodeAgents,
  timeoutMs: number,
): Promise<MergedList> {
  const answers = await Promise.all(
    nodes.map((node) =>
      callNode(req, { nodeId: node.id, url: node.url }, agents, {
        method: "GET",
        path: req.url ?? "/",
        timeoutMs,
        maxBytes: MAX_LIST_BYTES,
      }).catch(() => undefined),
    ),
  );
  const sandboxes: Record<string, unknown> = {};
  for (const answer of answers) {
    if (!answer) continue;
    const found = (answer.json as { sandboxes?: unknown } | undefined)?.sandboxes;
    if (answer.status !== 200 || typeof found !== "object" || found === null) {
      return {
        status: answer.status === 200 ? 502 : answer.status,
        body: answer.json,
        headers: {},
      };
    }
    Object.assign(sandboxes, found);
  }
  return { status: 200, body: { sandboxes }, headers: {} };
}

type PageAnswer =
  | { readonly status: 200; readonly page: NodePage }
  | { readonly status: number; readonly json: unknown };

async function fetchPage(
  req: IncomingMessage,
  node: NodeRow,
  agents: NodeAgents,
  timeoutMs: number,
): Promise<PageAnswer> {
  const answer = await callNode(req, { nodeId: node.id, url: node.url }, agents, {
    method: "GET",
    path: req.url ?? "/",
    timeoutMs,
    maxBytes: MAX_LIST_BYTES,
  });
  const { status, json, headers } = answer;
  if (status !== 200 || !Array.isArray(json)) {
    return { status: status === 200 ? 502 : status, json };
  }
  const next = headers["x-next-token"];
  return {
    status: 200,
    page: {
      items: json as Listed[],
      nextToken: typeof next === "string" ? next : undefined,
      totalRunning: Number(headers["x-total-running"] ?? 0) || 0,
    },
  };
}
