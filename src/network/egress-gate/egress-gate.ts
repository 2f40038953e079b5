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
import { decide, limitsAllow, type Resolve } from "./decide.js";
import { answerQuery, MAX_QUERY_BYTES } from "./dns-answers.js";
import { type DomainPattern, parseDomainPattern } from "./domains.js";
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
  readonly logger?: Logger;
}

interface GateConnection {
  readonly guest: Socket;
  readonly upstream: Socket;
  readonly name: string | undefined;
  readonly destination: string;
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
      const verdict = await decide(
        { destination: connection.destination, name: connection.name },
        policy,
        this.#domains,
        this.#o.limits(),
        this.#resolve,
      );
      if (!verdict.allow) this.#cut(connection);
    }
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
    if (this.#open.size >= MAX_CONNECTIONS) return void guest.resetAndDestroy();
    let destination: { address: string; port: number };
    try {
      destination = originalDestination(guest);
    } catch {
      return void guest.resetAndDestroy();
    }
    const head = await this.#firstBytes(guest);
    const sniffed = sniffName(head);
    const name = sniffed.kind === "name" ? sniffed.name : undefined;
    const verdict = await decide(
      { destination: destination.address, name },
      this.#policy,
      this.#domains,
      this.#o.limits(),
      this.#resolve,
    );
    const fields = {
      netns: this.#o.netns,
      name,
      destination: `${destination.address}:${destination.port}`,
    };
    if (!verdict.allow || guest.destroyed) {
      // Debug: a guest connecting in a loop must not flood the server's log.
      this.#o.logger?.debug(
        { ...fields, reason: verdict.allow ? "guest gone" : verdict.reason },
        "egress_gate.refused",
      );
      return void guest.resetAndDestroy();
    }
    const upstream = connect({ host: verdict.address, port: destination.port });
    const connection: GateConnection = { guest, upstream, name, destination: destination.address };
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
    this.#o.logger?.debug(
      { ...fields, to: verdict.address, by: verdict.by },
      "egress_gate.allowed",
    );
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
    if (!this.#open.delete(connection)) return;
    connection.upstream.destroy();
    if (!connection.guest.destroyed) connection.guest.resetAndDestroy();
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
