import type { IncomingMessage, ServerResponse } from "node:http";
import { Agent } from "node:https";
import type { Duplex } from "node:stream";
import {
  forwardingOf,
  type RelayOutcome,
  relayRequest,
  relayRequestHeaders,
  relayUpgrade,
  requestPath,
  type Upstream,
} from "../relay/index.js";
import { type Logger, WarrenError } from "../shared/index.js";
import {
  type ClusterChannel,
  type ClusterCredentials,
  clusterClientOptions,
} from "../tls/index.js";

export interface NodeTarget {
  readonly nodeId: string;
  /** The node server's base URL, e.g. http://10.0.0.2:3000. */
  readonly url: string;
}

/**
 * One keep-alive pool per node: the gateway relays everything a node serves (API calls, envd
 * and app-port traffic) over a few warm connections instead of a handshake per request.
 * Every connection is TLS with the gateway's cluster certificate, and is made only to a
 * server whose certificate, from the cluster CA, names the node the catalog's row is for:
 * a row repointed at another address (or a node registering under another's id) gets a
 * refused handshake, before any byte of a request (a client's API key) goes out. A pool is
 * per node id and URL, and resumes no TLS session (Node checks names on full handshakes only).
 * The pools are for one channel: client traffic is relayed on `relay` pools only; the
 * gateway's own calls on the internal API go on `control` pools (InternalCalls), which
 * never carry a client's request.
 */
export class NodeAgents {
  readonly #agents = new Map<string, Agent>();

  constructor(
    private readonly credentials: ClusterCredentials,
    private readonly logger: Logger,
    private readonly channel: ClusterChannel = "relay",
  ) {}

  for(target: NodeTarget): Agent {
    const key = `${target.nodeId} ${target.url}`;
    let agent = this.#agents.get(key);
    if (!agent) {
      const { nodeId, url } = target;
      const misidentified = (presented: string | undefined) =>
        this.logger.warn({ nodeId, url, presented }, "gateway.node_misidentified");
      agent = new Agent({
        ...clusterClientOptions(this.credentials, nodeId, misidentified, this.channel),
        keepAlive: true,
        maxSockets: 256,
        timeout: 60_000,
        maxCachedSessions: 0,
      });
      this.#agents.set(key, agent);
    }
    return agent;
  }

  close(): void {
    for (const agent of this.#agents.values()) agent.destroy();
    this.#agents.clear();
  }
}

/**
 * A call to `path` on a node, carrying the client's headers as a relay does: the client's
 * Host and the `e2b-sandbox-*` headers stay (the node routes sandbox traffic by them),
 * hop-by-hop headers go, `x-forwarded-*` say who asked.
 */
export function nodeUpstream(
  req: IncomingMessage | undefined,
  target: NodeTarget,
  agents: NodeAgents,
  options: { readonly path: string; readonly upgrade: boolean },
): Upstream {
  const { hostname, port, protocol } = new URL(target.url);
  return {
    // An IPv6 literal comes bracketed from a URL, not as a socket address.
    host: hostname.replace(/^\[(.*)\]$/, "$1"),
    // Nodes register https:// URLs; whatever a row says, the agent speaks TLS to it.
    port: Number(port) || (protocol === "http:" ? 80 : 443),
    protocol: "https:",
    path: options.path,
    // The gateway's own call (no client's request) carries only the headers it adds.
    headers: req
      ? relayRequestHeaders(req.rawHeaders, { ...forwardingOf(req), upgrade: options.upgrade })
      : {},
    agent: agents.for(target),
  };
}

export interface ForwardOptions {
  readonly agents: NodeAgents;
  /** The body when the gateway has already read it (a create it placed); else the request streams. */
  readonly body?: Buffer;
  /**
   * Statuses the caller acts on instead of relaying (a create refused for capacity: try the
   * next node). The answer is read for it.
   */
  readonly intercept?: (status: number) => boolean;
  /** Idle time on the node's connection before the exchange is cut (ms). */
  readonly idleTimeoutMs: number;
}

/** The relay's outcome, an unreachable node said as the gateway answers it. */
export type ForwardOutcome =
  | Exclude<RelayOutcome, { readonly kind: "unreachable" }>
  | { readonly kind: "unreachable"; readonly error: WarrenError };

/**
 * Relays one request to a node and its answer back, streaming both bodies. Settles once the
 * outcome is known: relayed (the answer is on its way to the client), intercepted (nothing
 * was sent), unreachable (no answer came: nothing was sent, the caller answers) or ended
 * (the client left).
 */
export async function forwardRequest(
  req: IncomingMessage,
  res: ServerResponse,
  target: NodeTarget,
  options: ForwardOptions,
): Promise<ForwardOutcome> {
  const upstream = nodeUpstream(req, target, options.agents, {
    path: pathOf(req),
    upgrade: false,
  });
  const { agents: _, ...relayOptions } = options;
  return asForward(target, await relayRequest(req, res, upstream, relayOptions));
}

/**
 * Relays an Upgrade (WebSocket) request: once the node answers 101 the two sockets are
 * piped both ways; any other answer is relayed as is and the socket closed. Unreachable
 * when the node could not be reached (the caller answers the socket).
 */
export async function forwardUpgrade(
  req: IncomingMessage,
  client: Duplex,
  head: Buffer,
  target: NodeTarget,
  options: Pick<ForwardOptions, "agents" | "idleTimeoutMs">,
): Promise<ForwardOutcome> {
  const upstream = nodeUpstream(req, target, options.agents, { path: pathOf(req), upgrade: true });
  const outcome = await relayUpgrade(req, client, head, upstream, {
    idleTimeoutMs: options.idleTimeoutMs,
  });
  return asForward(target, outcome);
}

/** The path and query to relay: an absolute-form target never chooses the node. */
function pathOf(req: IncomingMessage): string {
  const path = requestPath(req.url);
  if (path === undefined) throw new WarrenError("invalid_argument", "Invalid request target");
  return path;
}

function asForward(target: NodeTarget, outcome: RelayOutcome): ForwardOutcome {
  if (outcome.kind !== "unreachable") return outcome;
  const err: NodeJS.ErrnoException = outcome.error;
  const error = new WarrenError(
    "node_unreachable",
    `node ${target.nodeId} (${target.url}) did not answer: ${err.code ?? err.message}`,
    { cause: err },
  );
  return { kind: "unreachable", error };
}
