import { createSocket, type Socket as UdpSocket } from "node:dgram";
import { type AddressInfo, createServer, type Server, type Socket } from "node:net";
import {
  type DomainPattern,
  normalizeHostName,
  parseDomainPattern,
} from "../../shared/domain-patterns.js";
import type { Logger } from "../../shared/index.js";
import type { EgressPolicy } from "../egress-policy.js";
import { originalDestination } from "../listen-in-namespace.js";
import type { EgressLimits } from "../netns-rules.js";
import { decide, decideRuled, type GateVerdict, limitsAllow, type Resolve } from "./decide.js";
import { answerQuery } from "./dns-answers.js";
import { serveDnsDatagrams, serveDnsStream } from "./dns-server.js";
import { type GateEndpoints, type ListenAt, namespaceEndpoints } from "./endpoints.js";
import { firstBytes } from "./first-bytes.js";
import { serveGuestHttp } from "./guest-http.js";
import { ruleFor } from "./header-rules.js";
import { type GateInterception, interceptTls } from "./intercept.js";
import { resetSocket } from "./reset-socket.js";
import { sniffName } from "./sniff.js";
import { splice } from "./splice.js";

/** Connections through one slot's gate at once, judged or still being read; more are refused. */
const MAX_CONNECTIONS = 512;
/** How long a name's addresses are reused (the TTL of the gate's own DNS answers). */
const RESOLVED_TTL_MS = 30_000;
/** Names remembered at once; the oldest goes first. */
const MAX_RESOLVED = 1024;

export interface EgressGateOptions {
  /** The slot's namespace (logs) and, for `open`, where it listens with its gateway address. */
  readonly netns: string;
  readonly gateway: string;
  /** What no policy opens (read at each decision: the host's addresses change). */
  readonly limits: () => EgressLimits;
  /** The node's resolver for allowed names. */
  readonly resolve: Resolve;
  /** What header rules need (the egress CA, secrets); without it a ruled name is refused. */
  readonly interception?: GateInterception;
  readonly logger?: Logger;
  /** Where it listens; default: in `netns` on `gateway` (tests: loopback). */
  readonly endpoints?: GateEndpoints;
}

/** A gate's three sockets, bound: guests' TCP connections, DNS over TCP, DNS over UDP. */
export interface GateSockets {
  readonly tcp: Server;
  readonly dnsTcp: Server;
  readonly dnsUdp: UdpSocket;
}

/** Which of a gate's stream listeners a connection came in on. */
export type GateListener = "tcp" | "dnsTcp";

interface GateConnection {
  readonly guest: Socket;
  readonly name: string | undefined;
  readonly destination: string;
  /** Terminated for header rules: its address was Warren's pick for the name (decideRuled). */
  readonly ruled: boolean;
  /** Resets both sides. */
  cut(): void;
}

/**
 * One slot's egress gate, listening inside the slot's namespace (in the guest services
 * process on a node: src/guest-services; `open` here for tests and the network's own tier):
 * the TCP connections its nat rules send here (those the egress chain would refuse), let
 * through when their first bytes name an allowed domain (SNI, Host) — to the address Warren
 * resolves — and the guest's DNS queries, answered for allowed names only. Upstream
 * connections leave from the host. `update` applies a new policy to connections already
 * open: those it no longer allows are cut. Everything a guest or an upstream sends is
 * handled here: no error of theirs leaves a listener or a promise of the gate's unhandled.
 */
export class EgressGate {
  readonly #o: EgressGateOptions;
  readonly #originalDestination: GateEndpoints["originalDestination"];
  readonly #tcp: Server;
  readonly #udp: UdpSocket;
  readonly #dnsTcp: Server;
  /** Every connection accepted and not yet closed, judged or not (bounded, cut on close). */
  readonly #accepted = new Set<Socket>();
  readonly #open = new Set<GateConnection>();
  /** Names' addresses as last resolved: the guest's answers and its connections agree. */
  readonly #resolved = new Map<
    string,
    { readonly at: number; readonly addresses: Promise<readonly string[]> }
  >();
  #policy: EgressPolicy;
  #domains: readonly DomainPattern[];
  #closed = false;

  private constructor(
    sockets: GateSockets,
    options: EgressGateOptions,
    policy: EgressPolicy,
    originalDestination: GateEndpoints["originalDestination"],
  ) {
    this.#o = options;
    this.#originalDestination = originalDestination;
    this.#policy = policy;
    this.#domains = patternsOf(policy);
    const logged = (event: string) => (err: Error) =>
      this.#o.logger?.warn({ err, netns: options.netns }, event);
    this.#tcp = sockets.tcp;
    this.#tcp.on("connection", (socket: Socket) => this.accept("tcp", socket));
    this.#tcp.on("error", logged("egress_gate.listener_error"));
    this.#dnsTcp = sockets.dnsTcp;
    this.#dnsTcp.on("connection", (socket: Socket) => this.accept("dnsTcp", socket));
    this.#dnsTcp.on("error", logged("egress_gate.dns_error"));
    this.#udp = sockets.dnsUdp;
    serveDnsDatagrams(this.#udp, (q) => this.#answer(q), this.#o.logger);
    this.#udp.on("error", logged("egress_gate.dns_error"));
  }

  /** Binds its sockets where `options.endpoints` say (in the slot's namespace by default). */
  static async open(options: EgressGateOptions, policy: EgressPolicy): Promise<EgressGate> {
    const endpoints = options.endpoints ?? namespaceEndpoints(options.netns, options.gateway);
    const sockets = await bindGateSockets(endpoints);
    return new EgressGate(sockets, options, policy, endpoints.originalDestination);
  }

  /** Serves sockets bound elsewhere (handed over by the server that made them in the namespace). */
  static serve(sockets: GateSockets, options: EgressGateOptions, policy: EgressPolicy): EgressGate {
    return new EgressGate(
      sockets,
      options,
      policy,
      options.endpoints?.originalDestination ?? originalDestination,
    );
  }

  /** A connection to one of its listeners, accepted by it or by whoever held it before. */
  accept(listener: GateListener, socket: Socket): void {
    if (listener === "tcp") return void this.#onConnection(socket);
    if (!this.#accept(socket)) return;
    serveDnsStream(socket, (q) => this.#answer(q), this.#o.logger);
  }

  /** A new policy: later connections are judged by it, open ones it refuses are cut. */
  async update(policy: EgressPolicy): Promise<void> {
    this.#policy = policy;
    this.#domains = patternsOf(policy);
    for (const connection of [...this.#open]) {
      const verdict = await this.#judge(
        connection.destination,
        connection.name,
        connection.ruled,
      ).catch((): GateVerdict => ({ allow: false, reason: "could not be judged" }));
      if (!verdict.allow) this.#cut(connection);
    }
  }

  async #judge(
    destination: string,
    name: string | undefined,
    ruled: boolean,
  ): Promise<GateVerdict> {
    const limits = this.#o.limits();
    return ruled && name !== undefined
      ? decideRuled(name, this.#policy, this.#domains, limits, this.#resolve)
      : decide({ destination, name }, this.#policy, this.#domains, limits, this.#resolve);
  }

  /** The resolver's answer, reused for RESOLVED_TTL_MS (a failure is not kept). */
  #resolve = (name: string): Promise<readonly string[]> => {
    const key = name.toLowerCase().replace(/\.$/, "");
    const known = this.#resolved.get(key);
    if (known && Date.now() - known.at < RESOLVED_TTL_MS) return known.addresses;
    // A resolver that throws rather than rejects fails this name alone.
    const addresses = Promise.resolve().then(() => this.#o.resolve(key));
    const entry = { at: Date.now(), addresses };
    this.#resolved.delete(key);
    this.#resolved.set(key, entry);
    if (this.#resolved.size > MAX_RESOLVED) {
      this.#resolved.delete(this.#resolved.keys().next().value as string);
    }
    addresses.catch(() => {
      if (this.#resolved.get(key) === entry) this.#resolved.delete(key);
    });
    return addresses;
  };

  async close(): Promise<void> {
    this.#closed = true;
    for (const connection of [...this.#open]) this.#cut(connection);
    // Connections still being read, and DNS over TCP: the listeners close once they are gone.
    for (const socket of [...this.#accepted]) socket.destroy();
    await closeGateSockets({ tcp: this.#tcp, dnsTcp: this.#dnsTcp, dnsUdp: this.#udp });
  }

  /** Where its sockets listen (tests reach a loopback gate there). */
  get addresses(): { tcp: AddressInfo; dnsTcp: AddressInfo; dnsUdp: AddressInfo } {
    return {
      tcp: this.#tcp.address() as AddressInfo,
      dnsTcp: this.#dnsTcp.address() as AddressInfo,
      dnsUdp: this.#udp.address(),
    };
  }

  /** Connections open through the gate now. */
  get connections(): number {
    return this.#open.size;
  }

  /** Counts a new connection in, or resets it when the gate is full or closed. */
  #accept(socket: Socket): boolean {
    socket.on("error", () => {});
    if (this.#closed || this.#accepted.size >= MAX_CONNECTIONS) {
      resetSocket(socket);
      return false;
    }
    this.#accepted.add(socket);
    socket.once("close", () => this.#accepted.delete(socket));
    return true;
  }

  async #onConnection(guest: Socket): Promise<void> {
    if (!this.#accept(guest)) return;
    try {
      await this.#serve(guest);
    } catch (err) {
      // A fault of the gate's own (a limit that cannot be read, say): this connection alone.
      this.#o.logger?.warn({ err, netns: this.#o.netns }, "egress_gate.connection_failed");
      if (!guest.destroyed) resetSocket(guest);
    }
  }

  async #serve(guest: Socket): Promise<void> {
    let destination: { address: string; port: number };
    try {
      destination = this.#originalDestination(guest);
    } catch {
      return void resetSocket(guest);
    }
    const head = await firstBytes(guest);
    const sniffed = sniffName(head);
    const name = sniffed.kind === "name" ? sniffed.name : undefined;
    // Header rules apply to HTTPS alone: their secrets never cross a link in the clear.
    const ruled =
      sniffed.kind === "name" &&
      sniffed.by === "tls" &&
      ruleFor(sniffed.name, this.#policy.headerRules ?? []) !== undefined;
    const verdict = await this.#judge(destination.address, name, ruled);
    const fields = {
      netns: this.#o.netns,
      name,
      destination: `${destination.address}:${destination.port}`,
    };
    const refusal = !verdict.allow
      ? verdict.reason
      : guest.destroyed || this.#closed
        ? "guest gone"
        : ruled && !this.#o.interception
          ? "header rules are not served on this node"
          : undefined;
    if (refusal !== undefined || !verdict.allow) {
      // Debug: a guest connecting in a loop must not flood the server's log.
      this.#o.logger?.debug({ ...fields, reason: refusal }, "egress_gate.refused");
      return void resetSocket(guest);
    }
    this.#o.logger?.debug(
      { ...fields, to: verdict.address, by: verdict.by, ruled },
      "egress_gate.allowed",
    );
    const upstream = { address: verdict.address, port: destination.port };
    if (ruled) {
      await this.#intercept(guest, head, name as string, upstream, destination.address);
    } else if (sniffed.kind === "name" && sniffed.by === "http" && verdict.by === "domain") {
      // Let through for its Host: so must every request after it be (guest-http.ts).
      this.#serveHttp(guest, head, sniffed.name, upstream, destination.address);
    } else {
      this.#splice(guest, head, name, upstream, destination.address);
    }
  }

  /** Bytes both ways between the guest and the upstream it may reach (splice.ts). */
  #splice(
    guest: Socket,
    head: Buffer,
    name: string | undefined,
    to: { address: string; port: number },
    destination: string,
  ): void {
    // An upstream failure cuts both sides (splice reports it only after connecting began).
    const failed = () => this.#cut(connection);
    const connection: GateConnection = {
      guest,
      name,
      destination,
      ruled: false,
      ...splice(guest, head, to, failed),
    };
    this.#track(connection);
  }

  /** A plain HTTP connection let through for its Host: served request by request. */
  #serveHttp(
    guest: Socket,
    head: Buffer,
    name: string,
    to: { address: string; port: number },
    destination: string,
  ): void {
    const host = normalizeHostName(name) as string; // allowed by a domain entry: a host name
    guest.unshift(head);
    const { cut } = serveGuestHttp(
      guest,
      { name: host, address: to.address, port: to.port },
      { logger: this.#o.logger },
    );
    this.#track({ guest, name, destination, ruled: false, cut });
  }

  /** A TLS connection for a name with header rules: terminated here (intercept.ts). */
  async #intercept(
    guest: Socket,
    head: Buffer,
    name: string,
    to: { address: string; port: number },
    destination: string,
  ): Promise<void> {
    const interception = this.#o.interception as GateInterception;
    const host = normalizeHostName(name) as string; // a ruled name is one
    try {
      const { cut } = await interceptTls(
        guest,
        head,
        { name: host, address: to.address, port: to.port },
        {
          interception,
          rule: () => ruleFor(host, this.#policy.headerRules ?? []),
          team: () => this.#policy.secretsOf,
          logger: this.#o.logger,
        },
      );
      this.#track({ guest, name, destination, ruled: true, cut });
    } catch (err) {
      this.#o.logger?.warn({ err, netns: this.#o.netns, name }, "egress_gate.intercept_failed");
      resetSocket(guest);
    }
  }

  /** Counts a relayed connection as open until its guest side closes. */
  #track(connection: GateConnection): void {
    if (connection.guest.destroyed) return void connection.cut();
    this.#open.add(connection);
    connection.guest.once("close", () => this.#open.delete(connection));
  }

  #cut(connection: GateConnection): void {
    if (this.#open.delete(connection)) connection.cut();
  }

  async #answer(query: Buffer): Promise<Buffer | undefined> {
    const policy = this.#policy;
    const limits = this.#o.limits();
    return answerQuery(query, this.#domains, async (name) => {
      const addresses = await this.#resolve(name);
      // The addresses the gate would connect an allowed name to, nothing else.
      return addresses.filter((a) => limitsAllow(a, policy, limits));
    });
  }
}

/**
 * A gate's sockets bound where `endpoints` say, each asked for in turn; if one fails, those
 * already bound are closed.
 */
export async function bindGateSockets(endpoints: GateEndpoints): Promise<GateSockets> {
  // Paused: a connection's bytes wait for the gate to judge it (first-bytes.ts reads them).
  const sockets: GateSockets = {
    tcp: createServer({ pauseOnConnect: true }),
    dnsTcp: createServer(),
    dnsUdp: createSocket("udp4"),
  };
  try {
    await listening(sockets.tcp, endpoints.tcp());
    await listening(sockets.dnsTcp, endpoints.dnsTcp());
    const udp = endpoints.dnsUdp();
    await new Promise<void>((resolve, reject) => {
      sockets.dnsUdp.once("error", reject);
      sockets.dnsUdp.bind("fd" in udp ? udp : { address: udp.host, port: udp.port }, () => {
        sockets.dnsUdp.off("error", reject);
        resolve();
      });
    });
  } catch (err) {
    await closeGateSockets(sockets);
    throw err;
  }
  return sockets;
}

/** Closes a gate's sockets (those never bound included). */
async function closeGateSockets(sockets: GateSockets): Promise<void> {
  const closed = (server: Server) =>
    new Promise<void>((resolve) => (server.listening ? server.close(() => resolve()) : resolve()));
  await Promise.all([
    closed(sockets.tcp),
    closed(sockets.dnsTcp),
    new Promise<void>((resolve) => {
      try {
        sockets.dnsUdp.close(() => resolve());
      } catch {
        resolve(); // never bound
      }
    }),
  ]);
}

/** Listens at `at`, or rejects with the listener's error. */
function listening(server: Server, at: ListenAt): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(at, () => {
      server.off("error", reject);
      resolve();
    });
  });
}

function patternsOf(policy: EgressPolicy): DomainPattern[] {
  return (policy.allowDomains ?? []).flatMap((entry) => parseDomainPattern(entry) ?? []);
}
