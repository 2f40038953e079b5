import { type ChildProcess, spawn } from "node:child_process";
import { randomBytes } from "node:crypto";
import { existsSync, mkdirSync, rmSync } from "node:fs";
import { createServer, type Server, type Socket } from "node:net";
import { dirname } from "node:path";
import { PassThrough, type Readable } from "node:stream";
import { type DriverProcess, OutputTail } from "./driver-process.js";
import { LineReader } from "./line-reader.js";

/** A forked kernel's first line (its token) must come this soon and be this short. */
const HELLO_MS = 10_000;
const HELLO_BYTES = 1024;
/** The zygote's own event lines are small ("forked", "exited"); longer is it failing. */
const MAX_ZYGOTE_LINE = 64 * 1024;

/**
 * Python kernels forked from one process that did the heavy start once
 * (kernels/python/warren_zygote.py, PROTOCOL.md "Zygote"): a new context is a fork() instead
 * of ~35 s of imports under TCG. The zygote starts on the first fork and again after it died.
 * Each forked kernel connects back to envd's unix socket (in a root-only directory) and names
 * itself by a token only envd and the zygote know. (Not the abstract namespace: Node 20 binds
 * those padded to 108 bytes.)
 */
export class PythonZygote {
  readonly #command: readonly string[];
  readonly #env: () => Record<string, string>;
  readonly #socketPath: string;
  /** Forks by token, until the zygote said it made them. */
  readonly #unforked = new Map<string, ForkedDriver>();
  /** Forks by token, until their kernel connected. */
  readonly #unconnected = new Map<string, ForkedDriver>();
  /** Forks by pid, until their exit is reported. */
  readonly #byPid = new Map<number, ForkedDriver>();
  readonly #tail = new OutputTail();
  #server: Server | undefined;
  #zygote: ChildProcess | undefined;
  #closed = false;

  /**
   * `command`: python and warren_zygote.py; `env`: the zygote's own environment; `socketPath`:
   * where forks connect back (its directory is made, root-only).
   */
  constructor(command: readonly string[], env: () => Record<string, string>, socketPath: string) {
    this.#command = command;
    this.#env = env;
    this.#socketPath = socketPath;
  }

  /** A kernel forked in `cwd` with exactly `env` as its environment. */
  fork(cwd: string, env: Readonly<Record<string, string>>): DriverProcess {
    const token = randomBytes(16).toString("hex");
    const driver = new ForkedDriver(() => this.#tail.text);
    if (this.#closed) {
      driver.end("could not start: the code interpreter is shutting down");
      return driver;
    }
    this.#unforked.set(token, driver);
    this.#unconnected.set(token, driver);
    driver.ended.then(() => {
      this.#unforked.delete(token);
      this.#unconnected.delete(token);
      if (driver.pid !== undefined) this.#byPid.delete(driver.pid);
    });
    // A socket someone deleted (`rm -rf` in the guest) is made again.
    if (this.#server && !existsSync(this.#socketPath)) {
      this.#server.close();
      this.#server = undefined;
    }
    this.#server ??= this.#listen();
    const zygote = this.#running();
    zygote.stdin?.write(`${JSON.stringify({ token, cwd, env })}\n`);
    return driver;
  }

  /** Stops the zygote; kernels already forked live on until their contexts close them. */
  close(): void {
    this.#closed = true;
    this.#zygote?.kill("SIGKILL");
    this.#server?.close();
  }

  #running(): ChildProcess {
    if (this.#zygote && this.#zygote.exitCode === null && this.#zygote.signalCode === null)
      return this.#zygote;
    const [command, ...args] = this.#command;
    const zygote = spawn(command as string, [...args, this.#socketPath], {
      env: this.#env(),
      stdio: ["pipe", "pipe", "pipe", "pipe"],
    });
    this.#zygote = zygote;
    for (const output of [zygote.stdout, zygote.stderr]) output?.on("data", this.#tail.add);
    zygote.stdin?.on("error", () => {}); // gone: reported through exit
    new LineReader(zygote.stdio[3] as Readable, MAX_ZYGOTE_LINE).onLine = (line) =>
      this.#onEvent(line);
    const gone = (how: string) => {
      if (this.#zygote === zygote) this.#zygote = undefined;
      // Forks it had not made, or whose kernel never connected, will never run.
      for (const driver of new Set([...this.#unforked.values(), ...this.#unconnected.values()])) {
        driver.kill();
        driver.end(`could not start: the python zygote ${how}`);
      }
      // Its kernels live on (tini reaps them), but their exits are no longer reported.
      for (const driver of this.#byPid.values()) driver.reportedExitsLost();
      this.#byPid.clear();
    };
    zygote.once("error", (err) => gone(`could not start: ${err.message}`));
    zygote.once("exit", (code, signal) =>
      gone(signal ? `exited (${signal})` : `exited (status ${code})`),
    );
    return zygote;
  }

  #onEvent(line: string): void {
    let event: { type?: unknown; token?: unknown; pid?: unknown; how?: unknown };
    try {
      event = JSON.parse(line);
    } catch {
      return;
    }
    if (typeof event.pid !== "number") return;
    if (event.type === "forked" && typeof event.token === "string") {
      const driver = this.#unforked.get(event.token);
      if (!driver) return;
      this.#unforked.delete(event.token);
      driver.forked(event.pid);
      this.#byPid.set(event.pid, driver);
    } else if (event.type === "exited" && typeof event.how === "string") {
      const driver = this.#byPid.get(event.pid);
      this.#byPid.delete(event.pid);
      driver?.end(event.how);
    }
  }

  #listen(): Server {
    const server = createServer((socket) => this.#hello(socket));
    server.on("error", (err) => {
      this.#tail.add(Buffer.from(`\nthe kernels' socket failed: ${err.message}\n`));
    });
    mkdirSync(dirname(this.#socketPath), { recursive: true, mode: 0o700 });
    rmSync(this.#socketPath, { force: true }); // a previous envd's
    server.listen(this.#socketPath);
    return server;
  }

  /** Reads a connection's token line, then hands the connection to its fork. */
  #hello(socket: Socket): void {
    socket.on("error", () => {}); // a reset: the fork's `ended` says what happened
    const timer = setTimeout(() => socket.destroy(), HELLO_MS);
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      head = Buffer.concat([head, chunk]);
      const nl = head.indexOf(10);
      if (nl === -1) {
        if (head.length > HELLO_BYTES) socket.destroy();
        return;
      }
      clearTimeout(timer);
      socket.off("data", onData);
      socket.pause();
      let token: unknown;
      try {
        token = (JSON.parse(head.subarray(0, nl).toString("utf8")) as { token?: unknown }).token;
      } catch {}
      const driver = typeof token === "string" ? this.#unconnected.get(token) : undefined;
      if (!driver) return void socket.destroy();
      this.#unconnected.delete(token as string);
      if (nl + 1 < head.length) socket.unshift(head.subarray(nl + 1));
      driver.connected(socket);
    };
    socket.on("data", onData);
  }
}

/** One fork's DriverProcess: its requests wait until its kernel connected. */
class ForkedDriver implements DriverProcess {
  readonly requests = new PassThrough();
  readonly events = new PassThrough();
  readonly ended: Promise<string>;
  readonly diagnostics: () => string;
  #end!: (how: string) => void;
  pid: number | undefined;
  #socket: Socket | undefined;
  #killed = false;
  #over = false;
  /** The zygote that would report the exit is gone: the socket closing is the exit. */
  #exitsLost = false;

  constructor(diagnostics: () => string) {
    this.diagnostics = diagnostics;
    this.ended = new Promise((resolve) => {
      this.#end = resolve;
    });
  }

  forked(pid: number): void {
    this.pid = pid;
    if (this.#killed) this.kill();
  }

  connected(socket: Socket): void {
    if (this.#over) return void socket.destroy();
    this.#socket = socket;
    this.requests.pipe(socket);
    socket.pipe(this.events);
    socket.once("close", () => {
      if (this.#exitsLost) this.end("exited");
    });
  }

  reportedExitsLost(): void {
    this.#exitsLost = true;
    if (this.#socket?.destroyed) this.end("exited");
  }

  interrupt(): void {
    this.#signal("SIGINT"); // not forked yet: nothing runs to interrupt
  }

  kill(): void {
    this.#killed = true; // not forked yet: killed once it is
    this.#signal("SIGKILL");
  }

  #signal(signal: "SIGINT" | "SIGKILL"): void {
    if (this.#over || this.pid === undefined) return;
    try {
      process.kill(this.pid, signal);
    } catch {} // gone already: its exit is on its way
  }

  end(how: string): void {
    if (this.#over) return;
    this.#over = true;
    this.#socket?.destroy();
    this.#end(how);
  }
}
