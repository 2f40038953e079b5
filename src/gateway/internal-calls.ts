import {
  type CaptureForkRequest,
  INTERNAL_PATHS,
  type SpillingForkRequest,
} from "../protocol/index.js";
import type { Logger } from "../shared/index.js";
import type { ClusterCredentials } from "../tls/index.js";
import { NodeAgents, type NodeTarget } from "./forward.js";
import { answerError, callNode, type NodeAnswer, nodeUnreachable } from "./node-call.js";

/** An answer without a body is empty or an error's JSON. */
const MAX_ANSWER_BYTES = 64 * 1024;
/** A fork's answer: a child's sandbox JSON each. */
const MAX_FORK_ANSWER_BYTES = 16 * 1024 * 1024;

/**
 * The gateway's own calls on nodes' internal API (protocol's INTERNAL_PATHS and bodies), with
 * nothing of a client's: no header, no key. What lets them in is the connection: its own
 * pools of **control** connections (the gateway's certificate and `CONTROL_ALPN`), which
 * never relay a client's request, as the relay pools never carry these calls.
 */
export class InternalCalls {
  readonly #agents: NodeAgents;

  constructor(credentials: ClusterCredentials, logger: Logger) {
    this.#agents = new NodeAgents(credentials, logger, "control");
  }

  /** A spilling fork: the node's 201 and its children (spilled ones name the capture), or its error. */
  spillingFork(
    target: NodeTarget,
    sandboxId: string,
    body: SpillingForkRequest,
    timeoutMs: number,
  ): Promise<NodeAnswer> {
    return this.#call(target, INTERNAL_PATHS.spillingFork(sandboxId), body, timeoutMs);
  }

  /** Children from a capture another node spilled. */
  forkFromCapture(
    target: NodeTarget,
    sandboxId: string,
    snapshotId: string,
    body: CaptureForkRequest,
    timeoutMs: number,
  ): Promise<NodeAnswer> {
    const path = INTERNAL_PATHS.forkFromCapture(sandboxId, snapshotId);
    return this.#call(target, path, body, timeoutMs);
  }

  adopt(target: NodeTarget, sandboxId: string, timeoutMs: number): Promise<void> {
    return this.#post(target, INTERNAL_PATHS.adopt(sandboxId), timeoutMs);
  }

  drain(target: NodeTarget, timeoutMs: number): Promise<void> {
    return this.#post(target, INTERNAL_PATHS.drain, timeoutMs);
  }

  undrain(target: NodeTarget, timeoutMs: number): Promise<void> {
    return this.#post(target, INTERNAL_PATHS.undrain, timeoutMs);
  }

  close(): void {
    this.#agents.close();
  }

  /** Rejects only when no answer came; any status resolves. */
  #call(target: NodeTarget, path: string, body: object, timeoutMs: number): Promise<NodeAnswer> {
    return callNode(undefined, target, this.#agents, {
      method: "POST",
      path,
      body,
      timeoutMs,
      maxBytes: MAX_FORK_ANSWER_BYTES,
    });
  }

  /** POSTs `path` with no body; a node's error answer, or none, is thrown as a WarrenError. */
  async #post(target: NodeTarget, path: string, timeoutMs: number): Promise<void> {
    const answer = await callNode(undefined, target, this.#agents, {
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
