import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import { type AddressInfo, connect } from "node:net";
import { PassThrough } from "node:stream";
import { it } from "node:test";
import { WarrenError } from "../shared/index.js";
import { apiError, apiErrorBody, proxyRefusal } from "./error-answer.js";
import { sendError, writeSocketError } from "./send-error.js";

it("the API's body keeps a WarrenError's status, kind, reason and message", () => {
  assert.deepEqual(apiErrorBody(new WarrenError("sandbox_paused", "paused: resume it")), {
    code: 409,
    message: "paused: resume it",
    error_code: "conflict",
    reason: "sandbox_paused",
  });
});

it("a 500 says only 'internal error'", () => {
  assert.deepEqual(apiErrorBody(new WarrenError("vmm_failed", "qemu died at /run/x")), {
    code: 500,
    message: "internal error",
    error_code: "internal",
    reason: "vmm_failed",
  });
  assert.deepEqual(apiErrorBody(new Error("ENOENT: /var/lib/secret")), {
    code: 500,
    message: "internal error",
    error_code: "internal",
  });
});

it("busy and unavailable answers say when to retry", () => {
  const full = apiError(new WarrenError("capacity_exhausted", "full"));
  assert.equal(full.headers["retry-after"], "1");
  const starting = apiError(new WarrenError("not_ready", "starting"));
  assert.equal(starting.headers["retry-after"], "5");
  const auth = apiError(new WarrenError("unauthenticated", "no key"), {
    "www-authenticate": "Bearer",
  });
  assert.equal(auth.headers["retry-after"], undefined);
  assert.equal(auth.headers["www-authenticate"], "Bearer");
  assert.equal(auth.headers["content-type"], "application/json; charset=utf-8");
});

it("sendError writes the answer on a node:http response, once", async () => {
  const server = createServer((_req, res) => {
    sendError(
      res,
      proxyRefusal({ sandboxId: "abc", message: "The sandbox was not found", code: 502 }),
    );
  });
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  try {
    const { port } = server.address() as AddressInfo;
    const res = await fetch(`http://127.0.0.1:${port}/`);
    assert.equal(res.status, 502);
    assert.equal(res.headers.get("content-type"), "application/json");
    assert.equal(res.headers.get("access-control-allow-origin"), "*");
    assert.deepEqual(await res.json(), {
      sandboxId: "abc",
      message: "The sandbox was not found",
      code: 502,
    });
  } finally {
    server.closeAllConnections();
    await new Promise((resolve) => server.close(resolve));
  }
});

it("writeSocketError writes a whole HTTP/1.1 response, then closes", async () => {
  const socket = new PassThrough();
  let written = "";
  socket.on("data", (chunk) => {
    written += chunk;
  });
  writeSocketError(socket, apiError(new WarrenError("node_unreachable", "node n1 is down")));
  await once(socket, "close");
  const [head = "", body = ""] = written.split("\r\n\r\n");
  assert.match(head, /^HTTP\/1\.1 503 Service Unavailable\r\n/);
  assert.match(head, /\r\nretry-after: 5\r\n/);
  assert.match(head, new RegExp(`\\r\\ncontent-length: ${Buffer.byteLength(body)}\\r\\n`));
  assert.match(head, /\r\nconnection: close$/);
  assert.equal(JSON.parse(body).reason, "node_unreachable");
  // A socket already gone is only destroyed.
  const gone = connect(1, "127.0.0.1");
  gone.on("error", () => {});
  gone.destroy();
  writeSocketError(gone, apiError(new Error("x")));
  assert.equal(gone.destroyed, true);
});
