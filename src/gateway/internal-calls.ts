import type { NodeAgents, NodeTarget } from "./forward.js";
import { answerError, callNode, nodeUnreachable } from "./node-call.js";

/** An internal call's answer is empty or an error's JSON. */
const MAX_ANSWER_BYTES = 64 * 1024;

/**
 * The gateway's own calls on nodes' internal API (protocol's INTERNAL_PATHS), with nothing
 * of a client's: what lets them in is the connection, made with the gateway's certificate
 * (NodeAgents); a node takes no API key there.
 */
export class InternalCalls {
  constructor(private readonly agents: NodeAgents) {}

  /** POSTs `path` with no body; a node's error answer, or none, is thrown as a WarrenError. */
  async post(target: NodeTarget, path: string, timeoutMs: number): Promise<void> {
    const answer = await callNode(undefined, target, this.agents, {
      method: "POST",
      path,
      timeoutMs,
      maxBytes: MAX_ANSWER_BYTES,
    }).catch((err: unknown) => {
      throw nodeUnreachable(target.nodeId, err);
    });
    if (answer.status >= 300) throw answerError(answer, target.nodeId);
  }
}
