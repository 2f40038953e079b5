import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { ENVD_PORT } from "../../../src/protocol/index.js";
import { fileSignature } from "../../../src/shared/index.js";
import { closeAll, frontServer, send, upstream } from "./harness.js";

// Signed file URLs in plain mode: the SDK builds them on E2B_SANDBOX_URL with nothing that
// names the sandbox, so the proxy finds the sandbox whose envd token made the signature.
// Upstreams stand in for each sandbox's envd and say who they are.

let proxyPort: number;

before(async () => {
  const front = await frontServer();
  proxyPort = front.port;
  for (const id of ["alpha", "beta"]) {
    const envd = await upstream((req, res) => res.end(`${id} ${req.method} ${req.url}`));
    front.router.add(id, { ports: { [ENVD_PORT]: envd.port }, envdAccessToken: `token-${id}` });
  }
  front.router.add("open", { ports: {} });
});
after(closeAll);

const query = (signature: string, extra = "") =>
  `/files?path=%2Fhome%2Fuser%2Fa.txt${extra}&signature=${encodeURIComponent(signature)}`;

test("a signed download or upload goes to the sandbox whose token signed it", async () => {
  const read = fileSignature("/home/user/a.txt", "read", "", "token-beta");
  const got = await send(proxyPort, { path: query(read), headers: { host: "127.0.0.1:3000" } });
  assert.equal(got.status, 200);
  assert.match(got.body, /^beta GET \/files\?path=/);
  // A guest's file opened from a link must not run as the node's (the dashboard's) page.
  assert.equal(got.headers["content-security-policy"], "sandbox");

  const write = fileSignature("/home/user/a.txt", "write", "root", "token-alpha", 1_900_000_000);
  const put = await send(proxyPort, {
    method: "POST",
    path: query(write, "&username=root&signature_expiration=1900000000"),
    headers: { host: "warren.lan:3000", "content-type": "application/octet-stream" },
    body: "bytes",
  });
  assert.equal(put.status, 200);
  assert.match(put.body, /^alpha POST /, "username and expiration are part of what was signed");
});

test("a signature no sandbox's token made is 401, as envd answers a wrong one", async () => {
  const forged = fileSignature("/home/user/a.txt", "read", "", "guessed");
  const got = await send(proxyPort, { path: query(forged), headers: { host: "127.0.0.1" } });
  assert.equal(got.status, 401);
  assert.deepEqual(JSON.parse(got.body), { message: "invalid signature", code: 401 });
  assert.equal(got.headers["access-control-allow-origin"], "*", "a page can read the refusal");
  // A read signature does not open a write.
  const read = fileSignature("/home/user/a.txt", "read", "", "token-beta");
  const wrongOp = await send(proxyPort, {
    method: "POST",
    path: query(read),
    headers: { host: "127.0.0.1" },
  });
  assert.equal(wrongOp.status, 401);
});

test("a request with no signature and no routing is still not the proxy's", async () => {
  const got = await send(proxyPort, {
    path: "/files?path=/etc/passwd",
    headers: { host: "127.0.0.1" },
  });
  assert.equal(got.body, "api");
});
