// The acceptance test of the E2B API: the official e2b SDK, pointed at a real Warren server
// through E2B_API_URL / E2B_SANDBOX_URL, runs its usual calls against real microVMs.
import assert from "node:assert/strict";
import { request } from "node:http";
import { after, before, describe, it } from "node:test";
import { Sandbox, SandboxNotFoundError } from "e2b";
import { useServer } from "../helpers/server.js";

const server = useServer();

describe("a sandbox created through the SDK", () => {
  let sandbox: Sandbox;

  before(async () => {
    sandbox = await Sandbox.create({ metadata: { suite: "sandbox" }, envs: { GREETING: "hello" } });
  });
  after(async () => {
    await sandbox?.kill();
  });

  it("answers with an id, a semver envd version and an access token", () => {
    assert.match(sandbox.sandboxId, /^[a-z0-9]+$/);
    assert.ok(sandbox.sandboxId.length >= 16);
  });

  it("runs commands as user in /home/user with the create's env vars", async () => {
    const result = await sandbox.commands.run('echo "$GREETING $(whoami) $(pwd)"');
    assert.equal(result.exitCode, 0);
    assert.equal(result.stdout.trim(), "hello user /home/user");
    const failing = await sandbox.commands.run("exit 3").catch((err: { exitCode?: number }) => err);
    assert.equal((failing as { exitCode?: number }).exitCode, 3);
  });

  it("streams output of a background command", async () => {
    const chunks: string[] = [];
    const handle = await sandbox.commands.run("for i in 1 2 3; do echo line$i; sleep 0.1; done", {
      background: true,
      onStdout: (data) => {
        chunks.push(data);
      },
    });
    const result = await handle.wait();
    assert.equal(result.exitCode, 0);
    assert.equal(chunks.join(""), "line1\nline2\nline3\n");
  });

  it("writes, reads, lists and removes files", async () => {
    await sandbox.files.write("/home/user/notes/a.txt", "first");
    assert.equal(await sandbox.files.read("/home/user/notes/a.txt"), "first");
    const entries = await sandbox.files.list("/home/user/notes");
    assert.deepEqual(
      entries.map((e) => e.name),
      ["a.txt"],
    );
    await sandbox.files.remove("/home/user/notes/a.txt");
    assert.equal(await sandbox.files.exists("/home/user/notes/a.txt"), false);
    const big = Buffer.alloc(3 * 1024 * 1024, 7);
    await sandbox.files.write("/tmp/big.bin", new Blob([big]));
    const back = await sandbox.files.read("/tmp/big.bin", { format: "bytes" });
    assert.equal(Buffer.compare(Buffer.from(back), big), 0);
  });

  it("runs a pty", async () => {
    let output = "";
    const pty = await sandbox.pty.create({
      cols: 80,
      rows: 24,
      onData: (data) => {
        output += Buffer.from(data).toString();
      },
    });
    await sandbox.pty.sendInput(pty.pid, new TextEncoder().encode("tput cols; exit\n"));
    await pty.wait().catch(() => {});
    assert.match(output, /\b80\b/);
  });

  it("reports its info", async () => {
    const info = await sandbox.getInfo();
    assert.equal(info.sandboxId, sandbox.sandboxId);
    assert.equal(info.state, "running");
    assert.deepEqual(info.metadata, { suite: "sandbox" });
    assert.ok(info.cpuCount >= 1);
    assert.ok(info.memoryMB >= 128);
    assert.ok(info.endAt.getTime() > info.startedAt.getTime());
    assert.equal(await sandbox.isRunning(), true);
  });

  it("reports metrics, and none for a window before it existed", async () => {
    const metrics = await sandbox.getMetrics();
    assert.ok(metrics.length >= 1);
    const last = metrics.at(-1);
    assert.ok(last && last.memTotal > 0 && last.diskTotal > 0 && last.cpuCount >= 1);
    const before = await sandbox.getMetrics({
      start: new Date(Date.now() - 3_600_000),
      end: new Date(Date.now() - 3_000_000),
    });
    assert.deepEqual(before, []);
  });

  it("updates its network policy while running", async () => {
    await sandbox.updateNetwork({ denyOut: ["8.8.8.8/32"], allowOut: ["1.1.1.1"] });
    const info = await sandbox.getInfo();
    assert.deepEqual(info.network?.denyOut, ["8.8.8.8/32"]);
    assert.deepEqual(info.network?.allowOut, ["1.1.1.1"]);
  });
});

describe("kill", () => {
  it("returns true once, then false; the sandbox is gone", async () => {
    const sandbox = await Sandbox.create();
    const id = sandbox.sandboxId;
    assert.equal(await Sandbox.kill(id), true);
    assert.equal(await Sandbox.kill(id), false);
    await assert.rejects(Sandbox.getInfo(id), SandboxNotFoundError);
    assert.equal(await sandbox.isRunning(), false);
  });
});

describe("the server", () => {
  it("reports readiness and the accelerator it chose on GET /health", async () => {
    const open = await fetch(`${server.url}/health`);
    assert.deepEqual(await open.json(), { status: "ready" }, "without a key: the status alone");
    const res = await fetch(`${server.url}/health`, {
      headers: { "x-admin-token": server.adminToken },
    });
    assert.equal(res.status, 200);
    const body = (await res.json()) as { status: string; accelerator: string };
    assert.equal(body.status, "ready");
    assert.ok(["kvm", "tcg"].includes(body.accelerator), body.accelerator);
    const logged = server.logs.find((l) => l.msg === "server.accelerator");
    assert.equal(logged?.accelerator, body.accelerator);
  });
});

describe("the proxy", () => {
  it("cuts a command's stream when its sandbox is killed", async () => {
    const sandbox = await Sandbox.create();
    const handle = await sandbox.commands.run("sleep 600", { background: true });
    const started = Date.now();
    const outcome = handle.wait().then(
      () => "exited",
      () => "cut",
    );
    assert.equal(await Sandbox.kill(sandbox.sandboxId), true);
    assert.equal(await outcome, "cut");
    assert.ok(Date.now() - started < 10_000, "cut at once, not at a timeout");
  });

  it("speaks TLS to a guest port listed in httpsPorts (self-signed certificate)", async () => {
    const sandbox = await Sandbox.create({ network: { httpsPorts: [8443] } });
    try {
      assert.deepEqual((await sandbox.getInfo()).network?.httpsPorts, [8443]);
      await sandbox.commands.run(
        "cd /tmp && openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj /CN=guest -days 1 -keyout k.pem -out c.pem 2>/dev/null",
      );
      const serve = `python3 -c '
import http.server, ssl
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers(); self.wfile.write(b"over tls " + self.path.encode())
    def log_message(self, *a): pass
s = http.server.HTTPServer(("0.0.0.0", 8443), H)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); c.load_cert_chain("/tmp/c.pem", "/tmp/k.pem")
s.socket = c.wrap_socket(s.socket, server_side=True)
s.serve_forever()'`;
      await sandbox.commands.run(serve, { background: true, timeoutMs: 0 });
      let body = "";
      for (let i = 0; i < 50 && !body.startsWith("over tls"); i++) {
        await new Promise((resolve) => setTimeout(resolve, 200));
        const res = await fetch(`${server.url}/hello`, {
          headers: { "e2b-sandbox-id": sandbox.sandboxId, "e2b-sandbox-port": "8443" },
        });
        body = await res.text();
      }
      assert.equal(body, "over tls /hello");
    } finally {
      await sandbox.kill();
    }
  });

  it("answers 502 with E2B's body for an unknown sandbox", async () => {
    const res = await fetch(`${server.url}/health`, {
      headers: { "e2b-sandbox-id": "doesnotexist", "e2b-sandbox-port": "49983" },
    });
    assert.equal(res.status, 502);
    assert.deepEqual(await res.json(), {
      sandboxId: "doesnotexist",
      message: "The sandbox was not found",
      code: 502,
    });
  });

  it("refuses envd's internal paths from outside", async () => {
    const sandbox = await Sandbox.create();
    try {
      const res = await fetch(`${server.url}/init`, {
        method: "POST",
        headers: { "e2b-sandbox-id": sandbox.sandboxId, "content-type": "application/json" },
        body: "{}",
      });
      assert.equal(res.status, 404);
    } finally {
      await sandbox.kill();
    }
  });

  it("serves an app port by Host name and requires the traffic token when public traffic is off", async () => {
    const sandbox = await Sandbox.create({ network: { allowPublicTraffic: false } });
    try {
      assert.ok(sandbox.trafficAccessToken);
      await sandbox.commands.run("python3 -m http.server 8000 --bind 0.0.0.0", {
        background: true,
        cwd: "/etc",
      });
      const host = `8000-${sandbox.sandboxId}.warren.test`;
      const get = (headers: Record<string, string>) =>
        httpGet(`${server.url}/hostname`, { host, ...headers });
      let res = await get({});
      assert.equal(res.status, 403);
      for (let i = 0; i < 100; i++) {
        res = await get({ "e2b-traffic-access-token": sandbox.trafficAccessToken ?? "" });
        if (res.status === 200) break;
        await new Promise((resolve) => setTimeout(resolve, 100));
      }
      assert.equal(res.status, 200);
      assert.ok(res.body.length > 0);
    } finally {
      await sandbox.kill();
    }
  });
});

/** GET with any Host header (fetch does not let a caller choose it). */
function httpGet(
  url: string,
  headers: Record<string, string>,
): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { headers, agent: false }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (chunk: string) => {
        body += chunk;
      });
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}
