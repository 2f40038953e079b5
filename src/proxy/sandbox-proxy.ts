import { Agent, type IncomingMessage, type ServerResponse } from "node:http";
import { Agent as TlsAgent } from "node:https";
import type { Duplex } from "node:stream";
import { connect as tlsConnect } from "node:tls";
import type { ProxyRoute, SandboxRouter } from "../orchestrator/types.js";
import { ENVD_PORT, isSandboxHost, parseTarget } from "../protocol/index.js";
import {
  type Cut,
  DEFAULT_MAX_RESPONSE_HEAD_BYTES,
  forwardingOf,
  type ProxyErrorBody,
  proxyRefusal,
  relayRequest,
  relayRequestHeaders,
  relayUpgrade,
  requestPath,
  sendError,
  writeSocketError,
} from "../relay/index.js";
import { type Logger, silentLogger, WarrenError } from "../shared/index.js";
import { isInternalEnvdPath, ROUTING_HEADERS, withoutCallerCredentials } from "./access.js";
import { durationMs, type Exchange, requestOptions, upgradeOptions } from "./exchange.js";
import { openLoopbackTunnel } from "./loopback-tunnel.js";
import { signedFileRequest, signedWith } from "./signed-file.js";
import { mayWake, single, trafficTokenRefusal, WAKE_REFUSED } from "./traffic-access.js";

export interface SandboxProxyOptions {
  /**
   * Where each sandbox's ports are; undefined while the node starts (every sandbox is then
   * not found). Whoever owns the router tells the proxy when a sandbox stops (`sandboxStopped`).
   */
  readonly router: () => SandboxRouter | undefined;
  /**
   * The sandbox domain (`<port>-<id>.<domain>`). Set: Host routing only accepts names under
   * it, and header routing `sandbox.<domain>`. Default: any domain.
   */
  readonly domain?: string;
  /** pino-compatible. Default: silent. */
  readonly logger?: Logger;
  /**
   * Idle time after which a pooled upstream connection is closed, and an exchange with no
   * bytes either way is cut (E2B's orchestrator proxy: 620 s). Default 620_000.
   */
  readonly idleTimeoutMs?: number;
  /**
   * Longest a sandbox's server may take to send a whole response head, counted from the
   * request's last byte: 504 past it. A head trickled a byte at a time never looks idle.
   * Default 620_000 (what a silent server met under the idle timeout alone).
   */
  readonly headTimeoutMs?: number;
  /** Largest response head taken from a sandbox's server: 502 past it. Default 64 KiB. */
  readonly maxResponseHeadBytes?: number;
  /** Where envd listens at a sandbox's address (its loopback tunnel). Default 49983; tests move it. */
  readonly envdPort?: number;
}

const DEFAULT_IDLE_TIMEOUT_MS = 620_000;

/** Longest envd may take to reach a port on the guest's loopback. */
const LOOPBACK_TUNNEL_TIMEOUT_MS = 10_000;

/** One sandbox's keep-alive pool and the exchanges open with it. */
interface SandboxConnections {
  /** The sandbox's address the pool connects to. */
  readonly host: string;
  readonly agent: Agent;
  /** For its `httpsPorts`: TLS, the guest's certificate not verified (E2B's behaviour). */
  readonly tlsAgent: TlsAgent;
  /** What to do to each open exchange when the sandbox stops. */
  readonly open: Set<(why: Cut) => void>;
}

type Admission =
  | { readonly ok: true; readonly exchange: Exchange }
  | { readonly ok: false; readonly body: ProxyErrorBody };

/**
 * The reverse proxy in front of every sandbox's envd and app ports. The node server hands
 * it the requests and upgrades `matches()` accepts; it routes them by Host
 * (`<port>-<id>.<domain>`) or `e2b-sandbox-*` headers, asks the router where the sandbox
 * is, and streams both ways. Each sandbox has its own connection pool, dropped together
 * with its open streams when the sandbox stops.
 */
export class SandboxProxy {
  readonly #router: () => SandboxRouter | undefined;
  readonly #domain: string | undefined;
  readonly #logger: Logger;
  readonly #idleTimeoutMs: number;
  readonly #headTimeoutMs: number;
  readonly #maxResponseHeadBytes: number;
  readonly #envdPort: number;
  readonly #sandboxes = new Map<string, SandboxConnections>();
  #closed = false;

  constructor(options: SandboxProxyOptions) {
    this.#idleTimeoutMs = positive("idleTimeoutMs", options.idleTimeoutMs, DEFAULT_IDLE_TIMEOUT_MS);
    this.#headTimeoutMs = positive("headTimeoutMs", options.headTimeoutMs, DEFAULT_IDLE_TIMEOUT_MS);
    this.#maxResponseHeadBytes = positive(
      "maxResponseHeadBytes",
      options.maxResponseHeadBytes,
      DEFAULT_MAX_RESPONSE_HEAD_BYTES,
    );
    this.#envdPort = options.envdPort ?? ENVD_PORT;
    this.#router = options.router;
    this.#domain = options.domain;
    this.#logger = options.logger ?? silentLogger;
  }

  /**
   * True when the request is for a sandbox: an `e2b-sandbox-id` header, a `<port>-<id>`
   * Host, or a signed file URL (plain mode: its signature says whose it is).
   */
  matches(req: IncomingMessage): boolean {
    return this.#routed(req) || signedFileRequest(req) !== undefined;
  }

  /** Whether the request names its sandbox (header or Host). */
  #routed(req: IncomingMessage): boolean {
    return (
      req.headers["e2b-sandbox-id"] !== undefined || isSandboxHost(req.headers.host, this.#domain)
    );
  }

  /** Forwards a plain request. Never throws; every failure answers JSON or destroys `res`. */
  handleRequest(req: IncomingMessage, res: ServerResponse): void {
    const started = performance.now();
    req.on("error", () => {});
    res.on("error", () => {});
    this.#admit(req, started, false)
      .then((admission) => {
        // The client may have left while the router resumed the sandbox.
        if (res.destroyed || res.headersSent || req.socket.destroyed) return;
        if (!admission.ok) {
          this.#refused(req, admission.body, started);
          sendError(res, proxyRefusal(admission.body));
          return;
        }
        const { exchange } = admission;
        void relayRequest(req, res, exchange.upstream, requestOptions(exchange, req));
      })
      .catch((err: unknown) =>
        this.#failed(err, started, (body) => sendError(res, proxyRefusal(body))),
      );
  }

  /** Forwards an Upgrade request, then pipes the two sockets. Never throws. */
  handleUpgrade(req: IncomingMessage, socket: Duplex, head: Buffer): void {
    const started = performance.now();
    socket.on("error", () => {});
    this.#admit(req, started, true)
      .then((admission) => {
        if (socket.destroyed) return;
        if (!admission.ok) {
          this.#refused(req, admission.body, started);
          writeSocketError(socket, proxyRefusal(admission.body));
          return;
        }
        const { exchange } = admission;
        void relayUpgrade(req, socket, head, exchange.upstream, upgradeOptions(exchange, req));
      })
      .catch((err: unknown) =>
        this.#failed(err, started, (body) => writeSocketError(socket, proxyRefusal(body))),
      );
  }

  /** Drops every pool and cuts every open exchange; later requests get 503. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const sandboxId of [...this.#sandboxes.keys()]) this.#drop(sandboxId);
  }

  /** Decides whether and where a request goes. */
  async #admit(req: IncomingMessage, started: number, upgrade: boolean): Promise<Admission> {
    if (this.#closed) {
      return { ok: false, body: { message: "The proxy is shutting down", code: 503 } };
    }
    const parsed = this.#target(req);
    if (!parsed.ok) return { ok: false, body: parsed.body };
    const { sandboxId, port } = parsed.target;
    const path = requestPath(req.url);
    if (path === undefined) {
      return { ok: false, body: { sandboxId, message: "Invalid request target", code: 400 } };
    }
    // Checked before routing: an internal path must not even resume a paused sandbox.
    if (port === ENVD_PORT && isInternalEnvdPath(path)) {
      const message = "This envd endpoint is reserved for the orchestrator";
      return { ok: false, body: { sandboxId, message, code: 404 } };
    }
    let result: Awaited<ReturnType<SandboxRouter["route"]>>;
    try {
      const router = this.#router();
      result = router
        ? await router.route(sandboxId, port, (access) => mayWake(req, port, access))
        : { kind: "not_found" };
    } catch (err) {
      const known = err instanceof WarrenError;
      this.#logger.warn(
        { sandboxId, port, err: err instanceof Error ? err.message : String(err) },
        "proxy.route_failed",
      );
      const message = known ? err.message : "The sandbox could not be routed";
      return { ok: false, body: { sandboxId, message, code: known ? err.status : 500 } };
    }
    if (result.kind === "not_found") {
      return { ok: false, body: { sandboxId, message: "The sandbox was not found", code: 502 } };
    }
    if (result.kind === "conflict") {
      return { ok: false, body: { sandboxId, message: result.message, code: 409 } };
    }
    if (result.kind === "wake_refused") {
      return { ok: false, body: { sandboxId, message: WAKE_REFUSED, code: 403 } };
    }
    if (this.#closed) {
      return { ok: false, body: { message: "The proxy is shutting down", code: 503 } };
    }
    const route = result.route;
    const refusal = trafficTokenRefusal(req, port, route);
    if (refusal !== undefined) {
      return { ok: false, body: { sandboxId, message: refusal, code: 403 } };
    }
    const headers = relayRequestHeaders(withoutCallerCredentials(req.rawHeaders), {
      ...forwardingOf(req),
      host: upstreamHost(req, route, port),
      drop: ROUTING_HEADERS,
      upgrade,
    });
    const connections = this.#connections(sandboxId, route.host);
    const tls = route.https === true;
    const exchange: Exchange = {
      sandboxId,
      port,
      upstream: {
        host: route.host,
        port: route.port,
        path,
        headers,
        ...(tls
          ? { agent: connections.tlsAgent, protocol: "https:" }
          : { agent: connections.agent }),
      },
      idleTimeoutMs: this.#idleTimeoutMs,
      headTimeoutMs: this.#headTimeoutMs,
      maxResponseHeadBytes: this.#maxResponseHeadBytes,
      logger: this.#logger,
      started,
      onNodeOrigin: !isSandboxHost(req.headers.host, this.#domain),
      track(cut) {
        connections.open.add(cut);
        return () => connections.open.delete(cut);
      },
      ...(port !== ENVD_PORT && {
        loopback: async () => {
          const tunnel = await openLoopbackTunnel(route, port, {
            envdPort: this.#envdPort,
            timeoutMs: Math.min(this.#headTimeoutMs, LOOPBACK_TUNNEL_TIMEOUT_MS),
          });
          return tls ? tlsConnect({ socket: tunnel, rejectUnauthorized: false }) : tunnel;
        },
      }),
    };
    return { ok: true, exchange };
  }

  /** The sandbox and port a request is for: named by it, or found by its URL's signature. */
  #target(
    req: IncomingMessage,
  ):
    | { readonly ok: true; readonly target: { sandboxId: string; port: number } }
    | { readonly ok: false; readonly body: ProxyErrorBody } {
    const signed = this.#routed(req) ? undefined : signedFileRequest(req);
    if (signed) {
      const sandboxId = this.#router()?.sandboxWithToken((token) => signedWith(signed, token));
      if (sandboxId === undefined) {
        // envd's answer to a bad signature (no sandbox's token signed it).
        return { ok: false, body: { message: "invalid signature", code: 401 } };
      }
      return { ok: true, target: { sandboxId, port: ENVD_PORT } };
    }
    const parsed = parseTarget({
      host: req.headers.host,
      sandboxId: single(req.headers["e2b-sandbox-id"]),
      sandboxPort: single(req.headers["e2b-sandbox-port"]),
      domain: this.#domain,
    });
    return parsed.ok ? parsed : { ok: false, body: { message: parsed.message, code: 400 } };
  }

  #connections(sandboxId: string, host: string): SandboxConnections {
    let connections = this.#sandboxes.get(sandboxId);
    if (connections?.host !== host) {
      // New, or resumed at another address without a stop seen: nothing pooled is reusable.
      connections?.agent.destroy();
      connections?.tlsAgent.destroy();
      const pooling = {
        keepAlive: true,
        timeout: this.#idleTimeoutMs,
        scheduling: "lifo",
      } as const;
      connections = {
        host,
        agent: new Agent(pooling),
        tlsAgent: new TlsAgent({ ...pooling, rejectUnauthorized: false }),
        open: connections?.open ?? new Set(),
      };
      this.#sandboxes.set(sandboxId, connections);
    }
    return connections;
  }

  /** The sandbox stopped (killed, paused, lost): its pooled connections and streams end. */
  sandboxStopped(sandboxId: string): void {
    const cut = this.#drop(sandboxId);
    if (cut !== undefined) this.#logger.info({ sandboxId, cut }, "proxy.sandbox_stopped");
  }

  /** Destroys the sandbox's pool and cuts its open exchanges; returns how many were cut. */
  #drop(sandboxId: string): number | undefined {
    const connections = this.#sandboxes.get(sandboxId);
    if (!connections) return undefined;
    this.#sandboxes.delete(sandboxId);
    const open = [...connections.open];
    connections.open.clear();
    const why: Cut = {
      outcome: "sandbox_stopped",
      refusal: { sandboxId, message: "The sandbox was not found", code: 502 },
    };
    for (const cut of open) cut(why);
    connections.agent.destroy();
    connections.tlsAgent.destroy();
    return open.length;
  }

  #refused(req: IncomingMessage, body: ProxyErrorBody, started: number): void {
    const fields = { sandboxId: body.sandboxId, status: body.code, method: req.method };
    this.#logger.debug(
      { ...fields, message: body.message, durationMs: durationMs(started) },
      "proxy.refused",
    );
  }

  /** A bug: answers 500 if it still can. */
  #failed(err: unknown, started: number, answer: (body: ProxyErrorBody) => void): void {
    this.#logger.warn(
      { err: err instanceof Error ? err.message : String(err), durationMs: durationMs(started) },
      "proxy.internal_error",
    );
    const body = { message: "Internal proxy error", code: 500 };
    try {
      answer(body);
    } catch {
      // The client is gone; nothing left to answer.
    }
  }
}

/** The Host the sandbox sees: `maskRequestHost` on app ports when set, else the original. */
function upstreamHost(req: IncomingMessage, route: ProxyRoute, port: number): string {
  if (port !== ENVD_PORT && route.maskRequestHost) {
    // biome-ignore lint/suspicious/noTemplateCurlyInString: E2B's literal placeholder.
    return route.maskRequestHost.replaceAll("${PORT}", String(port));
  }
  return req.headers.host ?? `${route.host}:${route.port}`;
}

function positive(name: string, value: number | undefined, fallback: number): number {
  const chosen = value ?? fallback;
  if (!Number.isFinite(chosen) || chosen <= 0) {
    throw new WarrenError("invalid_argument", `${name} must be a number greater than 0`);
  }
  return chosen;
}
