import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import type { Duplex } from "node:stream";
import { CLUSTER_KEY_HEADER, INTERNAL_PATHS } from "../protocol/index.js";
import { apiError, proxyRefusal, sendError, writeSocketError } from "../relay/index.js";
import { authenticate } from "../shared/api-key-auth.js";
import { type Logger, silentLogger, WarrenError } from "../shared/index.js";
import type { GatewayCluster, NodeRow, SandboxLocation } from "./cluster.js";
import { Creates } from "./creates.js";
import { forkAcrossNodes } from "./forks.js";
import { forwardRequest, forwardUpgrade, NodeAgents, type NodeTarget } from "./forward.js";
import { mergeLists } from "./lists.js";
import { answerError, callNode } from "./node-call.js";
import { NodeDirectory } from "./node-directory.js";
import { relocatePaused } from "./relocate.js";
import { sandboxRefusal, sendJson } from "./respond.js";
import { classify, type GatewayRoute } from "./routes.js";

export interface GatewayOptions {
  readonly cluster: GatewayCluster;
  /** Keys accepted on the API (the nodes accept the same: the gateway relays the client's). */
  readonly apiKeys: () => ReadonlySet<string>;
  /** Sandbox Host names are `<port>-<id>.<domain>` when set. */
  readonly domain?: string;
  readonly host: string;
  readonly port: number;
  readonly logger?: Logger;
  /** Node list refresh period (ms); default 1000. */
  readonly refreshMs?: number;
  /** A node silent this long is marked down (ms); default 10 000. */
  readonly downAfterMs?: number;
  /** Creates waiting for room at once; default 256. */
  readonly maxQueued?: number;
  /** How long a create waits for room (ms); default 10 000. */
  readonly queueWaitMs?: number;
  /** Idle time on a node connection before a relayed exchange is cut (ms); default 620 000. */
  readonly idleTimeoutMs?: number;
}

export interface Gateway {
  readonly url: string;
  readonly directory: NodeDirectory;
  close(): Promise<void>;
}

const MAX_CREATE_BODY = 1024 * 1024;
const MAX_FORK_BODY = 1024 * 1024;
/** An internal call's answer is empty or an error's JSON. */
const MAX_INTERNAL_ANSWER = 64 * 1024;
/** How long a node has to take a drain or undrain (it answers once started). */
const NODE_ACTION_TIMEOUT_MS = 10_000;

/**
 * The cluster's front: the E2B API and the sandbox proxy, as a node server serves them, over
 * many nodes. Stateless (any number run side by side): where each sandbox lives and which
 * nodes are up is in the cluster catalog. Every call about one sandbox, and every request to
 * one, is relayed to its node and streamed both ways.
 */
export async function startGateway(options: GatewayOptions): Promise<Gateway> {
  const logger = options.logger ?? silentLogger;
  const idleTimeoutMs = options.idleTimeoutMs ?? 620_000;
  const downAfterMs = options.downAfterMs ?? 10_000;
  const agents = new NodeAgents();
  const directory = new NodeDirectory({
    cluster: options.cluster,
    refreshMs: options.refreshMs ?? 1000,
    downAfterMs,
    logger,
  });
  const creates = new Creates({
    directory,
    agents,
    logger,
    maxQueued: options.maxQueued ?? 256,
    maxWaitMs: options.queueWaitMs ?? 10_000,
    heartbeatTimeoutMs: downAfterMs,
    idleTimeoutMs,
  });
  const clusterKey = await options.cluster.clusterKey();
  /** A call on the internal node API, the gateway's own (no client's credentials). */
  const internalCall = (target: NodeTarget, path: string, timeoutMs: number) =>
    callNode(undefined, target, agents, {
      method: "POST",
      path,
      headers: { [CLUSTER_KEY_HEADER]: clusterKey },
      timeoutMs,
      maxBytes: MAX_INTERNAL_ANSWER,
    }).then(
      (answer) => {
        if (answer.status >= 300) throw answerError(answer, target.nodeId);
      },
      (err: unknown) => {
        const why = err instanceof Error ? err.message : String(err);
        throw new WarrenError("node_unreachable", `node ${target.nodeId}: ${why}`, { cause: err });
      },
    );
  const relay = (req: IncomingMessage, res: ServerResponse, target: NodeTarget) =>
    forwardRequest(req, res, target, { agents, idleTimeoutMs }).then((outcome) => {
      if (outcome.kind === "unreachable") throw outcome.error;
    });

  /** Template and snapshot-template calls go to one node: the up node first by id. */
  async function templateNode(): Promise<NodeTarget> {
    const up = (await directory.nodes()).filter((node) => node.state === "up");
    const node = up.sort((a, b) => (a.id < b.id ? -1 : 1))[0];
    if (!node) throw new WarrenError("no_nodes", "no node server is up to serve templates");
    return { nodeId: node.id, url: node.url };
  }

  /** The node holding a sandbox, or why it cannot be reached. */
  async function sandboxNode(sandboxId: string, resuming = false): Promise<NodeTarget> {
    return (await locate(sandboxId, resuming)).target;
  }

  /**
   * Where a sandbox is, or why it cannot be reached. `resuming`: a resume or connect, which
   * moves a paused sandbox off a node that is down or draining (relocatePaused).
   */
  async function locate(
    sandboxId: string,
    resuming: boolean,
  ): Promise<{ target: NodeTarget; location: SandboxLocation }> {
    let location = await options.cluster.locateSandbox(sandboxId);
    if (resuming && location?.state === "paused" && location.nodeState !== "up") {
      const moved = await relocatePaused(sandboxId, location, {
        cluster: options.cluster,
        directory,
        heartbeatTimeoutMs: downAfterMs,
        // The fetch of its snapshot is the long part: as long as a resume may take.
        adopt: (target, id) => internalCall(target, INTERNAL_PATHS.adopt(id), idleTimeoutMs),
        logger,
      });
      if (moved) return { target: moved, location };
      location = await options.cluster.locateSandbox(sandboxId);
    }
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
    return { target: { nodeId: location.nodeId, url: location.nodeUrl }, location };
  }

  /** A fork: relayed to the source's node, or spread over nodes when it lacks room. */
  async function fork(req: IncomingMessage, res: ServerResponse, sandboxId: string) {
    const { target, location } = await locate(sandboxId, false);
    const body = await readBody(req, MAX_FORK_BODY);
    const spread = await forkAcrossNodes(req, res, body, sandboxId, location, {
      directory,
      agents,
      heartbeatTimeoutMs: downAfterMs,
      timeoutMs: idleTimeoutMs,
      clusterKey,
      logger,
    });
    if (spread) return;
    const outcome = await forwardRequest(req, res, target, { agents, body, idleTimeoutMs });
    if (outcome.kind === "unreachable") throw outcome.error;
  }

  async function handle(req: IncomingMessage, res: ServerResponse, route: GatewayRoute) {
    switch (route.kind) {
      case "proxy":
        // What stops it is refused as a node's proxy refuses (the server's catch below).
        return relay(req, res, await sandboxNode(route.sandboxId));
      case "proxy_invalid":
        return sendError(res, proxyRefusal({ message: route.message, code: 400 }));
      case "health": {
        const nodes = await directory.nodes();
        const up = nodes.filter((node) => node.state === "up").length;
        return sendJson(res, 200, { status: "ok", role: "gateway", nodes: nodes.length, up });
      }
      case "templates":
        if (!route.signedUpload) authenticate(req.headers, options.apiKeys());
        return relay(req, res, await templateNode());
      case "not_found":
        authenticate(req.headers, options.apiKeys());
        throw new WarrenError("route_not_found", `no route ${req.method} ${pathOf(req)}`);
      default:
        break;
    }
    authenticate(req.headers, options.apiKeys());
    switch (route.kind) {
      case "create":
        return creates.handle(req, res, await readBody(req, MAX_CREATE_BODY));
      case "list": {
        const up = (await directory.nodes()).filter((node) => node.state !== "down");
        const merged = await mergeLists(req, up, agents, route.version, 30_000);
        return sendJson(res, merged.status, merged.body, merged.headers);
      }
      case "snapshots":
        return relay(req, res, await templateNode());
      case "sandbox": {
        if (req.method === "POST" && route.action === "fork") {
          return fork(req, res, route.sandboxId);
        }
        const resuming =
          req.method === "POST" && (route.action === "resume" || route.action === "connect");
        return relay(req, res, await sandboxNode(route.sandboxId, resuming));
      }
      case "nodes":
        return sendJson(res, 200, (await directory.nodes()).map(nodeJson));
      case "node_action":
        return nodeAction(res, route.nodeId, route.action);
    }
  }

  async function nodeAction(res: ServerResponse, nodeId: string, action: string) {
    const state = action === "drain" ? "draining" : action === "undrain" ? "up" : undefined;
    if (!state)
      throw new WarrenError("route_not_found", `no node action '${action}': drain or undrain`);
    const node = await directory.node(nodeId);
    if (!node) throw new WarrenError("not_found", `node ${nodeId} not found`);
    await options.cluster.setNodeState(nodeId, state);
    await directory.refresh();
    // The node acts at once; should it not hear this, its next heartbeat reads the state.
    if (node.state !== "down") {
      const path = state === "draining" ? INTERNAL_PATHS.drain : INTERNAL_PATHS.undrain;
      await internalCall({ nodeId, url: node.url }, path, NODE_ACTION_TIMEOUT_MS).catch(
        (err: unknown) => logger.warn({ err, nodeId, action }, "gateway.node_action_unheard"),
      );
    }
    res.statusCode = 204;
    res.end();
  }

  const server: Server = createServer((req, res) => {
    const route = classify(req, options.domain);
    handle(req, res, route).catch((err: unknown) => {
      if (!(err instanceof WarrenError)) logger.error({ err, route: route.kind }, "gateway.error");
      if (route.kind === "proxy") sendError(res, sandboxRefusal(route.sandboxId, err));
      else sendError(res, apiError(err));
    });
  });
  server.on("upgrade", (req: IncomingMessage, socket: Duplex, head: Buffer) => {
    const route = classify(req, options.domain);
    if (route.kind !== "proxy") {
      socket.destroy();
      return;
    }
    sandboxNode(route.sandboxId)
      .then((target) => forwardUpgrade(req, socket, head, target, { agents, idleTimeoutMs }))
      .then((outcome) => {
        if (outcome.kind === "unreachable") throw outcome.error;
      })
      .catch((err: unknown) => writeSocketError(socket, sandboxRefusal(route.sandboxId, err)));
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.host, () => resolve());
  });
  directory.start();
  const address = server.address() as AddressInfo;
  const url = `http://${options.host}:${address.port}`;
  logger.info({ url }, "gateway.listening");
  return {
    url,
    directory,
    async close() {
      directory.stop();
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      agents.close();
    },
  };
}

function pathOf(req: IncomingMessage): string {
  return new URL(req.url ?? "/", "http://gateway").pathname;
}

function nodeJson(node: NodeRow) {
  return {
    nodeID: node.id,
    url: node.url,
    state: node.state,
    lastHeartbeat: node.lastHeartbeat,
    capacity: node.capacity,
    load: node.load,
  };
}

function readBody(req: IncomingMessage, limit: number): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    let bytes = 0;
    req.on("data", (chunk: Buffer) => {
      bytes += chunk.length;
      if (bytes <= limit) chunks.push(chunk);
      // The rest drains unread, so that the 413 still reaches the client.
      else reject(new WarrenError("payload_too_large", "request body is too large"));
    });
    req.on("end", () => resolve(Buffer.concat(chunks)));
    req.on("error", reject);
  });
}
