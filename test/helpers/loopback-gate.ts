// An egress gate for the unit tier: no namespace, its listeners on 127.0.0.1, every connection
// it accepts taken as "originally sent" to a public address on the port the test names (where
// its upstream listens on loopback), no limits (loopback is reachable), and names resolved
// from the test's table. Plus what its tests drive it with: a raw guest connection and
// upstreams that record what reached them.
import { createSocket } from "node:dgram";
import { once } from "node:events";
import { createServer as createHttpServer, type IncomingHttpHeaders } from "node:http";
import { type AddressInfo, connect, type Socket } from "node:net";
import * as dnsPacket from "dns-packet";
import type { Resolve } from "../../src/network/egress-gate/decide.js";
import { EgressGate, type EgressGateOptions } from "../../src/network/egress-gate/egress-gate.js";
import { type EgressPolicy, validateEgressPolicy } from "../../src/network/egress-policy.js";

/** Where the guest "sent" every connection: a public address the policy refuses by itself. */
export const GUEST_DESTINATION = "203.0.113.9";

export interface LoopbackGate {
  readonly gate: EgressGate;
  /** The port connections are "originally sent" to (the upstream's, on loopback). */
  port: number;
  close(): Promise<void>;
}

export async function loopbackGate(
  policy: Partial<EgressPolicy>,
  resolve: Resolve,
  more: Partial<EgressGateOptions> = {},
): Promise<LoopbackGate> {
  const at = { host: "127.0.0.1", port: 0 };
  const handle: { port: number } = { port: 0 };
  const gate = await EgressGate.open(
    {
      netns: "unit",
      gateway: "127.0.0.1",
      limits: () => ({ never: [], restricted: [] }),
      resolve,
      endpoints: {
        tcp: () => at,
        dnsTcp: () => at,
        dnsUdp: () => at,
        originalDestination: () => ({ address: GUEST_DESTINATION, port: handle.port }),
      },
      ...more,
    },
    validateEgressPolicy({ allowInternet: true, allowOut: [], denyOut: [], ...policy }),
  );
  return Object.assign(handle, { gate, close: () => gate.close() });
}

/** Names resolved from a table (unknown: no address). */
export function table(names: Record<string, readonly string[]>): Resolve {
  return async (name) => names[name] ?? [];
}

/** A guest's raw TCP connection: what it was sent so far, and how it ended. */
export class RawGuest {
  readonly socket: Socket;
  #data = Buffer.alloc(0);
  #ended: Promise<"end" | "reset" | "close">;

  constructor(port: number) {
    this.socket = connect(port, "127.0.0.1");
    this.socket.on("data", (chunk: Buffer) => {
      this.#data = Buffer.concat([this.#data, chunk]);
    });
    this.#ended = new Promise((resolve) => {
      this.socket.once("error", (err: NodeJS.ErrnoException) =>
        resolve(err.code === "ECONNRESET" ? "reset" : "close"),
      );
      this.socket.once("end", () => resolve("end"));
      this.socket.once("close", () => resolve("close"));
    });
  }

  get text(): string {
    return this.#data.toString("latin1");
  }

  write(bytes: string | Buffer): void {
    this.socket.write(bytes);
  }

  /** Resolves once what arrived matches, rejects after `ms`. */
  async until(pattern: RegExp, ms = 3000): Promise<string> {
    for (const end = Date.now() + ms; Date.now() < end; ) {
      if (pattern.test(this.text)) return this.text;
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    throw new Error(`no ${pattern} within ${ms} ms; got ${JSON.stringify(this.text)}`);
  }

  /** How the connection ended, or "open" when it is still open after `ms`. */
  ended(ms = 3000): Promise<"end" | "reset" | "close" | "open"> {
    return Promise.race([
      this.#ended,
      new Promise<"open">((resolve) => setTimeout(() => resolve("open"), ms).unref()),
    ]);
  }

  destroy(): void {
    this.socket.destroy();
  }
}

export interface Seen {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A plain HTTP server recording every request that reached it; answers `ok <n>`. */
export async function recordingUpstream() {
  const seen: Seen[] = [];
  const server = createHttpServer((req, res) => {
    let body = "";
    req.setEncoding("latin1");
    req.on("data", (chunk: string) => {
      body += chunk;
    });
    req.on("end", () => {
      seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body });
      res.end(`ok ${seen.length}`);
    });
  });
  server.on("upgrade", (req, socket: Socket) => {
    seen.push({ method: req.method ?? "", url: req.url ?? "", headers: req.headers, body: "" });
    socket.write(
      "HTTP/1.1 101 Switching Protocols\r\nConnection: upgrade\r\nUpgrade: websocket\r\n\r\n",
    );
    socket.pipe(socket);
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return {
    seen,
    port: (server.address() as AddressInfo).port,
    close: () => {
      server.closeAllConnections();
      server.close();
    },
  };
}

/** A DNS A query for `name`. */
export function dnsQuery(name: string, id = 1): Buffer {
  return dnsPacket.encode({
    type: "query",
    id,
    flags: dnsPacket.RECURSION_DESIRED,
    questions: [{ type: "A", name, class: "IN" }],
  });
}

/** Asks a UDP DNS server on loopback; the decoded answer, or undefined after `ms`. */
export async function askUdp(
  port: number,
  query: Buffer,
  ms = 2000,
): Promise<(dnsPacket.DecodedPacket & { rcode?: string }) | undefined> {
  const client = createSocket("udp4");
  try {
    const answer = new Promise<Buffer | undefined>((resolve) => {
      client.once("message", (message) => resolve(message));
      setTimeout(() => resolve(undefined), ms).unref();
    });
    client.send(query, port, "127.0.0.1");
    const bytes = await answer;
    return bytes && (dnsPacket.decode(bytes) as dnsPacket.DecodedPacket & { rcode?: string });
  } finally {
    client.close();
  }
}
