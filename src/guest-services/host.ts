import type { ChildProcess } from "node:child_process";
import { createSocket, type Socket as UdpSocket } from "node:dgram";
import { closeSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import type { PostRequest, PostResult } from "../events/post.js";
import {
  bindUdpInNamespace,
  type EgressPolicy,
  GATE_DNS_PORT,
  GATE_TCP_PORT,
  type GateHost,
  type GateSlot,
  listenInNamespace,
  type OpenGate,
} from "../network/index.js";
import { type Logger, WarrenError } from "../shared/index.js";
import type { NfsExport } from "../volumes/index.js";
import { answerAsk, type GateSupplies } from "./gate-asks.js";
import { launchServices, type ServicesLaunch } from "./launch.js";
import {
  type Ask,
  isServicesEvent,
  type ListenerName,
  type ServiceKind,
  type ServicesEvent,
  type ServicesRequest,
} from "./messages.js";

export interface GuestServicesOptions extends ServicesLaunch {
  readonly logger: Logger;
  /** Delay before starting it again after it died, doubling up to `max` while it keeps dying. */
  readonly restartDelayMs?: { readonly first: number; readonly max: number };
  /** How long it may take to start, or to open a slot's service. */
  readonly answerTimeoutMs?: number;
}

/** Where a listener is made: a socket made in a slot's namespace, or an address (tests). */
export type Listen = { readonly fd: number } | { readonly host: string; readonly port: number };

/** Where a gate's three listeners are made (default: in the slot's namespace, as root). */
export type GateListen = (slot: GateSlot) => Readonly<Record<GateListenerName, () => Listen>>;
type GateListenerName = "tcp" | "dnsTcp" | "dnsUdp";

export interface ServedSlot {
  /** The listener's port (what an address with port 0 was given). */
  readonly port: number;
  close(): Promise<void>;
}

type OpenRequest =
  | Omit<Extract<ServicesRequest, { type: "nfs.open" }>, "id">
  | Omit<Extract<ServicesRequest, { type: "gate.open" }>, "id">;

/** One of a service's listeners, made again after each restart (the dead process took it). */
interface ListenerSpec {
  readonly name: ListenerName;
  readonly protocol: "tcp" | "udp";
  readonly listen: () => Listen;
  /** What it was first given: an address with port 0 keeps it across restarts. */
  port: number;
}

/** A slot's service as the server keeps it: what to hand over again after a restart. */
interface Registration {
  readonly slot: string;
  readonly service: ServiceKind;
  /** Its open, as sent again after a restart (a gate's with its current policy). */
  open: OpenRequest;
  readonly listeners: readonly ListenerSpec[];
  /** The handover under way (after a restart): an update waits for the open it follows. */
  handover?: Promise<void>;
}

/** A process that ran this long has its restart delay reset (a crash loop backs off). */
const HEALTHY_MS = 10_000;
/** Asks answered at once; more are refused (a process gone wrong cannot queue the server up). */
const MAX_ASKS = 64;
/** Requests (opens, deliveries) awaiting an answer at once; a delivery past it is retried. */
const MAX_CALLS = 1024;

class ServicesStopped extends WarrenError {
  constructor() {
    super("unavailable", "the guest services process stopped: retry");
  }
}

/**
 * The node's side of the guest services process (src/guest-services/main.ts): starts it as
 * its own user in its own cgroup, and hands it each slot's services (volumes' NFS, the
 * egress gate) with their listening sockets, which it receives on from then on — the server
 * keeps no copy and reads no byte a guest sends (a connection it happened to accept during
 * the handover goes over unread: `pauseOnConnect`). A gate asks the server for what it does
 * not hold (certificates of the egress CA, secrets), each ask checked against the slot's
 * own policy (gate-asks.ts). When the process dies it is started again and every service is
 * handed over again on new listeners, so only the sandboxes whose connections it held see
 * them cut for a moment (NFS mounts are `hard`: the guest retries; so does DNS).
 */
export class GuestServices {
  readonly #o: GuestServicesOptions;
  readonly #registrations = new Map<string, Registration>();
  /** Requests awaiting their answer: `done` (no value), `posted` (a status), `failed`. */
  readonly #calls = new Map<
    number,
    { readonly what: string; resolve(status?: number): void; reject(err: Error): void }
  >();
  #nextId = 0;
  #asks = 0;
  #gates: GateSupplies | undefined;
  #child: ChildProcess | undefined;
  #ready = false;
  #closed = false;
  #restarts = 0;
  #startedAt = 0;

  private constructor(options: GuestServicesOptions) {
    this.#o = options;
  }

  static async start(options: GuestServicesOptions): Promise<GuestServices> {
    const services = new GuestServices(options);
    await services.#spawn();
    return services;
  }

  /** The process's pid while it runs (tests, `kill -9` drills). */
  get pid(): number | undefined {
    return this.#ready ? this.#child?.pid : undefined;
  }

  /** Times it was started again after dying. */
  get restarts(): number {
    return this.#restarts;
  }

  /**
   * Serves a slot's volumes until closed. `listen` makes its listening socket (a socket in
   * the slot's namespace, or an address in tests), now and again after each restart of the
   * process; a socket it made is closed on failure.
   */
  async serveNfs(slot: string, listen: () => Listen, spec: NfsExport): Promise<ServedSlot> {
    const registration = await this.#register({
      slot,
      service: "nfs",
      open: { type: "nfs.open", slot, spec },
      listeners: [{ name: "nfs", protocol: "tcp", listen, port: 0 }],
    });
    return {
      port: registration.listeners[0]?.port ?? 0,
      close: async () => this.#drop(registration),
    };
  }

  /**
   * Where the node's slots run their egress gates: here. `listen` says where a gate's
   * listeners are made (default: in the slot's namespace on its gateway, the ports its nat
   * rules send to).
   */
  gates(supplies: GateSupplies, listen: GateListen = namespaceListen): GateHost {
    this.#gates = supplies;
    this.#sendSettings();
    return {
      open: async (at, policy) => {
        const listeners = listen(at);
        const registration = await this.#register({
          slot: at.netns,
          service: "gate",
          open: {
            type: "gate.open",
            slot: at.netns,
            gate: { policy, base: at.base, gateway: at.gateway },
          },
          listeners: [
            { name: "tcp", protocol: "tcp", listen: listeners.tcp, port: 0 },
            { name: "dnsTcp", protocol: "tcp", listen: listeners.dnsTcp, port: 0 },
            { name: "dnsUdp", protocol: "udp", listen: listeners.dnsUdp, port: 0 },
          ],
        });
        return this.#openGate(registration);
      },
    };
  }

  /**
   * One webhook delivery attempt, made by the process: the receiver's answer is parsed there.
   * Never throws; a process that is down or silent is the attempt's error (it is retried).
   */
  async post(request: PostRequest): Promise<PostResult> {
    if (this.#calls.size >= MAX_CALLS) return { error: "too many deliveries under way" };
    const id = this.#id();
    const answered = new Promise<number | undefined>((resolve, reject) => {
      this.#calls.set(id, { what: "webhook delivery", resolve, reject });
    });
    const timer = setTimeout(
      () => this.#settle(id, new Error("the guest services process did not answer")),
      request.timeoutMs + 5_000,
    );
    this.#send({ type: "post", id, request });
    try {
      return { status: (await answered) ?? 0 };
    } catch (err) {
      return { error: err instanceof Error ? err.message : String(err) };
    } finally {
      clearTimeout(timer);
    }
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const registration of [...this.#registrations.values()]) this.#drop(registration);
    const child = this.#child;
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.disconnect?.();
      child.kill("SIGTERM");
      await exited;
    }
  }

  /** The ports a gate's listeners were given (tests on loopback). */
  gatePorts(slot: string): Readonly<Partial<Record<ListenerName, number>>> {
    const registration = this.#registrations.get(keyOf("gate", slot));
    return Object.fromEntries(registration?.listeners.map((l) => [l.name, l.port]) ?? []);
  }

  #openGate(registration: Registration): OpenGate {
    return {
      update: async (policy: EgressPolicy) => {
        if (registration.open.type !== "gate.open") return;
        // Kept first: a process started again from now on opens the gate with it.
        registration.open = {
          ...registration.open,
          gate: { ...registration.open.gate, policy },
        };
        await registration.handover?.catch(() => {});
        if (!this.#running()) return;
        await this.#call({
          type: "gate.update",
          id: this.#id(),
          slot: registration.slot,
          policy,
        }).catch((err: unknown) => {
          // Stopped meanwhile: its next start opens the gate with this policy.
          if (!(err instanceof ServicesStopped)) throw err;
        });
      },
      close: async () => this.#drop(registration),
    };
  }

  async #register(registration: Registration): Promise<Registration> {
    const key = keyOf(registration.service, registration.slot);
    if (this.#registrations.has(key)) {
      throw new WarrenError(
        "internal",
        `slot ${registration.slot} has a ${registration.service} already`,
      );
    }
    this.#registrations.set(key, registration);
    try {
      await this.#handOver(registration);
    } catch (err) {
      this.#drop(registration);
      throw err;
    }
    return registration;
  }

  #drop(registration: Registration): void {
    const key = keyOf(registration.service, registration.slot);
    if (this.#registrations.get(key) !== registration) return;
    this.#registrations.delete(key);
    this.#send({ type: "close", slot: registration.slot, service: registration.service });
  }

  /**
   * Makes the service's listeners and hands each to the process (closing this process's
   * copy once sent), then its open; resolves once the process serves it.
   */
  async #handOver(registration: Registration): Promise<void> {
    const child = this.#child;
    if (!this.#running() || !child) {
      throw new WarrenError("unavailable", "the guest services process is not running: retry");
    }
    for (const spec of registration.listeners) {
      const listener = await this.#listen(registration, spec);
      child.send(
        {
          type: "listener",
          slot: registration.slot,
          service: registration.service,
          name: spec.name,
        },
        listener,
        // Handed over (or not): either way this process receives no more on it.
        () => listener.close(),
      );
    }
    await this.#call({ ...registration.open, id: this.#id() });
  }

  /**
   * A listener that reads nothing: a connection it takes before the handover is done goes
   * to the process as a socket, unread; a datagram it takes is dropped (the guest asks again).
   */
  async #listen(registration: Registration, spec: ListenerSpec): Promise<Server | UdpSocket> {
    const listen = this.#where(spec);
    const listener = await (spec.protocol === "udp"
      ? boundUdp(listen)
      : listeningTcp(listen, (socket) => this.#pass(registration, spec.name, socket))
    ).catch((err: unknown) => {
      if ("fd" in listen) closeSync(listen.fd);
      throw err;
    });
    listener.on("error", (err: Error) =>
      this.#o.logger.warn({ slot: registration.slot, err }, "guest_services.listener_error"),
    );
    if (spec.port === 0) spec.port = portOf(listener);
    return listener;
  }

  /** Where a listener is made now: an address keeps the port it was first given. */
  #where(spec: ListenerSpec): Listen {
    const listen = spec.listen();
    if ("fd" in listen || listen.port !== 0 || spec.port === 0) return listen;
    return { ...listen, port: spec.port };
  }

  #pass(registration: Registration, name: ListenerName, socket: Socket): void {
    socket.on("error", () => {});
    const child = this.#child;
    if (!this.#running() || !child) return void socket.destroy();
    const { slot, service } = registration;
    // The handle goes; this process's copy is closed once it has (keepOpen false).
    child.send(
      { type: "connection", slot, service, name } satisfies ServicesRequest,
      socket,
      (err) => {
        if (err) socket.destroy();
      },
    );
  }

  /** Sends a request answered `done` or `failed`, within the answer timeout. */
  async #call(
    request: Extract<ServicesRequest, { type: "nfs.open" | "gate.open" | "gate.update" }>,
  ): Promise<void> {
    const what = request.type === "nfs.open" ? "volumes" : "egress gate";
    const answered = new Promise<void>((resolve, reject) => {
      this.#calls.set(request.id, { what, resolve: () => resolve(), reject });
    });
    const timer = setTimeout(
      () =>
        this.#settle(
          request.id,
          new WarrenError(
            "unavailable",
            `the guest services process did not answer ${request.type} for ${request.slot}`,
          ),
        ),
      this.#o.answerTimeoutMs ?? 30_000,
    );
    this.#send(request);
    try {
      await answered;
    } finally {
      clearTimeout(timer);
    }
  }

  #settle(id: number, err?: Error, status?: number): void {
    const call = this.#calls.get(id);
    this.#calls.delete(id);
    if (err) call?.reject(err);
    else call?.resolve(status);
  }

  #id(): number {
    this.#nextId += 1;
    return this.#nextId;
  }

  #running(): boolean {
    return this.#ready && this.#child?.connected === true;
  }

  #send(request: ServicesRequest): void {
    const child = this.#child;
    if (!this.#running() || !child) {
      if ("id" in request && request.type !== "answer" && request.type !== "refusal") {
        this.#settle(request.id, new ServicesStopped());
      }
      return;
    }
    child.send(request, (err) => {
      if (err) this.#o.logger.warn({ err, type: request.type }, "guest_services.send_failed");
    });
  }

  #sendSettings(): void {
    const gates = this.#gates;
    if (!gates) return;
    this.#send({
      type: "gate.settings",
      settings: {
        ...(gates.resolver !== undefined && { resolver: gates.resolver }),
        ...(gates.upstreamCa && { upstreamCa: gates.upstreamCa }),
        rules: gates.rules !== undefined,
      },
    });
  }

  #onEvent(event: ServicesEvent): void {
    if (event.type === "done") this.#settle(event.id);
    else if (event.type === "posted") this.#settle(event.id, undefined, event.status);
    else if (event.type === "failed") {
      const what = this.#calls.get(event.id)?.what ?? "guest services";
      this.#settle(event.id, new WarrenError("unavailable", `${what}: ${event.message}`));
    } else if (event.type === "ask") void this.#answer(event.id, event.ask);
  }

  /** Answers a gate's ask, checked against its slot's policy as the server knows it. */
  async #answer(id: number, ask: Ask): Promise<void> {
    if (this.#asks >= MAX_ASKS) {
      return this.#send({
        type: "refusal",
        id,
        reason: "failed",
        message: "too many asks at once",
      });
    }
    this.#asks += 1;
    try {
      const registration = this.#registrations.get(keyOf("gate", ask.slot));
      const policy =
        registration?.open.type === "gate.open" ? registration.open.gate.policy : undefined;
      this.#send({ id, ...(await answerAsk(ask, policy, this.#gates)) });
    } finally {
      this.#asks -= 1;
    }
  }

  /** Starts the process and waits for it to say it is ready; only then is it the one used. */
  async #spawn(): Promise<void> {
    const child = await launchServices(this.#o);
    child.on("error", (err) => this.#o.logger.warn({ err }, "guest_services.process_error"));
    try {
      await this.#whenReady(child);
    } catch (err) {
      child.kill("SIGKILL");
      throw err;
    }
    this.#child = child;
    this.#ready = true;
    this.#startedAt = performance.now();
    child.once("exit", (code, signal) => this.#exited(child, code, signal));
    if (child.exitCode !== null || child.signalCode !== null) {
      this.#exited(child, child.exitCode, child.signalCode);
      return;
    }
    this.#sendSettings();
    this.#o.logger.info({ pid: child.pid, restarts: this.#restarts }, "guest_services.ready");
  }

  #whenReady(child: ChildProcess): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error("the guest services process did not start in time")),
        this.#o.answerTimeoutMs ?? 30_000,
      );
      child.on("message", (message: unknown) => {
        if (!isServicesEvent(message)) {
          this.#o.logger.warn({}, "guest_services.bad_event");
          return;
        }
        if (message.type !== "ready") return this.#onEvent(message);
        clearTimeout(timer);
        resolve();
      });
      child.once("exit", (code, signal) => {
        clearTimeout(timer);
        reject(new Error(`the guest services process exited at start (${code ?? signal})`));
      });
    });
  }

  #exited(child: ChildProcess, code: number | null, signal: NodeJS.Signals | null): void {
    if (this.#child !== child) return;
    this.#ready = false;
    for (const id of [...this.#calls.keys()]) this.#settle(id, new ServicesStopped());
    if (this.#closed) return;
    this.#o.logger.warn({ pid: child.pid, code, signal }, "guest_services.exited");
    void this.#restart();
  }

  /** Starts it again, after a delay that grows while it keeps dying, and hands every service over. */
  async #restart(): Promise<void> {
    const { first, max } = this.#o.restartDelayMs ?? { first: 100, max: 5_000 };
    if (performance.now() - this.#startedAt > HEALTHY_MS) this.#restarts = 0;
    const delay = Math.min(max, first * 2 ** Math.min(this.#restarts, 16));
    this.#restarts += 1;
    await sleep(delay);
    if (this.#closed) return;
    try {
      await this.#spawn();
    } catch (err) {
      this.#o.logger.error({ err }, "guest_services.restart_failed");
      if (!this.#closed) void this.#restart();
      return;
    }
    for (const registration of this.#registrations.values()) {
      registration.handover = this.#handOver(registration);
      registration.handover.catch((err: unknown) =>
        this.#o.logger.warn(
          { err, slot: registration.slot, service: registration.service },
          "guest_services.reopen_failed",
        ),
      );
    }
  }
}

function keyOf(service: ServiceKind, slot: string): string {
  return `${service}:${slot}`;
}

/** A gate's listeners in its slot's namespace, on the ports its nat rules send to. */
function namespaceListen(slot: GateSlot): Readonly<Record<GateListenerName, () => Listen>> {
  return {
    tcp: () => ({ fd: listenInNamespace(slot.netns, slot.gateway, GATE_TCP_PORT) }),
    dnsTcp: () => ({ fd: listenInNamespace(slot.netns, slot.gateway, GATE_DNS_PORT) }),
    dnsUdp: () => ({ fd: bindUdpInNamespace(slot.netns, slot.gateway, GATE_DNS_PORT) }),
  };
}

/** A TCP listener whose connections wait unread for `pass` (pauseOnConnect). */
function listeningTcp(listen: Listen, pass: (socket: Socket) => void): Promise<Server> {
  const server = createServer({ pauseOnConnect: true }, pass);
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    const ready = () => {
      server.off("error", reject);
      resolve(server);
    };
    if ("fd" in listen) server.listen({ fd: listen.fd }, ready);
    else server.listen(listen.port, listen.host, ready);
  });
}

/** A UDP socket bound where `listen` says; what it receives meanwhile is dropped. */
function boundUdp(listen: Listen): Promise<UdpSocket> {
  const socket = createSocket("udp4");
  return new Promise((resolve, reject) => {
    socket.once("error", reject);
    socket.bind("fd" in listen ? listen : { address: listen.host, port: listen.port }, () => {
      socket.off("error", reject);
      resolve(socket);
    });
  });
}

function portOf(listener: Server | UdpSocket): number {
  const address = listener.address();
  return typeof address === "object" && address ? address.port : 0;
}
