import assert from "node:assert/strict";
import { mkdtemp, readFile, rm, stat, writeFile } from "node:fs/promises";
import type { AddressInfo, Socket } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { connect, createServer } from "node:tls";
import { EGRESS_CA_FILES, EgressCa } from "./egress-ca.js";

/** A TLS handshake with a server presenting `ca`'s context for `name`, trusting `trusted` alone. */
async function handshake(ca: EgressCa, name: string, servername: string, trusted: string) {
  const server = createServer({
    SNICallback: (_n, cb) => void ca.contextFor(name).then((c) => cb(null, c), cb),
  });
  // Both ends are destroyed after: a connection left open keeps the test's process alive
  // (server.close() waits for it), which hung CI's unit tier after this file passed.
  const accepted = new Set<Socket>();
  server.on("connection", (socket: Socket) => {
    accepted.add(socket);
    socket.on("error", () => {});
  });
  server.on("tlsClientError", () => {});
  server.on("secureConnection", (socket) => socket.end("hi"));
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const socket = connect({
    host: "127.0.0.1",
    port: (server.address() as AddressInfo).port,
    servername,
    ca: trusted,
  });
  try {
    return await new Promise<string>((resolve) => {
      socket.on("secureConnect", () => resolve("trusted"));
      socket.on("error", (err) => resolve((err as NodeJS.ErrnoException).code ?? err.message));
    });
  } finally {
    socket.destroy();
    for (const s of accepted) s.destroy();
    server.close();
  }
}

describe("EgressCa", () => {
  const dirs: string[] = [];
  const dir = async () => {
    const made = await mkdtemp(join(tmpdir(), "warren-egress-ca-"));
    dirs.push(made);
    return made;
  };
  after(() => Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true }))));

  it("is made once, its key the server's alone, and kept across starts", async () => {
    const where = await dir();
    const first = await EgressCa.open(where);
    const mode = (await stat(join(where, EGRESS_CA_FILES.key))).mode & 0o777;
    assert.equal(mode, 0o600);
    const again = await EgressCa.open(where);
    assert.equal(again.certificate, first.certificate);
    assert.equal(await readFile(join(where, EGRESS_CA_FILES.cert), "utf8"), first.certificate);
  });

  it("issues certificates a client trusting it accepts for that name alone", async () => {
    const ca = await EgressCa.open(await dir());
    assert.equal(
      await handshake(ca, "api.example.com", "api.example.com", ca.certificate),
      "trusted",
    );
    assert.equal(
      await handshake(ca, "api.example.com", "other.example.com", ca.certificate),
      "ERR_TLS_CERT_ALTNAME_INVALID",
    );
    const stranger = await EgressCa.open(await dir());
    assert.match(
      await handshake(ca, "api.example.com", "api.example.com", stranger.certificate),
      /UNABLE_TO_VERIFY|SELF_SIGNED|UNABLE_TO_GET_ISSUER/,
    );
    assert.equal(ca.contextFor("a.test"), ca.contextFor("a.test"), "kept, not issued again");
  });

  it("an unusable CA on disk is made again", async () => {
    const where = await dir();
    const first = await EgressCa.open(where);
    await writeFile(join(where, EGRESS_CA_FILES.key), "not a key");
    const second = await EgressCa.open(where);
    assert.notEqual(second.certificate, first.certificate);
  });
});
