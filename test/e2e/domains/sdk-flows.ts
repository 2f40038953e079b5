/**
 * What a team does with Warren from the e2b SDK, run by domains.test.ts in a process of its
 * own (its environment is the SDK's whole configuration): in domain mode only E2B_DOMAIN and
 * E2B_API_KEY, trusting Warren's CA through NODE_EXTRA_CA_CERTS, names under the domain
 * resolved to the server by test/helpers/resolve-domain.mjs; in plain mode E2B_API_URL and
 * E2B_SANDBOX_URL on plain HTTP. WARREN_FLOWS_MODE says which. Not a *.test.ts file: it
 * runs only under domains.test.ts, which reads its TAP output.
 */
import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { Sandbox, type SandboxOpts, TimeoutError } from "e2b";
import WebSocket from "ws";

const MODE = process.env.WARREN_FLOWS_MODE === "plain" ? "plain" : "domain";
const DOMAIN = process.env.WARREN_FLOWS_DOMAIN as string;
const SANDBOX_URL = process.env.E2B_SANDBOX_URL;

const created: Sandbox[] = [];
after(async () => {
  await Promise.allSettled(created.map((s) => s.kill()));
});

async function create(opts?: SandboxOpts): Promise<Sandbox> {
  const sandbox = await Sandbox.create(opts);
  created.push(sandbox);
  return sandbox;
}

/**
 * A request to a sandbox's port as a client of that mode makes it: in domain mode the
 * `https://<getHost(port)>` URL; in plain mode the sandbox URL with E2B's routing headers.
 */
function portRequest(
  sandbox: Sandbox,
  port: number,
  path = "/",
  headers: Record<string, string> = {},
) {
  if (MODE === "domain") return { url: `https://${sandbox.getHost(port)}${path}`, headers };
  return {
    url: `${SANDBOX_URL}${path}`,
    headers: { ...headers, "e2b-sandbox-id": sandbox.sandboxId, "e2b-sandbox-port": String(port) },
  };
}

async function fetchPort(
  sandbox: Sandbox,
  port: number,
  init: { path?: string; headers?: Record<string, string> } = {},
): Promise<Response> {
  const { url, headers } = portRequest(sandbox, port, init.path, init.headers);
  return fetch(url, { headers, signal: AbortSignal.timeout(30_000) });
}

/** Polls a port until its server answers (a background server takes a moment to listen). */
async function untilServing(sandbox: Sandbox, port: number, headers?: Record<string, string>) {
  const deadline = Date.now() + 30_000;
  for (;;) {
    const res = await fetchPort(sandbox, port, { headers });
    if (res.status !== 502 || Date.now() > deadline) return res;
    await res.body?.cancel();
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
}

describe(`the e2b SDK in ${MODE} mode`, () => {
  it("creates a sandbox and runs a command, which sees E2B's variables; answers carry Warren's domain", async () => {
    const sandbox = await create();
    assert.equal((await sandbox.commands.run("echo hello")).stdout, "hello\n");
    const seen = await sandbox.commands.run('echo "$E2B_SANDBOX $E2B_SANDBOX_ID $E2B_TEMPLATE_ID"');
    const { templateId } = await sandbox.getInfo();
    assert.equal(seen.stdout, `true ${sandbox.sandboxId} ${templateId}\n`);
    // The sandbox's logs (the API the CLI reads) carry envd's own lines.
    const api = MODE === "domain" ? `https://api.${DOMAIN}` : (process.env.E2B_API_URL as string);
    const logs = (await (
      await fetch(`${api}/sandboxes/${sandbox.sandboxId}/logs`, {
        headers: { "x-api-key": process.env.E2B_API_KEY as string },
      })
    ).json()) as { logEntries: { message: string; fields: { source: string } }[] };
    assert.ok(
      logs.logEntries.some((e) => e.fields.source === "envd" && e.message.includes("echo hello")),
      JSON.stringify(logs.logEntries.slice(-5)),
    );
    assert.equal(sandbox.sandboxDomain, DOMAIN);
    if (MODE === "domain")
      assert.equal(sandbox.getHost(8000), `8000-${sandbox.sandboxId}.${DOMAIN}`);
  });

  it("reaches servers in the guest on 0.0.0.0 and on 127.0.0.1 through getHost", async () => {
    const sandbox = await create();
    await sandbox.commands.run(
      "mkdir -p /tmp/a /tmp/b && echo public > /tmp/a/who && echo loopback > /tmp/b/who",
    );
    await sandbox.commands.run("cd /tmp/a && python3 -m http.server 8000 --bind 0.0.0.0", {
      background: true,
      timeoutMs: 0,
    });
    await sandbox.commands.run("cd /tmp/b && python3 -m http.server 8001 --bind 127.0.0.1", {
      background: true,
      timeoutMs: 0,
    });
    const open = await untilServing(sandbox, 8000);
    assert.equal(open.status, 200);
    assert.equal(await (await fetchPort(sandbox, 8000, { path: "/who" })).text(), "public\n");
    const loopback = await untilServing(sandbox, 8001);
    assert.equal(loopback.status, 200, await loopback.clone().text());
    assert.equal(await (await fetchPort(sandbox, 8001, { path: "/who" })).text(), "loopback\n");
  });

  it("answers E2B's 'port not open' for a port nothing listens on, at once", async () => {
    const sandbox = await create();
    const started = Date.now();
    const res = await fetchPort(sandbox, 8009);
    assert.equal(res.status, 502);
    const body = (await res.json()) as { message: string; code: number; sandboxId: string };
    assert.equal(body.code, 502);
    assert.equal(body.sandboxId, sandbox.sandboxId);
    assert.match(body.message, /port 8009 is not open/);
    assert.ok(Date.now() - started < 10_000, "not a hang");
  });

  it("carries a WebSocket through the proxy", async () => {
    const sandbox = await create();
    await sandbox.files.write("/tmp/ws-echo.js", WS_ECHO_SERVER);
    await sandbox.commands.run("node /tmp/ws-echo.js 8080", { background: true, timeoutMs: 0 });
    await untilServing(sandbox, 8080);
    const { url, headers } = portRequest(sandbox, 8080, "/echo");
    const socket = new WebSocket(url.replace(/^http/, "ws"), { headers });
    const echoed = await new Promise<string>((resolve, reject) => {
      socket.once("open", () => socket.send("through the proxy"));
      socket.once("message", (data) => resolve(String(data)));
      socket.once("error", reject);
    });
    socket.close();
    assert.equal(echoed, "echo: through the proxy");
  });

  it("signed upload and download URLs work from a plain fetch; expired or wrong ones are 401", async () => {
    const sandbox = await create();
    const uploadUrl = await sandbox.uploadUrl("/home/user/signed.txt");
    const form = new FormData();
    form.append("file", new Blob(["signed bytes"]), "signed.txt");
    const up = await fetch(uploadUrl, { method: "POST", body: form });
    assert.equal(up.status, 200, await up.clone().text());
    const downloadUrl = await sandbox.downloadUrl("/home/user/signed.txt");
    const down = await fetch(downloadUrl);
    assert.equal(down.status, 200);
    assert.equal(await down.text(), "signed bytes");

    const wrong = new URL(downloadUrl);
    wrong.searchParams.set("signature", "v1_notTheSignature");
    const refused = await fetch(wrong);
    assert.equal(refused.status, 401);
    const expiring = await sandbox.downloadUrl("/home/user/signed.txt", {
      useSignatureExpiration: 1,
    });
    await new Promise((resolve) => setTimeout(resolve, 2_100));
    const expired = await fetch(expiring);
    assert.equal(expired.status, 401);
    assert.deepEqual(await expired.json(), { code: 401, message: "signature is already expired" });
  });

  it("allowPublicTraffic: false refuses a request without the traffic token, serves one with it", async () => {
    const sandbox = await create({ network: { allowPublicTraffic: false } });
    assert.ok(sandbox.trafficAccessToken, "the create answered a traffic token");
    await sandbox.commands.run("cd /tmp && python3 -m http.server 8000", {
      background: true,
      timeoutMs: 0,
    });
    const token = { "e2b-traffic-access-token": sandbox.trafficAccessToken as string };
    assert.equal((await untilServing(sandbox, 8000, token)).status, 200);
    assert.equal((await fetchPort(sandbox, 8000)).status, 403);
    const wrong = await fetchPort(sandbox, 8000, {
      headers: { "e2b-traffic-access-token": "nope" },
    });
    assert.equal(wrong.status, 403);
  });

  it("a command whose sandbox is killed mid-stream ends with the SDK's TimeoutError", async () => {
    const sandbox = await create();
    // Its outcome taken at once: it settles while the kill is still being answered.
    const outcome = sandbox.commands.run("echo started; sleep 120", { timeoutMs: 0 }).then(
      () => undefined,
      (e: unknown) => e,
    );
    await new Promise((resolve) => setTimeout(resolve, 1_500));
    await Sandbox.kill(sandbox.sandboxId);
    const err = await outcome;
    assert.ok(err instanceof TimeoutError, `${(err as Error)?.constructor?.name}: ${String(err)}`);
    assert.match(String(err), /killed|not found|timeout/i);
  });

  it("a filesystem-only pause keeps the disk and drops the processes; resume reboots", async () => {
    const sandbox = await create();
    const sleeping = async () =>
      (
        await sandbox.commands.run("pgrep -x sleep >/dev/null && echo yes || echo no")
      ).stdout.trim();
    await sandbox.files.write("/home/user/kept.txt", "on disk");
    await sandbox.commands.run("sleep 3600", { background: true, timeoutMs: 0 });
    await sandbox.pause({ keepMemory: false });
    assert.equal((await Sandbox.getInfo(sandbox.sandboxId)).state, "paused");
    await sandbox.connect();
    assert.equal(await sandbox.files.read("/home/user/kept.txt"), "on disk");
    assert.equal(await sleeping(), "no", "its processes did not survive");
    // A pause with memory, resumed with onResume: 'reboot', boots afresh too.
    await sandbox.commands.run("sleep 3600", { background: true, timeoutMs: 0 });
    await sandbox.files.write("/home/user/second.txt", "also on disk");
    await sandbox.pause();
    const rebooted = await Sandbox.connect(sandbox.sandboxId, { onResume: "reboot" });
    assert.equal(await rebooted.files.read("/home/user/second.txt"), "also on disk");
    assert.equal(await sleeping(), "no");
    assert.equal(
      (await rebooted.commands.run("echo $E2B_SANDBOX_ID")).stdout.trim(),
      sandbox.sandboxId,
    );
  });

  it("getMetrics over a past window has the samples taken in the background", async () => {
    const created = new Date();
    const sandbox = await create();
    await new Promise((resolve) => setTimeout(resolve, 4_000));
    const end = new Date(Date.now() - 1_500);
    const past = await sandbox.getMetrics({ start: new Date(created.getTime() - 1_000), end });
    assert.ok(past.length >= 1, `samples in the past window: ${past.length}`);
    assert.ok(past.every((m) => m.timestamp.getTime() <= end.getTime() + 1_000));
    assert.ok((past[0]?.memTotal ?? 0) > 0);
    const before = await sandbox.getMetrics({
      start: new Date(created.getTime() - 120_000),
      end: new Date(created.getTime() - 60_000),
    });
    assert.deepEqual(before, [], "nothing before the sandbox existed");
  });

  it("an HTTP request resumes a paused sandbox with autoResume", async () => {
    const sandbox = await create({ lifecycle: { onTimeout: "pause", autoResume: true } });
    await sandbox.commands.run("cd /tmp && echo awake > awake && python3 -m http.server 8000", {
      background: true,
      timeoutMs: 0,
    });
    assert.equal((await untilServing(sandbox, 8000)).status, 200);
    await sandbox.pause();
    // Asked of the API: any request to the sandbox itself (isRunning's /health too) wakes it.
    const state = async () => (await Sandbox.getInfo(sandbox.sandboxId)).state;
    assert.equal(await state(), "paused");
    const res = await fetchPort(sandbox, 8000, { path: "/awake" });
    assert.equal(res.status, 200);
    assert.equal(await res.text(), "awake\n");
    assert.equal(await state(), "running");
  });
});

/** A WebSocket echo server of Node's built-ins alone (the guest has Node, not `ws`). */
const WS_ECHO_SERVER = `
const http = require("http");
const { createHash } = require("crypto");
const server = http.createServer((req, res) => res.end("upgrade me"));
server.on("upgrade", (req, socket) => {
  const accept = createHash("sha1")
    .update(req.headers["sec-websocket-key"] + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11")
    .digest("base64");
  socket.write("HTTP/1.1 101 Switching Protocols\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\nSec-WebSocket-Accept: " + accept + "\\r\\n\\r\\n");
  socket.on("data", (frame) => {
    const length = frame[1] & 0x7f; // short text frames only
    const mask = frame.subarray(2, 6);
    const text = Buffer.from(frame.subarray(6, 6 + length).map((b, i) => b ^ mask[i % 4])).toString();
    if ((frame[0] & 0x0f) !== 1) return socket.end();
    const reply = Buffer.from("echo: " + text);
    socket.write(Buffer.concat([Buffer.from([0x81, reply.length]), reply]));
  });
});
server.listen(Number(process.argv[2]), "0.0.0.0");
`;
