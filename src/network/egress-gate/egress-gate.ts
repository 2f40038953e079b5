import { createSocket, type Socket as UdpSocket } from "node:dgram";
import { connect, createServer, type Server, type Socket } from "node:net";
import type { Logger } from "../../shared/index.js";
import type { EgressPolicy } from "../egress-policy.js";
import {
  bindUdpInNamespace,
  listenInNamespace,
  originalDestination,
} from "../listen-in-namespace.js";
import { type EgressLimits, GATE_DNS_PORT, GATE_TCP_PORT } from "../netns-rules.js";
import { decide, decideRuled, type GateVerdict, limitsAllow, type Resolve } from "./decide.js";
import { answerQuery, MAX_QUERY_BYTES } from "./dns-answers.js";
import { type DomainPattern, normalizeHostName, parseDomainPattern } from "./domains.js";
import { ruleFor } from "./header-rules.js";
import { type GateInterception, interceptTls } from "./intercept.js";
import { resetSocket } from "./reset-socket.js";
import { MAX_SNIFF_BYTES, sniffName } from "./sniff.js";

/** A client that names no host within this long is judged by its address alone. */
const SNIFF_TIMEOUT_MS = 3_000;
/** Connections through one slot's gate at once; more are refused. */
const MAX_CONNECTIONS = 512;
/** An upstream that does not accept within this long fails the guest's connection. */
const CONNECT_TIMEOUT_MS = 10_000;
/** How long a name's addresses are reused (the TTL of the gate's own DNS answers). */
const RESOLVED_TTL_MS = 30_000;
/** Names remembered at once; the oldest goes first. */
const MAX_RESOLVED = 1024;

export interface EgressGateOptions {
  /** The slot's namespace and gateway address, where the gate listens. */
  readonly netns: string;
  readonly gateway: string;
  /** What no policy opens (read at each decision: the host's addresses change). */
  readonly limits: () => EgressLimits;
  /** The node's resolver for allowed names. */
  readonly resolve: Resolve;
  /** What header rules need (the egress CA, secrets); without it a ruled name is refused. */
  readonly interception?: GateInterception;
  readonly logger?: Logger;
}

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
 * One slot's egress gate, in the server's process, listening inside the slot's namespace:
 * the TCP connections its nat rules send here (those the egress chain would refuse), let
 * through when their first bytes name an allowed domain (SNI, Host) — to the address Warren
 * resolves — and the guest's DNS queries, answered for allowed names only. Upstream
 * connections leave from the host. `update` applies a new policy to connections already
 * open: those it no longer allows are cut.
 */
export class EgressGate {
  readonly #o: EgressGateOptions;
  readonly #tcp: Server;
  readonly #udp: UdpSocket;
  readonly #dnsTcp: Server;
  readonly #open = new Set<GateConnection>();
  /** Names' addresses as last resolved: the guest's answers and its connections agree. */
  readonly #resolved = new Map<
    string,
    { readonly at: number; readonly addresses: Promise<readonly string[]> }
  >();
  #policy: EgressPolicy;
  #domains: readonly DomainPattern[];

  private constructor(options: EgressGateOptions, policy: EgressPolicy) {
    this.#o = options;
    this.#policy = policy;
    this.#domains = patternsOf(policy);
    this.#tcp = createServer({ pauseOnConnect: true }, (socket) => void this.#onConnection(socket));
    this.#dnsTcp = createServer((socket) => this.#onDnsStream(socket));
    this.#udp = createSocket("udp4");
    this.#udp.on("message", (query, from) => void this.#onDatagram(query, from));
    this.#udp.on("error", (err) =>
      this.#o.logger?.warn({ err, netns: options.netns }, "egress_gate.dns_error"),
    );
  }

  static async open(options: EgressGateOptions, policy: EgressPolicy): Promise<EgressGate> {
    const gate = new EgressGate(options, policy);
    const { netns, gateway } = options;
    const fds: number[] = [];
    try {
      fds.push(listenInNamespace(netns, gateway, GATE_TCP_PORT));
      fds.push(listenInNamespace(netns, gateway, GATE_DNS_PORT));
      fds.push(bindUdpInNamespace(netns, gateway, GATE_DNS_PORT));
      const [tcp, dnsTcp, udp] = fds as [number, number, number];
      await new Promise<void>((resolve) => gate.#tcp.listen({ fd: tcp }, resolve));
      await new Promise<void>((resolve) => gate.#dnsTcp.listen({ fd: dnsTcp }, resolve));
      await new Promise<void>((resolve) => gate.#udp.bind({ fd: udp }, resolve));
    } catch (err) {
      await gate.close();
      throw err;
    }
    return gate;
  }

  /** A new policy: later connections are judged by it, open ones it refuses are cut. */
  async update(policy: EgressPolicy): Promise<void> {
    this.#policy = policy;
    this.#domains = patternsOf(policy);
    for (const connection of [...this.#open]) {
      const verdict = await this.#judge(connection.destination, connection.name, connection.ruled);
      if (!verdict.allow) this.#cut(connection);
    }
  }

  #judge(destination: string, name: string | undefined, ruled: boolean): Promise<GateVerdict> {
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
    const addresses = this.#o.resolve(key);
    this.#resolved.delete(key);
    this.#resolved.set(key, { at: Date.now(), addresses });
    if (this.#resolved.size > MAX_RESOLVED) {
      this.#resolved.delete(this.#resolved.keys().next().value as string);
    }
    addresses.catch(() => this.#resolved.delete(key));
    return addresses;
  };

  async close(): Promise<void> {
    for (const connection of [...this.#open]) this.#cut(connection);
    await Promise.all([
      new Promise<void>((resolve) =>
        this.#tcp.listening ? this.#tcp.close(() => resolve()) : resolve(),
      ),
      new Promise<void>((resolve) =>
        this.#dnsTcp.listening ? this.#dnsTcp.close(() => resolve()) : resolve(),
      ),
      new Promise<void>((resolve) => {
        try {
          this.#udp.close(() => resolve());
        } catch {
          resolve(); // never bound
        }
      }),
    ]);
  }

  /** Connections open through the gate now. */
  get connections(): number {
    return this.#open.size;
  }

  async #onConnection(guest: Socket): Promise<void> {
    guest.on("error", () => {});
    if (this.#open.size >= MAX_CONNECTIONS) return void resetSocket(guest);
    let destination: { address: string; port: number };
    try {
      destination = originalDestination(guest);
    } catch {
      return void resetSocket(guest);
    }
    const head = await this.#firstBytes(guest);
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
      : guest.destroyed
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
    if (ruled) await this.#intercept(guest, head, name as string, upstream, destination.address);
    else this.#splice(guest, head, name, upstream, destination.address);
  }

  /** Bytes both ways between the guest and the upstream it may reach. */
  #splice(
    guest: Socket,
    head: Buffer,
    name: string | undefined,
    to: { address: string; port: number },
    destination: string,
  ): void {
    const upstream = connect({ host: to.address, port: to.port });
    const connection: GateConnection = {
      guest,
      name,
      destination,
      ruled: false,
      cut: () => {
        upstream.destroy();
        if (!guest.destroyed) resetSocket(guest);
      },
    };
    this.#open.add(connection);
    // A failure resets both sides; an end is relayed (the pipes half-close), and the
    // connection is forgotten once the guest's side has closed.
    const fail = () => this.#cut(connection);
    upstream.setTimeout(CONNECT_TIMEOUT_MS, fail);
    upstream.once("connect", () => {
      upstream.setTimeout(0);
      upstream.write(head);
      guest.pipe(upstream);
      upstream.pipe(guest);
      guest.resume();
    });
    upstream.on("error", fail);
    upstream.once("close", (hadError) => {
      if (hadError) fail();
    });
    guest.once("close", () => {
      this.#open.delete(connection);
      upstream.destroy();
    });
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
      const connection: GateConnection = { guest, name, destination, ruled: true, cut };
      this.#open.add(connection);
      guest.once("close", () => this.#open.delete(connection));
      if (guest.destroyed) this.#open.delete(connection);
    } catch (err) {
      this.#o.logger?.warn({ err, netns: this.#o.netns, name }, "egress_gate.intercept_failed");
      resetSocket(guest);
    }
  }

  /** What the guest sends first, until it names a host, shows it never will, or waits too long. */
  #firstBytes(guest: Socket): Promise<Buffer> {
    return new Promise((resolve) => {
      let head = Buffer.alloc(0);
      const done = () => {
        clearTimeout(timer);
        guest.off("data", onData);
        guest.off("close", done);
        guest.pause();
        resolve(head);
      };
      const onData = (chunk: Buffer) => {
        head = Buffer.concat([head, chunk]);
        if (head.length >= MAX_SNIFF_BYTES || sniffName(head).kind !== "more") done();
      };
      const timer = setTimeout(done, SNIFF_TIMEOUT_MS);
      guest.on("data", onData);
      guest.once("close", done);
      guest.resume();
    });
  }

  #cut(connection: GateConnection): void {
    if (this.#open.delete(connection)) connection.cut();
  }

  async #onDatagram(query: Buffer, from: { address: string; port: number }): Promise<void> {
    const answer = await this.#answer(query);
    if (answer) this.#udp.send(answer, from.port, from.address);
  }

  /** DNS over TCP: two-byte length prefixes, one query at a time. */
  #onDnsStream(socket: Socket): void {
    socket.on("error", () => {});
    socket.setTimeout(10_000, () => socket.destroy());
    let buffered = Buffer.alloc(0);
    let busy = false;
    const next = async () => {
      if (busy || buffered.length < 2) return;
      const length = buffered.readUInt16BE(0);
      if (length > MAX_QUERY_BYTES) return void socket.destroy();
      if (buffered.length < 2 + length) return;
      const query = buffered.subarray(2, 2 + length);
      buffered = buffered.subarray(2 + length);
      busy = true;
      const answer = await this.#answer(query);
      busy = false;
      if (!answer) return void socket.destroy();
      const prefix = Buffer.alloc(2);
      prefix.writeUInt16BE(answer.length);
      socket.write(Buffer.concat([prefix, answer]));
      await next();
    };
    socket.on("data", (chunk: Buffer) => {
      buffered = Buffer.concat([buffered, chunk]);
      if (buffered.length > 2 + MAX_QUERY_BYTES * 2) return void socket.destroy();
      void next();
    });
  }

  #answer(query: Buffer): Promise<Buffer | undefined> {
    const policy = this.#policy;
    const limits = this.#o.limits();
    return answerQuery(query, this.#domains, async (name) => {
      const addresses = await this.#resolve(name);
      // The addresses the gate would connect an allowed name to, nothing else.
      return addresses.filter((a) => limitsAllow(a, policy, limits));
    });
  }
}

function patternsOf(policy: EgressPolicy): DomainPattern[] {
  return (policy.allowDomains ?? []).flatMap((entry) => parseDomainPattern(entry) ?? []);
}
