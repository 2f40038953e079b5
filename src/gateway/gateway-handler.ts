import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import type { Duplex } from "node:stream";
import { apiError, proxyRefusal, sendError, writeSocketError } from "../relay/index.js";
import { type Logger, WarrenError } from "../shared/index.js";
import { actingTeam, type Caller, requireAdmin } from "../tenancy/index.js";
import type { GatewayCluster, NodeRow, SandboxLocation } from "./cluster.js";
import type { Creates } from "./creates.js";
import { forkAcrossNodes } from "./forks.js";
import { forwardRequest, forwardUpgrade, type NodeAgents, type NodeTarget } from "./forward.js";
import type { InternalCalls } from "./internal-calls.js";
import { mergeLists, mergeMetrics } from "./lists.js";
import type { NodeDirectory } from "./node-directory.js";
import { readBody, sandboxRefusal, sendJson } from "./respond.js";
import { classify, type GatewayRoute, requestUrl } from "./routes.js";
import type { SandboxLocator } from "./sandbox-locator.js";
import type { TeamAdmission } from "./team-admission.js";

const MAX_CREATE_BODY = 1024 * 1024;
const MAX_FORK_BODY = 1024 * 1024;
/** How long a node has to take a drain or undrain (it answers once started). */
const NODE_ACTION_TIMEOUT_MS = 10_000;

export interface GatewayParts {
  readonly cluster: GatewayCluster;
  /** Who a request is from (a team's key, or the admin token): 401 when neither. */
  readonly authenticate: (headers: IncomingHttpHeaders) => Promise<Caller>;
  /** Team quotas across the cluster (creates and forks). */
  readonly teams: TeamAdmission;
  readonly domain?: string;
  readonly agents: NodeAgents;
  readonly directory: NodeDirectory;
  readonly creates: Creates;
  readonly locator: SandboxLocator;
  readonly internal: InternalCalls;
  readonly heartbeatTimeoutMs: number;
  readonly idleTimeoutMs: number;
  readonly logger: Logger;
}

/** What the gateway does with each request and upgrade (routes.ts says which kind it is). */
export class GatewayHandler {
  constructor(private readonly p: GatewayParts) {}

  readonly onRequest = (req: IncomingMessage, res: ServerResponse): void => {
    const route = classify(req, this.p.domain);
    if (route.kind === "routing_hop") {
      const refusal = routingHopRefusal(route.names);
      const { message, status: code } = refusal;
      sendError(res, route.proxy ? proxyRefusal({ message, code }) : apiError(refusal));
      return;
    }
    this.#handle(req, res, route).catch((err: unknown) => {
      if (!(err instanceof WarrenError))
        this.p.logger.error({ err, route: route.kind }, "gateway.error");
      if (route.kind === "proxy") sendError(res, sandboxRefusal(route.sandboxId, err));
      else sendError(res, apiError(err));
    });
  };

  readonly onUpgrade = (req: IncomingMessage, socket: Duplex, head: Buffer): void => {
    const route = classify(req, this.p.domain);
    if (route.kind === "routing_hop") {
      const { message, status: code } = routingHopRefusal(route.names);
      writeSocketError(socket, proxyRefusal({ message, code }));
      return;
    }
    if (route.kind !== "proxy") {
      socket.destroy();
      return;
    }
    const { agents, idleTimeoutMs } = this.p;
    this.p.locator
      .locate(route.sandboxId, SANDBOX_TRAFFIC)
      .then(({ target }) => forwardUpgrade(req, socket, head, target, { agents, idleTimeoutMs }))
      .then((outcome) => {
        if (outcome.kind === "unreachable") throw outcome.error;
      })
      .catch((err: unknown) => writeSocketError(socket, sandboxRefusal(route.sandboxId, err)));
  };

  /** What needs no API key (sandbox traffic: the node checks its tokens), then the API. */
  async #handle(req: IncomingMessage, res: ServerResponse, route: GatewayRoute): Promise<void> {
    const { locator } = this.p;
    switch (route.kind) {
      case "proxy":
        // What stops it is refused as a node's proxy refuses (onRequest's catch).
        return this.#relay(
          req,
          res,
          (await locator.locate(route.sandboxId, SANDBOX_TRAFFIC)).target,
        );
      case "proxy_invalid":
        return sendError(res, proxyRefusal({ message: route.message, code: 400 }));
      case "internal":
        throw new WarrenError(
          "route_not_found",
          `${pathOf(req)}: the nodes' internal API is the gateway's own to call, never relayed`,
        );
      case "health": {
        // Open, for load balancers; the cluster's size is the admin's.
        const own = { status: "ok", role: "gateway" };
        const caller = await this.p.authenticate(req.headers).catch(() => undefined);
        if (!caller?.admin) return sendJson(res, 200, own);
        const nodes = await this.p.directory.nodes();
        const up = nodes.filter((node) => node.state === "up").length;
        return sendJson(res, 200, { ...own, nodes: nodes.length, up });
      }
      case "templates":
        if (!route.signedUpload) await this.p.authenticate(req.headers);
        return this.#relay(req, res, await locator.templateNode());
      case "volumes":
        // The content API's key is the volume's own token, which the node checks.
        if (!route.content) await this.p.authenticate(req.headers);
        return this.#relay(req, res, await locator.templateNode());
      case "team_catalog":
        await this.p.authenticate(req.headers);
        return this.#relay(req, res, await locator.templateNode());
      default: {
        const caller = await this.p.authenticate(req.headers);
        if (route.kind === "nodes" || route.kind === "node_action") {
          requireAdmin(caller, "the cluster's nodes");
        }
        return this.#api(req, res, route, caller);
      }
    }
  }

  async #api(
    req: IncomingMessage,
    res: ServerResponse,
    route: GatewayRoute,
    caller: Caller,
  ): Promise<void> {
    const { directory, locator } = this.p;
    switch (route.kind) {
      case "create": {
        const body = await readBody(req, MAX_CREATE_BODY);
        const release = await this.p.teams.admit(actingTeam(caller), 1);
        try {
          return await this.p.creates.handle(req, res, body);
        } finally {
          release();
        }
      }
      case "list": {
        const up = (await directory.nodes()).filter((node) => node.state !== "down");
        const merged = await mergeLists(req, up, this.p.agents, route.version, 30_000);
        return sendJson(res, merged.status, merged.body, merged.headers);
      }
      case "metrics": {
        const up = (await directory.nodes()).filter((node) => node.state !== "down");
        const merged = await mergeMetrics(req, up, this.p.agents, 30_000);
        return sendJson(res, merged.status, merged.body, merged.headers);
      }
      case "snapshots":
        return this.#relay(req, res, await locator.templateNode());
      case "sandbox": {
        if (req.method === "POST" && route.action === "fork") {
          return this.#fork(req, res, route.sandboxId, caller);
        }
        const resuming =
          req.method === "POST" && (route.action === "resume" || route.action === "connect");
        const { target } = await locator.locate(route.sandboxId, caller, resuming);
        return this.#relay(req, res, target);
      }
      case "nodes":
        return sendJson(res, 200, (await directory.nodes()).map(nodeJson));
      case "node_action":
        return this.#nodeAction(res, route.nodeId, route.action);
      default:
        throw new WarrenError("route_not_found", `no route ${req.method} ${pathOf(req)}`);
    }
  }

  async #relay(req: IncomingMessage, res: ServerResponse, target: NodeTarget): Promise<void> {
    const { agents, idleTimeoutMs } = this.p;
    const outcome = await forwardRequest(req, res, target, { agents, idleTimeoutMs });
    if (outcome.kind === "unreachable") throw outcome.error;
  }

  /** A fork: relayed to the source's node, or spread over nodes when it lacks room. */
  async #fork(
    req: IncomingMessage,
    res: ServerResponse,
    sandboxId: string,
    caller: Caller,
  ): Promise<void> {
    const { target, location } = await this.p.locator.locate(sandboxId, caller);
    const body = await readBody(req, MAX_FORK_BODY);
    const release = await this.p.teams.admit(location.teamId, forkCountOf(body));
    try {
      await this.#spreadFork(req, res, body, sandboxId, target, location);
    } finally {
      release();
    }
  }

  async #spreadFork(
    req: IncomingMessage,
    res: ServerResponse,
    body: Buffer,
    sandboxId: string,
    target: NodeTarget,
    location: SandboxLocation,
  ): Promise<void> {
    const { agents, idleTimeoutMs } = this.p;
    const spread = await forkAcrossNodes(res, body, sandboxId, location, {
      directory: this.p.directory,
      internal: this.p.internal,
      heartbeatTimeoutMs: this.p.heartbeatTimeoutMs,
      timeoutMs: idleTimeoutMs,
      logger: this.p.logger,
    });
    if (spread) return;
    const outcome = await forwardRequest(req, res, target, { agents, body, idleTimeoutMs });
    if (outcome.kind === "unreachable") throw outcome.error;
  }

  async #nodeAction(res: ServerResponse, nodeId: string, action: string): Promise<void> {
    const state = action === "drain" ? "draining" : action === "undrain" ? "up" : undefined;
    if (!state)
      throw new WarrenError("route_not_found", `no node action '${action}': drain or undrain`);
    const node = await this.p.directory.node(nodeId);
    if (!node) throw new WarrenError("not_found", `node ${nodeId} not found`);
    await this.p.cluster.setNodeState(nodeId, state);
    await this.p.directory.refresh();
    // The node acts at once; should it not hear this, its next heartbeat reads the state.
    if (node.state !== "down") {
      const target = { nodeId, url: node.url };
      const { internal } = this.p;
      await (state === "draining"
        ? internal.drain(target, NODE_ACTION_TIMEOUT_MS)
        : internal.undrain(target, NODE_ACTION_TIMEOUT_MS)
      ).catch((err: unknown) =>
        this.p.logger.warn({ err, nodeId, action }, "gateway.node_action_unheard"),
      );
    }
    res.statusCode = 204;
    res.end();
  }
}

function pathOf(req: IncomingMessage): string {
  return requestUrl(req).pathname;
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

/** A request whose Connection header names routing headers, refused (400) whatever it is. */
function routingHopRefusal(names: readonly string[]): WarrenError {
  return new WarrenError(
    "invalid_argument",
    `Connection names ${names.join(", ")}: the routing headers Host and E2b-Sandbox-* are end-to-end, remove them from Connection`,
  );
}

/** Sandbox traffic carries no API key: the node checks the sandbox's own tokens. */
const SANDBOX_TRAFFIC: Caller = { teamId: undefined, admin: false };

/** Children a fork body asks for (1 when absent or unreadable: the node refuses a bad body). */
function forkCountOf(body: Buffer): number {
  try {
    const count = (JSON.parse(body.toString("utf8")) as { count?: unknown } | null)?.count;
    return typeof count === "number" && Number.isInteger(count) && count > 0 ? count : 1;
  } catch {
    return 1;
  }
}
