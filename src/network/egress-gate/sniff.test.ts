import assert from "node:assert/strict";
import { once } from "node:events";
import { type AddressInfo, createServer } from "node:net";
import { describe, it } from "node:test";
import { connect } from "node:tls";
import { sniffName } from "./sniff.js";

/** The first bytes a real TLS client (Node's OpenSSL) sends, asking for `servername`. */
async function clientHello(servername?: string): Promise<Buffer> {
  const server = createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const { port } = server.address() as AddressInfo;
  const first = new Promise<Buffer>((resolve) =>
    server.once("connection", (socket) =>
      socket.once("data", (data: Buffer) => {
        resolve(data);
        socket.destroy();
      }),
    ),
  );
  const client = connect({ host: "127.0.0.1", port, ...(servername && { servername }) });
  client.on("error", () => {});
  const bytes = await first;
  client.destroy();
  server.close();
  return bytes;
}

describe("sniffing a connection's name", () => {
  it("reads the SNI of a real ClientHello, and asks for more while it is cut short", async () => {
    const hello = await clientHello("api.allowed.test");
    assert.deepEqual(sniffName(hello), { kind: "name", name: "api.allowed.test", by: "tls" });
    for (const cut of [1, 4, 5, 60, hello.length - 1])
      assert.deepEqual(sniffName(hello.subarray(0, cut)), { kind: "more" }, `cut at ${cut}`);
    // Without a server name (an IP literal): TLS, nameless.
    assert.deepEqual(sniffName(await clientHello()), { kind: "nameless" });
  });

  it("reads an HTTP/1 request's Host, port dropped, and waits for the head", () => {
    const request = "GET /x HTTP/1.1\r\nUser-Agent: t\r\nHost: Denied.Test:8080\r\n\r\n";
    assert.deepEqual(sniffName(Buffer.from(request)), {
      kind: "name",
      name: "Denied.Test",
      by: "http",
    });
    for (const cut of [1, 3, 10, 20])
      assert.deepEqual(
        sniffName(Buffer.from(request.slice(0, cut))),
        { kind: "more" },
        `cut at ${cut}`,
      );
    assert.deepEqual(sniffName(Buffer.from("GET / HTTP/1.0\r\n\r\n")), { kind: "nameless" });
  });

  it("gives up on what is neither: SSH banners, binary, a malformed ClientHello", () => {
    assert.deepEqual(sniffName(Buffer.from("SSH-2.0-OpenSSH_9.2\r\n")), { kind: "other" });
    assert.deepEqual(sniffName(Buffer.from([0x00, 0x01, 0x02])), { kind: "other" });
    const lying = Buffer.from([
      0x16, 0x03, 0x01, 0x00, 0x08, 0x01, 0x00, 0x00, 0x04, 0x03, 0x03, 0xff, 0xff,
    ]);
    assert.deepEqual(sniffName(lying), { kind: "other" });
  });
});
