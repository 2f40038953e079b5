import { closeSync, openSync } from "node:fs";
import { writeFile } from "node:fs/promises";
import type { Socket } from "node:net";
import {
  type HelloResult,
  KEEPER_MAX_EXITS,
  KEEPER_MAX_LINE_BYTES,
  KEEPER_MAX_VMS,
  KEEPER_PROTOCOL_VERSION,
  type KeeperExit,
  type KeeperMessage,
  type KeeperRequest,
  type KeeperVm,
  type SpawnResult,
} from "../protocol/keeper.js";
import { JsonLines } from "../shared/json-lines.js";
import type { Logger } from "../shared/logger.js";
import type { VmCgroups } from "../vmm/qemu/cgroups.js";
import { QemuProcess } from "../vmm/qemu/qemu-process.js";
import { NETNS_DIR } from "../vmm/qemu/tap-fd.js";
import { startVmmWatchdog } from "../vmm/qemu/watchdog.js";
import { type KeeperSocket, listenKeeperSocket } from "./keeper-socket.js";
import { BadRequest, parseRequest, requestId } from "./requests.js";

export interface KeeperOptions {
  /** Its directory (root's, 0700): the socket `keeper.sock` is made there. */
  readonly dir: string;
  /** The VMs' cgroups (`<prefix>-vms`): swept at start, watched by the watchdog. */
  readonly cgroups: VmCgroups | undefined;
  /** The VMs' runtime directories: the watchdog's fallback finds their QEMUs by it. */
  readonly runDir: string;
  /**
   * Started by a server for itself (WARREN_KEEPER=auto): once it holds no VMM and no server
   * is connected for this long, it stops. Unset: it runs until told to stop.
   */
  readonly idleExitMs?: number;
  readonly logger: Logger;
}

/** A VMM held, and the server's note for it. */
interface Held {
  readonly key: string;
  readonly proc: QemuProcess;
  /** A descriptor on its network namespace, held while it runs (see `#spawn`). */
  readonly netnsFd: number | undefined;
  note: string | undefined;
}

class ServerConnected extends Error {}

/** Connections at once (the server, a second one being refused, a probe): more are cut. */
const MAX_CONNECTIONS = 8;
/** How long a stop waits for the VMMs it killed to be gone. */
const STOP_WAIT_MS = 10_000;

/**
 * The keeper: owns every VMM process of a node so that the server may die and start again
 * without them (it re-adopts them: `hello` lists them with the notes it left). It starts
 * each QEMU (detached, in its cgroups, its tap handed over), holds its stderr's tail, reports
 * its exit, and kills it when asked. It parses only what the server sends on its socket,
 * each line bounded (`requests.ts`), never anything a guest or a tenant sends. Its death
 * kills every VMM: a watchdog process holds a pipe from it (watchdog.ts), and the next
 * keeper sweeps the VMs' cgroups at start.
 */
export class Keeper {
  readonly #o: KeeperOptions;
  readonly #log: Logger;
  readonly #vms = new Map<string, Held>();
  readonly #exits: KeeperExit[] = [];
  readonly #connections = new Set<Socket>();
  #socket: KeeperSocket | undefined;
  #watchdog: ReturnType<typeof startVmmWatchdog> | undefined;
  /** The server's connection, once it said hello. */
  #server: { readonly socket: Socket; readonly lines: JsonLines; readonly pid: number } | undefined;
  #idle: NodeJS.Timeout | undefined;
  #stopping: Promise<void> | undefined;
  readonly #stopped: Promise<string>;
  #markStopped!: (why: string) => void;

  private constructor(options: KeeperOptions) {
    this.#o = options;
    this.#log = options.logger;
    this.#stopped = new Promise((resolve) => {
      this.#markStopped = resolve;
    });
  }

  /**
   * Takes the socket (refused while another keeper answers on it), then kills what an
   * earlier keeper's VMs left in their cgroups and starts the watchdog.
   */
  static async start(options: KeeperOptions): Promise<Keeper> {
    const keeper = new Keeper(options);
    keeper.#socket = await listenKeeperSocket(options.dir, (socket) => keeper.#accept(socket));
    const swept = (await options.cgroups?.sweep()) ?? 0;
    if (swept > 0) options.logger.warn({ count: swept }, "keeper.leftovers_killed");
    keeper.#watchdog = startVmmWatchdog(options.cgroups, options.runDir);
    // The OOM killer takes VMMs (800), then the server (-500), never their keeper.
    await writeFile("/proc/self/oom_score_adj", "-1000").catch((err: unknown) =>
      options.logger.warn({ err }, "keeper.oom_score_unchanged"),
    );
    options.logger.info(
      { pid: process.pid, socket: keeper.#socket.path, cgroups: options.cgroups?.parents },
      "keeper.started",
    );
    keeper.#checkIdle();
    return keeper;
  }

  /** Settles once the keeper stopped, with why (idle, a signal). */
  get stopped(): Promise<string> {
    return this.#stopped;
  }

  get vmCount(): number {
    return this.#vms.size;
  }

  /**
   * Stops: tells the server, kills every VMM (a keeper stopping takes them with it) and
   * waits for them, stops the watchdog and removes the socket.
   */
  stop(why: string): Promise<void> {
    this.#stopping ??= this.#stop(why);
    return this.#stopping;
  }

  async #stop(why: string): Promise<void> {
    clearTimeout(this.#idle);
    this.#log.info({ why, vms: this.#vms.size }, "keeper.stopping");
    this.#server?.lines.send({ type: "stopping" } satisfies KeeperMessage);
    const exits = [...this.#vms.values()].map((held) => held.proc.kill());
    const deadline = new Promise((resolve) => setTimeout(resolve, STOP_WAIT_MS).unref());
    await Promise.race([Promise.all(exits), deadline]);
    for (const socket of this.#connections) {
      socket.end(); // what was sent (exits, stopping) goes first
      setTimeout(() => socket.destroy(), 1_000).unref();
    }
    // The watchdog kills whatever is in the VMs' cgroups as it goes: gone before the socket
    // is, so that it never reaches the VMMs of a keeper started after this one. A keeper
    // stopping idle held nothing: it kills nothing (the next keeper sweeps what is left).
    if (why === "idle") this.#watchdog?.disarm();
    else this.#watchdog?.stop();
    await this.#watchdog?.exited;
    if (why !== "idle") await this.#o.cgroups?.sweep().catch(() => 0);
    await this.#socket?.close();
    this.#log.info({ why }, "keeper.stopped");
    this.#markStopped(why);
  }

  #accept(socket: Socket): void {
    if (this.#connections.size >= MAX_CONNECTIONS || this.#stopping) {
      socket.destroy();
      return;
    }
    this.#connections.add(socket);
    // One request at a time, in order: each answered before the next is read.
    let queue = Promise.resolve();
    const lines = new JsonLines(socket, {
      maxLineBytes: KEEPER_MAX_LINE_BYTES,
      onValue: (value) => {
        queue = queue
          .then(() => this.#handle(socket, lines, value))
          .catch((err: unknown) => this.#log.error({ err }, "keeper.request_failed"));
      },
      onBadLine: () => this.#log.warn({}, "keeper.bad_line"),
      onTooLong: () => this.#log.warn({}, "keeper.line_too_long"),
    });
    socket.on("error", () => {});
    socket.once("close", () => {
      this.#connections.delete(socket);
      if (this.#server?.socket === socket) {
        this.#log.info({ serverPid: this.#server.pid, vms: this.#vms.size }, "keeper.server_gone");
        this.#server = undefined;
        this.#checkIdle();
      }
    });
  }

  async #handle(socket: Socket, lines: JsonLines, value: unknown): Promise<void> {
    const id = requestId(value);
    let request: KeeperRequest;
    try {
      request = parseRequest(value, this.#o.cgroups?.parents ?? []);
    } catch (err) {
      const error = err instanceof BadRequest ? err.message : "the request could not be read";
      this.#log.warn({ error }, "keeper.bad_request");
      if (id !== undefined) lines.send({ id, ok: false, error } satisfies KeeperMessage);
      return;
    }
    try {
      const result = await this.#answer(socket, lines, request);
      lines.send({ id: request.id, ok: true, result } satisfies KeeperMessage);
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err);
      const busy = err instanceof ServerConnected ? { busy: true as const } : {};
      lines.send({ id: request.id, ok: false, error, ...busy } satisfies KeeperMessage);
    }
  }

  async #answer(socket: Socket, lines: JsonLines, request: KeeperRequest): Promise<unknown> {
    if (this.#stopping) throw new Error("the keeper is stopping");
    if (request.type === "hello") return this.#hello(socket, lines, request);
    if (this.#server?.socket !== socket) throw new Error("say hello first");
    switch (request.type) {
      case "spawn":
        return this.#spawn(request);
      case "kill": {
        const held = this.#vms.get(request.key);
        held?.proc.kill();
        return { held: held !== undefined };
      }
      case "note": {
        const held = this.#vms.get(request.key);
        if (!held) throw new Error(`no VMM ${request.key} is held`);
        held.note = request.note;
        return undefined;
      }
      case "list":
        return this.#list();
    }
  }

  async #hello(
    socket: Socket,
    lines: JsonLines,
    request: Extract<KeeperRequest, { type: "hello" }>,
  ): Promise<HelloResult> {
    if (request.version !== KEEPER_PROTOCOL_VERSION)
      throw new Error(
        `the keeper speaks version ${KEEPER_PROTOCOL_VERSION}, the server ${request.version}: stop the keeper's VMs and restart it with the server`,
      );
    const current = this.#server;
    if (current && current.socket !== socket)
      throw new ServerConnected(`another server (pid ${current.pid}) is connected`);
    this.#server = { socket, lines, pid: request.serverPid };
    clearTimeout(this.#idle);
    // What VMs no one holds left in their groups (an exit the last server never saw through).
    await this.#o.cgroups?.sweep(new Set(this.#vms.keys())).catch(() => 0);
    const exits = this.#exits.splice(0);
    this.#log.info(
      { serverPid: request.serverPid, vms: this.#vms.size, exits: exits.length },
      "keeper.server_attached",
    );
    return { version: KEEPER_PROTOCOL_VERSION, keeperPid: process.pid, vms: this.#list(), exits };
  }

  #list(): KeeperVm[] {
    return [...this.#vms.values()].map((held) => ({
      key: held.key,
      pid: held.proc.pid,
      ...(held.netnsFd !== undefined && { netnsFd: held.netnsFd }),
      ...(held.note !== undefined && { note: held.note }),
    }));
  }

  async #spawn(request: Extract<KeeperRequest, { type: "spawn" }>): Promise<SpawnResult> {
    const { key, tap } = request;
    if (this.#vms.has(key)) throw new Error(`VMM ${key} is running already`);
    if (this.#vms.size >= KEEPER_MAX_VMS) throw new Error(`${KEEPER_MAX_VMS} VMMs held already`);
    // The server names namespaces in its own mount namespace (a systemd unit's, which goes
    // when the unit stops): reached through its root, and held open here as long as the VMM
    // runs, so that the namespace (the guest's network) outlives the server's mounts and the
    // next server can mount it again from this descriptor.
    const netnsDir = `/proc/${this.#server?.pid ?? "self"}/root${NETNS_DIR}`;
    const netnsFd = tap ? openSync(`${netnsDir}/${tap.netns}`, "r") : undefined;
    let proc: QemuProcess;
    try {
      proc = new QemuProcess(
        {
          vmId: key,
          args: request.args,
          network: tap ? { kind: "tap", netns: tap.netns, tap: tap.name } : { kind: "none" },
          mergeable: request.mergeable,
          cgroupProcs: request.cgroupProcs,
        },
        { detached: true, netnsDir },
      );
      if (proc.child.pid === undefined) throw new Error((await proc.exited).reason);
    } catch (err) {
      if (netnsFd !== undefined) closeSync(netnsFd);
      throw err;
    }
    const held: Held = { key, proc, netnsFd, note: undefined };
    this.#vms.set(key, held);
    void proc.exited.then((exit) => this.#exited(held, exit));
    this.#log.info({ key, pid: proc.pid }, "keeper.spawned");
    return { pid: proc.pid };
  }

  #exited(held: Held, exit: Awaited<QemuProcess["exited"]>): void {
    if (this.#vms.get(held.key) === held) this.#vms.delete(held.key);
    if (held.netnsFd !== undefined) closeSync(held.netnsFd);
    const ended: KeeperExit = {
      key: held.key,
      pid: held.proc.pid,
      code: exit.code,
      signal: exit.signal,
      killed: exit.expected,
      stderr: held.proc.stderr(),
    };
    this.#log.info(
      { key: ended.key, pid: ended.pid, code: ended.code, signal: ended.signal },
      "keeper.exited",
    );
    const sent = this.#server?.lines.send({ type: "exited", ...ended } satisfies KeeperMessage);
    if (!sent) {
      this.#exits.push(ended);
      if (this.#exits.length > KEEPER_MAX_EXITS) this.#exits.shift();
    }
    this.#checkIdle();
  }

  /** An auto-started keeper that holds nothing and serves no one stops after a while. */
  #checkIdle(): void {
    const idleMs = this.#o.idleExitMs;
    if (idleMs === undefined || this.#server || this.#vms.size > 0 || this.#stopping) return;
    clearTimeout(this.#idle);
    this.#idle = setTimeout(() => {
      if (!this.#server && this.#vms.size === 0) void this.stop("idle");
    }, idleMs);
  }
}
