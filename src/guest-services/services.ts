import type { Socket as UdpSocket } from "node:dgram";
import type { Server, Socket } from "node:net";
import { postWebhook } from "../events/post.js";
import type { EgressGate, GateListener } from "../network/index.js";
import { validateEgressPolicy } from "../network/index.js";
import type { Logger } from "../shared/index.js";
import { type NfsService, serveNfsExport } from "../volumes/index.js";
import { Asks } from "./asks.js";
import type { ListenerName, ServiceKind, ServicesEvent, ServicesRequest } from "./messages.js";
import { GateShared, serveSlotGate } from "./slot-gate.js";

type Handle = Server | Socket | UdpSocket;
type Request<T extends ServicesRequest["type"]> = Extract<ServicesRequest, { type: T }>;

/** A slot's service here: what it serves with, and the listeners it was handed. */
type Entry =
  | { readonly kind: "nfs"; readonly service: Promise<NfsService>; readonly listeners: Handles }
  | { readonly kind: "gate"; readonly gate: EgressGate; readonly listeners: Handles };

type Handles = Partial<Record<ListenerName, Server | UdpSocket>>;

/**
 * The guest-facing services of one node, in their own process: each slot's NFS (its
 * sandbox's volumes) and egress gate (DNS, SNI/Host, TLS for header rules), on the listeners
 * the server made in the slot's namespace and handed over; and webhook deliveries' POSTs,
 * whose receivers are a tenant's choice. What a guest or an upstream sends
 * is parsed here and nowhere else; a connection the server accepted before a handover comes
 * in as a socket it never read.
 */
export class GuestServiceTable {
  readonly #entries = new Map<string, Entry>();
  /** Listeners handed over ahead of their service's open. */
  readonly #pending = new Map<string, Handles>();
  readonly #asks: Asks;
  #gates: GateShared | undefined;

  constructor(
    private readonly send: (event: ServicesEvent) => void,
    private readonly logger: Logger,
    private readonly options: { readonly stallMs?: number } = {},
  ) {
    this.#asks = new Asks(send);
  }

  handle(request: ServicesRequest, handle: Handle | undefined): void {
    switch (request.type) {
      case "listener":
        this.#listener(request, handle);
        break;
      case "connection":
        this.#connection(request, handle);
        break;
      case "gate.settings":
        this.#gates = new GateShared(request.settings, this.#asks);
        break;
      case "nfs.open":
        this.#openNfs(request);
        break;
      case "gate.open":
        this.#openGate(request);
        break;
      case "gate.update":
        this.#updateGate(request);
        break;
      case "close":
        this.#close(request.service, request.slot);
        break;
      case "post":
        void postWebhook(request.request).then((result) =>
          this.send(
            "status" in result
              ? { type: "posted", id: request.id, status: result.status }
              : { type: "failed", id: request.id, message: result.error.slice(0, 1024) },
          ),
        );
        break;
      case "answer":
      case "refusal":
        this.#asks.settle(request);
        break;
    }
  }

  /** Services open now (tests, logs). */
  get size(): number {
    return this.#entries.size;
  }

  #listener(request: Request<"listener">, handle: Handle | undefined): void {
    if (!handle || isStream(handle)) return;
    const key = keyOf(request.service, request.slot);
    const pending = this.#pending.get(key) ?? {};
    closeHandle(pending[request.name]);
    pending[request.name] = handle;
    this.#pending.set(key, pending);
  }

  #openNfs(request: Request<"nfs.open">): void {
    const { slot, id } = request;
    const listeners = this.#take("nfs", slot);
    const service = serveNfsExport(request.spec, this.options);
    const entry: Entry = { kind: "nfs", service, listeners };
    this.#entries.set(keyOf("nfs", slot), entry);
    // Accepting from now on (this process's: the server closed its own copy of the socket).
    const listener = listeners.nfs;
    if (listener && isServer(listener)) {
      listener.on("error", (err) =>
        this.logger.warn({ slot, err }, "guest_services.accept_failed"),
      );
      listener.on("connection", (socket: Socket) => this.#accept(entry, "nfs", socket));
    }
    service.then(
      () => this.send({ type: "done", id }),
      (err: unknown) => this.#failed(id, "nfs", slot, entry, err),
    );
  }

  #openGate(request: Request<"gate.open">): void {
    const { slot, id } = request;
    const listeners = this.#take("gate", slot);
    const { tcp, dnsTcp, dnsUdp } = listeners;
    try {
      if (!this.#gates) throw new Error("no gate settings yet");
      if (!tcp || !isServer(tcp) || !dnsTcp || !isServer(dnsTcp) || !dnsUdp || isServer(dnsUdp)) {
        throw new Error("a listener is missing");
      }
      const gate = serveSlotGate(
        slot,
        request.gate,
        { tcp, dnsTcp, dnsUdp },
        this.#gates,
        this.logger,
      );
      this.#entries.set(keyOf("gate", slot), { kind: "gate", gate, listeners });
      this.send({ type: "done", id });
    } catch (err) {
      for (const listener of Object.values(listeners)) closeHandle(listener);
      this.#failed(id, "gate", slot, undefined, err);
    }
  }

  #updateGate(request: Request<"gate.update">): void {
    const entry = this.#entries.get(keyOf("gate", request.slot));
    const fail = (err: unknown) => this.#failed(request.id, "gate", request.slot, undefined, err);
    if (entry?.kind !== "gate") {
      fail(new Error("no gate open"));
      return;
    }
    // Checked as the server checked it: a policy this process cannot read is not half-applied.
    Promise.resolve()
      .then(() => entry.gate.update(validateEgressPolicy(request.policy)))
      .then(() => this.send({ type: "done", id: request.id }), fail);
  }

  /** The listeners handed over for a service, and the service opened before on them closed. */
  #take(kind: ServiceKind, slot: string): Handles {
    const key = keyOf(kind, slot);
    // An open again (the server came back) replaces the old one.
    this.#close(kind, slot, { keepPending: true });
    const listeners = this.#pending.get(key) ?? {};
    this.#pending.delete(key);
    return listeners;
  }

  #close(kind: ServiceKind, slot: string, options: { keepPending?: boolean } = {}): void {
    const key = keyOf(kind, slot);
    if (!options.keepPending) {
      for (const listener of Object.values(this.#pending.get(key) ?? {})) closeHandle(listener);
      this.#pending.delete(key);
    }
    const entry = this.#entries.get(key);
    if (!entry) return;
    this.#entries.delete(key);
    if (entry.kind === "gate") {
      // The gate closes its own sockets (the listeners it was given).
      void entry.gate.close();
      return;
    }
    for (const listener of Object.values(entry.listeners)) closeHandle(listener);
    void entry.service.then(
      (s) => s.close(),
      () => {},
    );
  }

  #failed(
    id: number,
    kind: ServiceKind,
    slot: string,
    entry: Entry | undefined,
    err: unknown,
  ): void {
    if (entry && this.#entries.get(keyOf(kind, slot)) === entry) this.#close(kind, slot);
    const message = err instanceof Error ? err.message : String(err);
    this.logger.warn({ slot, service: kind, err: message }, "guest_services.failed");
    this.send({ type: "failed", id, message: message.slice(0, 1024) });
  }

  #connection(request: Request<"connection">, handle: Handle | undefined): void {
    if (!handle || !isStream(handle)) return;
    handle.on("error", () => {});
    const entry = this.#entries.get(keyOf(request.service, request.slot));
    if (!entry) return void handle.destroy();
    this.#accept(entry, request.name, handle);
  }

  #accept(entry: Entry, name: ListenerName, socket: Socket): void {
    socket.on("error", () => {});
    if (entry.kind === "gate") {
      if (name === "tcp" || name === "dnsTcp") entry.gate.accept(name as GateListener, socket);
      else socket.destroy();
      return;
    }
    entry.service.then(
      (s) => s.accept(socket),
      () => socket.destroy(),
    );
  }
}

function keyOf(kind: ServiceKind, slot: string): string {
  return `${kind}:${slot}`;
}

function isStream(handle: Handle): handle is Socket {
  return "write" in handle && "remoteAddress" in handle;
}

function isServer(handle: Handle): handle is Server {
  return "listen" in handle && !("write" in handle);
}

function closeHandle(handle: Server | UdpSocket | undefined): void {
  try {
    handle?.close();
  } catch {
    // a UDP socket closed already
  }
}
