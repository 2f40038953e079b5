import type { ChildProcess } from "node:child_process";
import { closeSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import { type Logger, WarrenError } from "../shared/index.js";
import type { NfsExport } from "../volumes/index.js";
import { launchServices, type ServicesLaunch } from "./launch.js";
import { isServicesEvent, type ServicesEvent, type ServicesRequest } from "./messages.js";

export interface GuestServicesOptions extends ServicesLaunch {
  readonly logger: Logger;
  /** Delay before starting it again after it died, doubling up to `max` while it keeps dying. */
  readonly restartDelayMs?: { readonly first: number; readonly max: number };
  /** How long it may take to start, or to open a slot's service. */
  readonly answerTimeoutMs?: number;
}

/** Where a slot's service listens: a socket made in its namespace, or an address (tests). */
export type Listen = { readonly fd: number } | { readonly host: string; readonly port: number };

export interface ServedSlot {
  /** The listener's port (what an address with port 0 was given). */
  readonly port: number;
  close(): Promise<void>;
}

/** A slot's service as the server keeps it: what to hand over again after a restart. */
interface Registration {
  readonly request: Extract<ServicesRequest, { type: "nfs.open" }>;
  /** A new listening socket for it (the process that died took the last one with it). */
  readonly listen: () => Listen;
  port: number;
}

/** A process that ran this long has its restart delay reset (a crash loop backs off). */
const HEALTHY_MS = 10_000;

/**
 * The node's side of the guest services process (src/guest-services/main.ts): starts it as
 * its own user in its own cgroup, and hands it each slot's service with the slot's listening
 * socket, which it accepts on from then on — the server keeps no copy and reads no byte a
 * guest sends (a connection it happened to accept during the handover goes over unread:
 * `pauseOnConnect`). When the process dies it is started again and every slot's service is
 * handed over again on a new listener, so only the sandboxes whose connections it held see
 * their NFS pause for a moment (their mounts are `hard`: the guest retries).
 */
export class GuestServices {
  readonly #o: GuestServicesOptions;
  readonly #registrations = new Map<string, Registration>();
  readonly #waiting = new Map<string, { resolve(): void; reject(err: Error): void }>();
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
    if (this.#registrations.has(slot)) {
      throw new WarrenError("internal", `slot ${slot} serves volumes already`);
    }
    const registration: Registration = {
      request: { type: "nfs.open", slot, spec },
      listen,
      port: 0,
    };
    this.#registrations.set(slot, registration);
    try {
      await this.#handOver(registration);
    } catch (err) {
      this.#registrations.delete(slot);
      this.#send({ type: "nfs.close", slot });
      throw err;
    }
    return { port: registration.port, close: () => this.#drop(slot) };
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const slot of [...this.#registrations.keys()]) await this.#drop(slot);
    const child = this.#child;
    if (child && child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((resolve) => child.once("exit", resolve));
      child.disconnect?.();
      child.kill("SIGTERM");
      await exited;
    }
  }

  /**
   * Makes the slot's listener, hands it to the process with the open and closes this
   * process's copy; resolves once the process serves it.
   */
  async #handOver(registration: Registration): Promise<void> {
    const { request } = registration;
    const child = this.#child;
    if (!this.#ready || !child?.connected) {
      throw new WarrenError("unavailable", "the guest services process is not running: retry");
    }
    const listener = await this.#listen(request.slot, this.#where(registration));
    const address = listener.address();
    if (typeof address === "object" && address) registration.port = address.port;
    const answered = this.#answer(request.slot);
    child.send(request, listener, (err) => {
      // Handed over (or not): either way this process accepts no more on it.
      listener.close();
      if (err) this.#settle(request.slot, err);
    });
    await answered;
  }

  /** Where the slot listens now: an address keeps the port it was first given. */
  #where(registration: Registration): Listen {
    const listen = registration.listen();
    if ("fd" in listen || listen.port !== 0 || registration.port === 0) return listen;
    return { ...listen, port: registration.port };
  }

  /**
   * A listener that accepts nothing it reads: a connection it takes before the handover is
   * done goes to the process as a socket, unread.
   */
  async #listen(slot: string, listen: Listen): Promise<Server> {
    const listener = createServer({ pauseOnConnect: true }, (socket) => this.#pass(slot, socket));
    listener.on("error", (err) =>
      this.#o.logger.warn({ slot, err }, "guest_services.listener_error"),
    );
    await new Promise<void>((resolve, reject) => {
      listener.once("error", reject);
      if ("fd" in listen) listener.listen({ fd: listen.fd }, () => resolve());
      else listener.listen(listen.port, listen.host, () => resolve());
    }).catch((err: unknown) => {
      if ("fd" in listen) closeSync(listen.fd);
      throw err;
    });
    return listener;
  }

  #pass(slot: string, socket: Socket): void {
    socket.on("error", () => {});
    const child = this.#child;
    if (!this.#ready || !child?.connected) return void socket.destroy();
    // The handle goes; this process's copy is closed once it has (keepOpen false).
    child.send({ type: "nfs.connection", slot } satisfies ServicesRequest, socket, (err) => {
      if (err) socket.destroy();
    });
  }

  async #drop(slot: string): Promise<void> {
    if (!this.#registrations.delete(slot)) return;
    this.#send({ type: "nfs.close", slot });
  }

  /** The process's answer to an open of `slot`, within the answer timeout. */
  async #answer(slot: string): Promise<void> {
    const answered = new Promise<void>((resolve, reject) => {
      this.#waiting.get(slot)?.reject(new Error("opened again"));
      this.#waiting.set(slot, { resolve, reject });
    });
    const timer = setTimeout(
      () =>
        this.#settle(
          slot,
          new WarrenError("unavailable", `the guest services process did not open ${slot}`),
        ),
      this.#o.answerTimeoutMs ?? 30_000,
    );
    try {
      await answered;
    } finally {
      clearTimeout(timer);
    }
  }

  #settle(slot: string, err?: Error): void {
    const waiting = this.#waiting.get(slot);
    this.#waiting.delete(slot);
    if (err) waiting?.reject(err);
    else waiting?.resolve();
  }

  #send(request: ServicesRequest): void {
    const child = this.#child;
    if (!this.#ready || !child?.connected) return;
    child.send(request, (err) => {
      if (err) this.#o.logger.warn({ err, type: request.type }, "guest_services.send_failed");
    });
  }

  #onEvent(event: ServicesEvent): void {
    if (event.type === "nfs.opened") this.#settle(event.slot);
    else if (event.type === "failed") {
      this.#settle(event.slot, new WarrenError("unavailable", `volumes: ${event.message}`));
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
    this.#o.logger.info({ pid: child.pid, restarts: this.#restarts }, "guest_services.ready");
  }

  #whenReady(child: ChildProcess): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error("the guest services process did not start in time")),
        this.#o.answerTimeoutMs ?? 30_000,
      );
      child.on("message", (message: unknown) => {
        if (!isServicesEvent(message)) return;
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
    for (const slot of [...this.#waiting.keys()]) {
      this.#settle(
        slot,
        new WarrenError("unavailable", "the guest services process stopped: retry"),
      );
    }
    if (this.#closed) return;
    this.#o.logger.warn({ pid: child.pid, code, signal }, "guest_services.exited");
    void this.#restart();
  }

  /** Starts it again, after a delay that grows while it keeps dying, and hands every slot over. */
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
      this.#handOver(registration).catch((err: unknown) =>
        this.#o.logger.warn(
          { err, slot: registration.request.slot },
          "guest_services.reopen_failed",
        ),
      );
    }
  }
}
