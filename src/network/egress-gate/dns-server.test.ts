// The gate's DNS listeners on loopback sockets of the test's own, answering every query
// with a fixed reply (what they do with the reply is what is tested, not the reply).
import assert from "node:assert/strict";
import { createSocket, type Socket as UdpSocket } from "node:dgram";
import { once } from "node:events";
import { type AddressInfo, connect, createServer, type Server, type Socket } from "node:net";
import { describe, it } from "node:test";
import { askUdp, dnsQuery } from "../../../test/helpers/loopback-gate.js";
import { type AnswerDns, serveDnsDatagrams, serveDnsStream } from "./dns-server.js";

/** Answers a query with itself, flagged as a response (enough for a client to take it). */
const echo: AnswerDns = async (query) => {
  const reply = Buffer.from(query);
  if (reply.length > 2) reply[2] = (reply[2] as number) | 0x80;
  return reply;
};

async function udpServer(answer: AnswerDns = echo): Promise<UdpSocket> {
  const udp = createSocket("udp4");
  serveDnsDatagrams(udp, answer);
  udp.bind(0, "127.0.0.1");
  await once(udp, "listening");
  return udp;
}

async function tcpServer(answer: AnswerDns = echo): Promise<Server> {
  const server = createServer((socket) => serveDnsStream(socket, answer));
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  return server;
}

describe("the gate's DNS over UDP", () => {
  // Guest root can send a query from source port 0 (a raw socket); the kernel delivers it and
  // dgram reports it as it does any datagram. Replying to port 0 threw after the answer's await
  // (ERR_SOCKET_BAD_PORT): an unhandled rejection, which ends the server's process.
  it("drops a query from source port 0 and keeps answering", async () => {
    const udp = await udpServer();
    try {
      udp.emit("message", dnsQuery("a.allowed.test"), {
        address: "127.0.0.1",
        family: "IPv4",
        port: 0,
        size: 32,
      });
      await new Promise((resolve) => setTimeout(resolve, 20));
      const answer = await askUdp((udp.address() as AddressInfo).port, dnsQuery("b.test", 9));
      assert.equal(answer?.id, 9);
    } finally {
      udp.close();
    }
  });

  it("an answer ready once the socket closed goes nowhere, and throws nothing", async () => {
    let release: () => void = () => {};
    let asked: () => void = () => {};
    const lookup = new Promise<void>((resolve) => {
      asked = resolve;
    });
    const udp = await udpServer(async (query) => {
      asked();
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      return echo(query);
    });
    const answer = askUdp((udp.address() as AddressInfo).port, dnsQuery("slow.test"), 300);
    await lookup;
    udp.close();
    release();
    assert.equal(await answer, undefined);
    await new Promise((resolve) => setTimeout(resolve, 20));
  });

  it("drops a query its answer throws on, by rejecting or at once", async () => {
    const throwing: AnswerDns[] = [
      async () => {
        throw new Error("a hostile query broke the encoder");
      },
      () => {
        throw new Error("a limit that cannot be read");
      },
    ];
    for (const answer of throwing) {
      const udp = await udpServer(answer);
      try {
        const port = (udp.address() as AddressInfo).port;
        assert.equal(await askUdp(port, dnsQuery("x.test"), 200), undefined);
      } finally {
        udp.close();
      }
    }
  });
});

describe("the gate's DNS over TCP", () => {
  /** Connects, writes `bytes`, and says how it went within `ms`: what came back, and whether it closed. */
  async function exchange(port: number, bytes: Buffer, ms = 1000) {
    const socket = connect(port, "127.0.0.1");
    socket.on("error", () => {});
    const chunks: Buffer[] = [];
    socket.on("data", (chunk: Buffer) => chunks.push(chunk));
    const closed = new Promise<boolean>((resolve) => {
      socket.once("close", () => resolve(true));
      setTimeout(() => resolve(false), ms).unref();
    });
    socket.write(bytes);
    const wasClosed = await closed;
    socket.destroy();
    return { received: Buffer.concat(chunks), closed: wasClosed };
  }

  function framed(...queries: Buffer[]): Buffer {
    return Buffer.concat(
      queries.map((q) => {
        const prefix = Buffer.alloc(2);
        prefix.writeUInt16BE(q.length);
        return Buffer.concat([prefix, q]);
      }),
    );
  }

  it("answers length-prefixed queries in order, and closes on a prefix past the bound", async () => {
    const server = await tcpServer();
    try {
      const port = (server.address() as AddressInfo).port;
      const two = await exchange(port, framed(dnsQuery("a.test", 1), dnsQuery("b.test", 2)), 300);
      assert.equal(two.received.readUInt16BE(0), dnsQuery("a.test", 1).length);
      assert.equal(two.received.readUInt16BE(2), 1, "the first answer's id");
      const huge = Buffer.from([0xff, 0xff, 1, 2, 3]);
      assert.equal((await exchange(port, huge)).closed, true);
    } finally {
      server.close();
    }
  });

  it("closes a connection whose answer throws, and keeps serving others", async () => {
    let calls = 0;
    const server = await tcpServer(async (query) => {
      if (++calls === 1) throw new Error("broken");
      return echo(query);
    });
    try {
      const port = (server.address() as AddressInfo).port;
      assert.equal((await exchange(port, framed(dnsQuery("a.test")))).closed, true);
      const next = await exchange(port, framed(dnsQuery("b.test", 3)), 300);
      assert.equal(next.received.readUInt16BE(2), 3);
    } finally {
      server.close();
    }
  });

  it("holds back a client that sends queries and reads no answers: nothing piles up", async () => {
    const server = await tcpServer(async () => Buffer.alloc(4000, 1));
    try {
      const accepted = once(server, "connection") as Promise<[Socket]>;
      const client = connect((server.address() as AddressInfo).port, "127.0.0.1");
      client.on("error", () => {});
      client.pause(); // never reads
      const [ours] = await accepted;
      // Each batch once the last was read (a small input at any time), 200 kB of answers each.
      const batch = framed(...Array.from({ length: 50 }, () => dnsQuery("flood.test")));
      let most = 0;
      let sent = 0;
      for (let i = 0; i < 200 && !client.destroyed && !ours.destroyed; i++) {
        client.write(batch);
        sent += batch.length;
        for (let wait = 0; wait < 20 && ours.bytesRead < sent; wait++) {
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
        if (ours.bytesRead < sent) break; // the server stopped reading: held back
        await new Promise((resolve) => setImmediate(resolve));
        most = Math.max(most, ours.writableLength);
      }
      client.destroy();
      assert.ok(most < 1024 * 1024, `${most} bytes of answers queued for a client not reading`);
    } finally {
      server.close();
    }
  });

  it("takes queries pipelined in one write, whatever their number", async () => {
    const server = await tcpServer();
    try {
      const port = (server.address() as AddressInfo).port;
      const many = framed(...Array.from({ length: 1000 }, (_, i) => dnsQuery("a.test", i)));
      const { received } = await exchange(port, many, 500);
      let at = 0;
      let answers = 0;
      while (at + 2 <= received.length) {
        at += 2 + received.readUInt16BE(at);
        answers++;
      }
      assert.equal(answers, 1000);
    } finally {
      server.close();
    }
  });
});
