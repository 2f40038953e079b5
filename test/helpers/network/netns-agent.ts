import { type ChildProcess, spawn } from "node:child_process";
import { Socket } from "node:net";
import { dirname, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { runCommand } from "../../../src/network/index.js";

const AGENT = join(dirname(fileURLToPath(import.meta.url)), "fixtures", "netns-agent.mjs");

export type AgentReply = { ok: true; data?: string; conn?: number } | { ok: false; error: string };

/** A TCP client/server running inside a network namespace (fixtures/netns-agent.mjs). */
export class NetnsAgent {
  readonly #child: ChildProcess;
  readonly #pending = new Map<number, (reply: AgentReply) => void>();
  #nextId = 1;
  #stderr = "";

  private constructor(child: ChildProcess) {
    this.#child = child;
  }

  /** Starts an agent in the namespace mounted at `netnsPath`. */
  static async start(netnsPath: string): Promise<NetnsAgent> {
    const child = spawn("nsenter", [`--net=${netnsPath}`, process.execPath, AGENT], {
      stdio: ["pipe", "pipe", "pipe"],
    });
    const agent = new NetnsAgent(child);
    child.stderr?.on("data", (d: Buffer) => {
      agent.#stderr += d.toString();
    });
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
    const ready = new Promise<void>((resolve, reject) => {
      child.once("exit", (code) =>
        reject(new Error(`netns agent in ${netnsPath} exited with ${code}: ${agent.#stderr}`)),
      );
      lines.on("line", (line) => {
        const msg = JSON.parse(line) as { ready?: boolean; id?: number } & AgentReply;
        if (msg.ready) resolve();
        else if (msg.id !== undefined) {
          const { id, ...reply } = msg;
          agent.#pending.get(id)?.(reply);
        }
      });
    });
    await ready;
    return agent;
  }

  listen(port: number, reply: string): Promise<AgentReply> {
    return this.#request({ op: "listen", port, reply });
  }

  /** An HTTP server answering "<reply> <local> <remote>" to every request. */
  listenHttp(port: number, reply: string): Promise<AgentReply> {
    return this.#request({ op: "listenHttp", port, reply });
  }

  /** Connects and reads the listener's greeting; `ok: false` with an error code if it can't. */
  connect(host: string, port: number, timeoutMs = 2000): Promise<AgentReply> {
    return this.#request({ op: "connect", host, port, timeoutMs });
  }

  /** Like connect, but keeps the connection open for send(). */
  open(host: string, port: number, timeoutMs = 2000): Promise<AgentReply> {
    return this.#request({ op: "open", host, port, timeoutMs });
  }

  /** Sends a line on an open connection and reads the echo. */
  send(conn: number, data: string, timeoutMs = 2000): Promise<AgentReply> {
    return this.#request({ op: "send", conn, data, timeoutMs });
  }

  listenTls(port: number, reply: string, tls: { key: string; cert: string }): Promise<AgentReply> {
    return this.#request({ op: "listenTls", port, reply, ...tls });
  }

  /** TLS with `servername` (SNI), any certificate; reads the first line. */
  tls(
    host: string,
    port: number,
    servername: string | undefined,
    keep = false,
    timeoutMs = 4000,
  ): Promise<AgentReply> {
    return this.#request({ op: "tls", host, port, servername, keep, timeoutMs });
  }

  /** Sends an HTTP request head with `hostHeader` first, then reads the first line. */
  http(host: string, port: number, hostHeader: string, timeoutMs = 4000): Promise<AgentReply> {
    return this.#request({ op: "http", host, port, hostHeader, timeoutMs });
  }

  /** A records of `name` from the DNS server `server`; `ok: false` with the error code. */
  resolve(server: string, name: string, timeoutMs = 3000): Promise<AgentReply> {
    return this.#request({ op: "resolve", server, name, timeoutMs });
  }

  /**
   * An HTTPS server on `port` answering "ok", recording each request (see `seen`) but a
   * benchmark's (`/bench` paths; `/bench/bulk` answers `bulkBytes` bytes).
   */
  listenHttps(
    port: number,
    tls: { key: string; cert: string },
    bulkBytes = 0,
  ): Promise<AgentReply> {
    return this.#request({ op: "listenHttps", port, bulkBytes, ...tls });
  }

  /** What listenHttps servers (and listenHttp's POSTs, with their body) were sent since the last call. */
  async seen(): Promise<
    {
      method: string;
      url: string;
      headers: Record<string, string>;
      local: string;
      body?: string;
      /** When a listenHttp server received it (epoch ms). */
      at?: number;
    }[]
  > {
    const reply = await this.#request({ op: "seen" });
    if (!reply.ok) throw new Error(reply.error);
    return JSON.parse(reply.data ?? "[]");
  }

  /** An HTTPS GET to `host` trusting `ca` alone: data is "<status> <body>". */
  https(
    host: string,
    port: number,
    options: { servername: string; ca: string; hostHeader?: string; timeoutMs?: number },
  ): Promise<AgentReply> {
    return this.#request({ op: "https", host, port, timeoutMs: 8000, ...options });
  }

  /** `count` HTTPS GETs one after another, each on a new connection: ms each, comma-joined. */
  httpsTimes(
    host: string,
    port: number,
    options: { servername: string; ca: string; count: number },
  ): Promise<AgentReply> {
    return this.#request({ op: "httpsTimes", host, port, timeoutMs: 120_000, ...options });
  }

  /** An HTTPS GET of `listenHttps`'s bulk answer: data is "<bytes> <ms>". */
  httpsDownload(
    host: string,
    port: number,
    options: { servername: string; ca: string },
  ): Promise<AgentReply> {
    return this.#request({ op: "httpsDownload", host, port, timeoutMs: 120_000, ...options });
  }

  /** A TLS server on `port` sending `bytes` bytes to each connection, then ending it. */
  listenBulk(port: number, bytes: number, tls: { key: string; cert: string }): Promise<AgentReply> {
    return this.#request({ op: "listenBulk", port, bytes, ...tls });
  }

  /** `count` TLS connections one after another, each to its first byte: ms each, comma-joined. */
  connectTimes(host: string, port: number, servername: string, count: number): Promise<AgentReply> {
    return this.#request({ op: "connectTimes", host, port, servername, count, timeoutMs: 120_000 });
  }

  /** One TLS connection read to its end: "<bytes> <ms>". */
  download(host: string, port: number, servername: string): Promise<AgentReply> {
    return this.#request({ op: "download", host, port, servername, timeoutMs: 300_000 });
  }

  async close(): Promise<void> {
    if (this.#child.exitCode !== null || this.#child.signalCode !== null) return;
    const exited = new Promise((resolve) => this.#child.once("exit", resolve));
    this.#child.stdin?.end();
    const timer = setTimeout(() => this.#child.kill("SIGKILL"), 2000);
    await exited;
    clearTimeout(timer);
  }

  #request(body: Record<string, unknown>): Promise<AgentReply> {
    const id = this.#nextId++;
    return new Promise((resolve) => {
      this.#pending.set(id, (reply) => {
        this.#pending.delete(id);
        resolve(reply);
      });
      this.#child.stdin?.write(`${JSON.stringify({ id, ...body })}\n`);
    });
  }
}

/** From the host (this process): connects and reads the listener's greeting. */
export function hostConnect(host: string, port: number, timeoutMs = 2000): Promise<AgentReply> {
  return new Promise((resolve) => {
    const socket = new Socket();
    let buffered = "";
    const timer = setTimeout(() => done({ ok: false, error: "ETIMEDOUT" }), timeoutMs);
    function done(reply: AgentReply) {
      clearTimeout(timer);
      socket.destroy();
      resolve(reply);
    }
    socket.on("data", (chunk: Buffer) => {
      buffered += chunk.toString();
      const nl = buffered.indexOf("\n");
      if (nl !== -1) done({ ok: true, data: buffered.slice(0, nl) });
    });
    socket.on("error", (err: NodeJS.ErrnoException) =>
      done({ ok: false, error: err.code ?? err.message }),
    );
    socket.on("close", () => done({ ok: false, error: "ECLOSED" }));
    socket.connect(port, host);
  });
}

/**
 * Like hostConnect, but from a process of the host running as user and group `uid` with
 * no supplementary groups (setpriv): another local user than the server's.
 */
export async function hostConnectAs(
  uid: number,
  host: string,
  port: number,
  timeoutMs = 2000,
): Promise<AgentReply> {
  const script = `
    const [host, port, timeoutMs] = process.argv.slice(1);
    const socket = require("node:net").connect(Number(port), host);
    const done = (reply) => { console.log(JSON.stringify(reply)); process.exit(0); };
    setTimeout(() => done({ ok: false, error: "ETIMEDOUT" }), Number(timeoutMs));
    let buffered = "";
    socket.on("data", (chunk) => {
      buffered += chunk;
      const nl = buffered.indexOf("\\n");
      if (nl !== -1) done({ ok: true, data: buffered.slice(0, nl) });
    });
    socket.on("error", (err) => done({ ok: false, error: err.code ?? err.message }));
    socket.on("close", () => done({ ok: false, error: "ECLOSED" }));`;
  const id = String(uid);
  const { stdout } = await runCommand("setpriv", [
    `--reuid=${id}`,
    `--regid=${id}`,
    "--clear-groups",
    process.execPath,
    "-e",
    script,
    host,
    String(port),
    String(timeoutMs),
  ]);
  return JSON.parse(stdout) as AgentReply;
}
