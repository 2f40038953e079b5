import type { IncomingHttpHeaders, IncomingMessage } from "node:http";
import { readWhole, upstreamRequest } from "../relay/index.js";
import { ERROR_KINDS, type ErrorKind, WarrenError } from "../shared/index.js";
import { type NodeAgents, type NodeTarget, nodeUpstream } from "./forward.js";

/** A node's JSON answer to a call the gateway makes itself (a list page, a spilled fork). */
export interface NodeAnswer {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  /** Undefined when the answer has no body (a 204). */
  readonly json: unknown;
}

export interface NodeCall {
  readonly method: "GET" | "POST";
  /** Path and query on the node, e.g. `/sandboxes?state=running`. */
  readonly path: string;
  /** Sent as JSON (POST). */
  readonly body?: unknown;
  readonly timeoutMs: number;
  /** Answers larger than this are refused. */
  readonly maxBytes: number;
}

/**
 * Calls a node on the client's behalf (its credentials and forwarding headers relayed as a
 * relay sends them, the body the gateway's own), or on the gateway's own without `req`, and
 * reads the JSON answer whole. Rejects when the node cannot be reached or answers something
 * that is not JSON (an empty body is none); any status resolves.
 */
export function callNode(
  req: IncomingMessage | undefined,
  target: NodeTarget,
  agents: NodeAgents,
  call: NodeCall,
): Promise<NodeAnswer> {
  const upstream = nodeUpstream(req, target, agents, { path: call.path, upgrade: false });
  const { "transfer-encoding": _, "content-length": __, ...headers } = upstream.headers;
  const payload = call.body === undefined ? undefined : Buffer.from(JSON.stringify(call.body));
  if (payload) {
    headers["content-type"] = "application/json";
    headers["content-length"] = String(payload.length);
  }
  const { request: sent } = upstreamRequest({ ...upstream, headers }, call.method, {
    idleTimeoutMs: call.timeoutMs,
  });
  return new Promise((resolve, reject) => {
    sent.on("error", reject);
    sent.once("response", (answer: IncomingMessage) => {
      readWhole(answer, call.maxBytes).then((body) => {
        try {
          const text = body.toString("utf8");
          const json: unknown = text === "" ? undefined : JSON.parse(text);
          resolve({ status: answer.statusCode ?? 502, headers: answer.headers, json });
        } catch {
          reject(new WarrenError("internal", `node ${target.nodeId} answered with no JSON`));
        }
      }, reject);
    });
    sent.end(payload);
  });
}

/** The error a node's answer reports (its E2B error JSON), as the gateway passes it on. */
export function answerError(answer: NodeAnswer, nodeId: string): WarrenError {
  const { status, json } = answer;
  const message = (json as { message?: unknown } | null | undefined)?.message;
  const kind = Object.entries(ERROR_KINDS).find(([, k]) => k.status === status)?.[0];
  return new WarrenError(
    kind === undefined ? "internal" : (kind as ErrorKind),
    `node ${nodeId}: ${typeof message === "string" ? message : `answered ${status}`}`,
  );
}

/** A node that gave no answer to a call of the gateway's own. */
export function nodeUnreachable(nodeId: string, err: unknown): WarrenError {
  const why = err instanceof Error ? err.message : String(err);
  return new WarrenError("node_unreachable", `node ${nodeId}: ${why}`, { cause: err });
}
