import { connect, type Socket } from "node:net";
import { setTimeout as sleep } from "node:timers/promises";
import {
  type HelloResult,
  KEEPER_KEY,
  KEEPER_MAX_LINE_BYTES,
  KEEPER_PROTOCOL_VERSION,
  type KeeperExit,
  type KeeperRequest,
  type KeeperVm,
} from "../../protocol/keeper.js";
import { JsonLines } from "../../shared/json-lines.js";
import { type Logger, silentLogger } from "../../shared/logger.js";
import type { ExitInfo } from "../driver.js";
import { VmmError } from "../errors.js";
import { crashReason } from "./qemu-process.js";
import type { SpawnVmm, VmmProcess, VmmSpawnRequest } from "./vmm-process.js";

export interface KeeperClientOptions {
  /** The keeper's socket (`<data>/keeper/keeper.sock`). */
  readonly socketPath: string;
  /**
   * Starts a keeper when none answers (WARREN_KEEPER=auto); unset, one must be running
   * (a supervisor's), and is waited for.
   */
  readonly launch?: () => void;
  /** How long to wait for a keeper to answer hello, launched or restarting. Default 20 s. */
  readonly connectTimeoutMs?: number;
  readonly logger?: Logger;
}

/** A VMM an earlier server left in the keeper, with the record it noted for it. */
export interface HeldVmm {
  readonly process: VmmProcess;
  readonly note: string | undefined;
  /** Its network namespace as the keeper holds it (`/proc/<keeper>/fd/<n>`), if it has one. */
  readonly netnsHold: string | undefined;
}

type Request = KeeperRequest extends infer R
  ? R extends { id: number }
    ? Omit<R, "id">
    : never
  : never;

interface Connection {
  readonly socket: Socket;
  readonly lines: JsonLines;
  readonly pending: Map<number, { resolve(value: unknown): void; reject(err: Error): void }>;
}

/** The keeper refused the hello: another server is still connected. */
class KeeperBusy extends VmmError {}

/**
 * The server's side of the keeper (src/keeper): VMMs are spawned by the keeper, which
 * outlives the server, and each is a `KeeperVmm` here (a `VmmProcess` told of its exit by the
 * keeper). At connect, `hello` returns what an earlier server left: `held()`, each with its
 * note (the VM record the driver keeps there: `note()`). If the connection is lost (the
 * keeper died, and its VMMs with it: its watchdog), every VMM known here is reported gone,
 * and the next spawn connects again (starting a keeper when `launch` says how).
 */
export class KeeperClient {
  readonly #o: KeeperClientOptions;
  readonly #log: Logger;
  readonly #procs = new Map<string, KeeperVmm>();
  /** Exits the keeper reported before this side knew the VMM (bounded). */
  readonly #early = new Map<string, KeeperExit>();
  #conn: Connection | undefined;
  #connecting: Promise<Connection> | undefined;
  #nextId = 1;
  #held: HeldVmm[] = [];
  #awayExits: readonly KeeperExit[] = [];
  #keeperPid = 0;
  #closed = false;
  #connections = 0;

  private constructor(options: KeeperClientOptions) {
    this.#o = options;
    this.#log = options.logger ?? silentLogger;
  }

  static async connect(options: KeeperClientOptions): Promise<KeeperClient> {
    const client = new KeeperClient(options);
    await client.#connection();
    return client;
  }

  get keeperPid(): number {
    return this.#keeperPid;
  }

  /**
   * What the keeper held when this server connected (an earlier server's VMMs), not yet
   * taken: each is to be reattached or killed.
   */
  held(): readonly HeldVmm[] {
    return this.#held;
  }

  /** VMMs that ended while no server was connected. */
  get exitsWhileAway(): readonly KeeperExit[] {
    return this.#awayExits;
  }

  /** Starts a QEMU in the keeper. */
  readonly spawn: SpawnVmm = async (request: VmmSpawnRequest) => {
    const { vmId } = request;
    const tap =
      request.network.kind === "tap"
        ? { netns: request.network.netns, name: request.network.tap }
        : undefined;
    const result = await this.#request(
      {
        type: "spawn",
        key: vmId,
        args: [...request.args],
        cgroupProcs: [...(request.cgroupProcs ?? [])],
        ...(tap && { tap }),
        mergeable: request.mergeable === true,
      },
      vmId,
    );
    const pid = (result as { pid?: unknown } | undefined)?.pid;
    if (!Number.isSafeInteger(pid) || (pid as number) <= 0)
      throw new VmmError("the keeper answered a spawn without a pid", vmId);
    return this.#track(vmId, pid as number);
  };

  /**
   * Once connected (again, after the keeper was lost: a new keeper is started when `launch`
   * says how). A launch waits for it before it makes its VM's cgroup: a keeper's start
   * sweeps the VM cgroups it does not hold.
   */
  async ready(): Promise<void> {
    await this.#connection();
  }

  /** Keeps `note` (a VM record) with the VM in the keeper, for the next server. */
  async note(vmId: string, note: string): Promise<void> {
    await this.#request({ type: "note", key: vmId, note }, vmId);
  }

  /** Lets go of the keeper: its VMMs run on (a server stopping with WARREN_ON_STOP=detach). */
  close(): void {
    this.#closed = true;
    this.#conn?.socket.end();
  }

  /** SIGKILL of a VMM through the keeper (its exit comes as an event). */
  async kill(vmId: string): Promise<void> {
    await this.#request({ type: "kill", key: vmId }, vmId);
  }

  #track(key: string, pid: number): KeeperVmm {
    const proc = new KeeperVmm(key, pid, this);
    this.#procs.set(key, proc);
    const early = this.#early.get(key);
    if (early?.pid === pid) {
      this.#early.delete(key);
      this.#ended(early);
    }
    return proc;
  }

  async #request(request: Request, vmId?: string): Promise<unknown> {
    const conn = await this.#connection();
    return this.#send(conn, request, vmId);
  }

  #send(conn: Connection, request: Request, vmId?: string): Promise<unknown> {
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      conn.pending.set(id, { resolve, reject });
      if (!conn.lines.send({ ...request, id }))
        reject(new VmmError("the keeper connection is closed", vmId));
    }).catch((err: unknown) => {
      conn.pending.delete(id);
      throw err instanceof VmmError ? err : new VmmError(String(err), vmId, { cause: err });
    });
  }

  /** The connection, made (and hello said) if there is none. */
  #connection(): Promise<Connection> {
    if (this.#closed) return Promise.reject(new VmmError("the keeper client is closed"));
    if (this.#conn) return Promise.resolve(this.#conn);
    this.#connecting ??= this.#open().finally(() => {
      this.#connecting = undefined;
    });
    return this.#connecting;
  }

  async #open(): Promise<Connection> {
    const { socketPath, launch } = this.#o;
    const deadline = Date.now() + (this.#o.connectTimeoutMs ?? 20_000);
    let launched = false;
    let why = "";
    while (Date.now() < deadline) {
      let socket: Socket;
      try {
        socket = await connectTo(socketPath);
      } catch (err) {
        const code = (err as NodeJS.ErrnoException).code ?? "";
        if (code !== "ENOENT" && code !== "ECONNREFUSED") throw err;
        why = code;
        if (launch && !launched) {
          launched = true;
          launch();
        }
        await sleep(25);
        continue;
      }
      const conn = this.#attach(socket);
      try {
        const hello = parseHello(
          await this.#send(conn, {
            type: "hello",
            version: KEEPER_PROTOCOL_VERSION,
            serverPid: process.pid,
          }),
        );
        this.#welcome(conn, hello);
        return conn;
      } catch (err) {
        socket.destroy();
        // A keeper that stopped on idle as we came (launch another), or still serving a
        // server on its way out: try again. Anything else (another version) is final.
        const busy = err instanceof KeeperBusy;
        if (!busy && !/connection is closed|keeper closed/.test(String(err))) throw err;
        why = busy ? (err as Error).message : "it closed the connection";
        launched = false;
        await sleep(50);
      }
    }
    throw new VmmError(
      `no VMM keeper answered at ${socketPath} (${why || "timed out"})${launch ? "" : ": is its service running?"}`,
    );
  }

  #attach(socket: Socket): Connection {
    const pending: Connection["pending"] = new Map();
    const lines = new JsonLines(socket, {
      maxLineBytes: KEEPER_MAX_LINE_BYTES,
      onValue: (value) => this.#message(conn, value),
      onBadLine: () => this.#log.warn({}, "keeper.bad_line"),
    });
    const conn: Connection = { socket, lines, pending };
    socket.on("error", () => {});
    socket.once("close", () => this.#lost(conn));
    return conn;
  }

  #welcome(conn: Connection, hello: HelloResult): void {
    this.#conn = conn;
    this.#keeperPid = hello.keeperPid;
    this.#awayExits = hello.exits;
    // VMMs the keeper holds that this side does not know: an earlier server's.
    const unknown = hello.vms.filter((vm) => !this.#procs.has(vm.key));
    const held = unknown.map((vm: KeeperVm) => ({
      process: this.#track(vm.key, vm.pid),
      note: vm.note,
      netnsHold: vm.netnsFd === undefined ? undefined : `/proc/${hello.keeperPid}/fd/${vm.netnsFd}`,
    }));
    this.#connections += 1;
    if (this.#connections === 1) this.#held = held;
    else {
      // Connected again after losing the keeper: whatever it still holds was reported gone
      // here (its sandboxes ended), so it goes.
      for (const vm of held) void vm.process.kill();
    }
    this.#log.info(
      { keeperPid: hello.keeperPid, held: this.#held.length, exits: hello.exits.length },
      "keeper.connected",
    );
  }

  #message(conn: Connection, value: unknown): void {
    const m = value as Record<string, unknown> | null;
    if (typeof m !== "object" || m === null) return;
    if (typeof m.id === "number") {
      const waiter = conn.pending.get(m.id);
      conn.pending.delete(m.id);
      if (!waiter) return;
      if (m.ok === true) waiter.resolve(m.result);
      else {
        const error = typeof m.error === "string" ? m.error.slice(0, 2000) : "refused";
        waiter.reject(m.busy === true ? new KeeperBusy(error) : new VmmError(`keeper: ${error}`));
      }
      return;
    }
    if (m.type === "exited") {
      const exit = parseExit(m);
      if (exit) this.#ended(exit);
    } else if (m.type === "stopping") this.#log.warn({}, "keeper.stopping");
  }

  #ended(exit: KeeperExit): void {
    const proc = this.#procs.get(exit.key);
    if (proc?.pid !== exit.pid) {
      this.#early.set(exit.key, exit);
      if (this.#early.size > 64) this.#early.delete(this.#early.keys().next().value as string);
      return;
    }
    this.#procs.delete(exit.key);
    proc.settle({
      code: exit.code,
      signal: exit.signal as NodeJS.Signals | null,
      stderr: exit.stderr,
    });
  }

  /** The connection ended: the keeper is gone (its VMMs with it) or this side let go. */
  #lost(conn: Connection): void {
    for (const waiter of conn.pending.values())
      waiter.reject(new VmmError("the keeper closed the connection"));
    conn.pending.clear();
    if (this.#conn !== conn) return;
    this.#conn = undefined;
    if (this.#closed) return;
    this.#log.error({ vmms: this.#procs.size }, "keeper.lost");
    const procs = [...this.#procs.values()];
    this.#procs.clear();
    this.#held = [];
    for (const proc of procs) proc.settleLost();
  }
}

/** A VMM held by the keeper, as the driver sees it. */
export class KeeperVmm implements VmmProcess {
  readonly exited: Promise<ExitInfo>;
  #running = true;
  #expectExit = false;
  #stderr = "";
  #resolve!: (exit: ExitInfo) => void;

  constructor(
    readonly vmId: string,
    readonly pid: number,
    readonly client: KeeperClient,
  ) {
    this.exited = new Promise((resolve) => {
      this.#resolve = resolve;
    });
  }

  get running(): boolean {
    return this.#running;
  }

  stderr(): string {
    return this.#stderr;
  }

  expectExit(): void {
    this.#expectExit = true;
  }

  async kill(): Promise<ExitInfo> {
    this.expectExit();
    if (this.#running) {
      // A lost connection settles `exited` too.
      await this.client.kill(this.vmId).catch(() => {});
    }
    return this.exited;
  }

  settle(exit: { code: number | null; signal: NodeJS.Signals | null; stderr: string }): void {
    if (!this.#running) return;
    this.#running = false;
    this.#stderr = exit.stderr;
    const expected = this.#expectExit;
    const reason = expected ? "stopped" : crashReason(exit.code, exit.signal, exit.stderr);
    this.#resolve({ code: exit.code, signal: exit.signal, expected, reason });
  }

  /** The keeper is gone: so is this VMM (its watchdog kills every one). */
  settleLost(): void {
    if (!this.#running) return;
    this.#running = false;
    const expected = this.#expectExit;
    const reason = expected ? "stopped" : "the VMM keeper exited, and its VMMs with it";
    this.#resolve({ code: null, signal: null, expected, reason });
  }
}

function connectTo(path: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const socket = connect(path);
    socket.once("connect", () => {
      socket.off("error", reject);
      resolve(socket);
    });
    socket.once("error", reject);
  });
}

const SIGNAL = /^SIG[A-Z0-9]{1,12}$/;

function parseExit(m: Record<string, unknown>): KeeperExit | undefined {
  const { key, pid, code, signal, stderr } = m;
  if (typeof key !== "string" || !KEEPER_KEY.test(key) || !Number.isSafeInteger(pid)) return;
  return {
    key,
    pid: pid as number,
    code: Number.isSafeInteger(code) ? (code as number) : null,
    signal: typeof signal === "string" && SIGNAL.test(signal) ? signal : null,
    killed: m.killed === true,
    stderr: typeof stderr === "string" ? stderr.slice(-8192) : "",
  };
}

function parseHello(value: unknown): HelloResult {
  const h = value as Record<string, unknown> | null;
  const bad = (what: string) => new VmmError(`the keeper's hello ${what}`);
  if (typeof h !== "object" || h === null) throw bad("is no object");
  if (h.version !== KEEPER_PROTOCOL_VERSION) throw bad(`is of version ${String(h.version)}`);
  if (!Number.isSafeInteger(h.keeperPid)) throw bad("has no keeper pid");
  if (!Array.isArray(h.vms) || !Array.isArray(h.exits)) throw bad("lists no VMMs");
  const vms: KeeperVm[] = [];
  for (const vm of h.vms as Record<string, unknown>[]) {
    if (typeof vm?.key !== "string" || !KEEPER_KEY.test(vm.key) || !Number.isSafeInteger(vm.pid))
      throw bad("lists a VMM without key or pid");
    const note = typeof vm.note === "string" ? vm.note : undefined;
    const netnsFd = Number.isSafeInteger(vm.netnsFd) ? (vm.netnsFd as number) : undefined;
    vms.push({
      key: vm.key,
      pid: vm.pid as number,
      ...(netnsFd !== undefined && { netnsFd }),
      ...(note !== undefined && { note }),
    });
  }
  const exits = (h.exits as Record<string, unknown>[])
    .map((e) => (typeof e === "object" && e !== null ? parseExit(e) : undefined))
    .filter((e): e is KeeperExit => e !== undefined);
  return { version: KEEPER_PROTOCOL_VERSION, keeperPid: h.keeperPid as number, vms, exits };
}
