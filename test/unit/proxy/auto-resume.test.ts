import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { after, before, describe, it } from "node:test";
import { ENVD_PORT } from "../../../src/protocol/index.js";
import { SandboxProxy } from "../../../src/proxy/index.js";
import { fileSignature } from "../../../src/shared/index.js";
import { createInput } from "../../contracts/sandbox-service.contract.js";
import { FakeNode } from "../../fakes/fake-node.js";
import { send } from "./harness.js";

// The real proxy in front of the real orchestrator (on fakes: no VMs): traffic to a paused
// autoResume sandbox wakes it only when it carries what the sandbox asks of it, checked
// before the resume, as E2B's auto-resume does. A stranger with the URL wakes nothing.

describe("auto-resume through the proxy", () => {
  let node: FakeNode;
  let proxy: SandboxProxy;
  let port: number;
  const server = createServer((req, res) => proxy.handleRequest(req, res));

  before(async () => {
    node = await FakeNode.start();
    // The fake slots' addresses lead nowhere: an exchange that gets through idles out fast.
    proxy = new SandboxProxy({ router: () => node.orchestrator, idleTimeoutMs: 300 });
    node.orchestrator.onSandboxStopped((id) => proxy.sandboxStopped(id));
    server.listen(0, "127.0.0.1");
    await once(server, "listening");
    port = (server.address() as AddressInfo).port;
  });

  after(async () => {
    server.closeAllConnections();
    server.close();
    proxy.close();
    await node.close();
  });

  const state = (id: string) => node.orchestrator.get(id).state;
  const pausedSandbox = async (network: { allowPublicTraffic: boolean }, secure: boolean) => {
    const info = await node.orchestrator.create(
      createInput("base", {
        secure,
        lifecycle: { onTimeout: "pause", autoResume: true },
        network: { allowOut: [], denyOut: [], ...network },
      }),
    );
    await node.orchestrator.pause(info.sandboxId);
    return info;
  };

  it("a private sandbox: no traffic token, or a wrong one, is refused and it stays paused", async () => {
    const info = await pausedSandbox({ allowPublicTraffic: false }, false);
    const host = `3000-${info.sandboxId}.example.test`;
    const asked: Record<string, string>[] = [{ host }, { host, "e2b-traffic-access-token": "x" }];
    for (const headers of asked) {
      const res = await send(port, { headers });
      assert.equal(state(info.sandboxId), "paused", `woken by ${JSON.stringify(headers)}`);
      assert.deepEqual(JSON.parse(res.body), {
        sandboxId: info.sandboxId,
        message:
          "This sandbox can't be resumed with the credentials provided. Check your access token and try again.",
        code: 403,
      });
    }
    const token = info.trafficAccessToken as string;
    const res = await send(port, { headers: { host, "e2b-traffic-access-token": token } });
    assert.notEqual(res.status, 403);
    assert.equal(state(info.sandboxId), "running", "the token wakes it");
  });

  it("a secure sandbox's envd port: without envd's access token it stays paused", async () => {
    const info = await pausedSandbox({ allowPublicTraffic: true }, true);
    const host = `${ENVD_PORT}-${info.sandboxId}.example.test`;
    const asked: Record<string, string>[] = [{ host }, { host, "x-access-token": "guessed" }];
    for (const headers of asked) {
      const res = await send(port, { path: "/files?path=/etc/hostname", headers });
      assert.equal(state(info.sandboxId), "paused", `woken by ${JSON.stringify(headers)}`);
      assert.equal(res.status, 403);
    }
    const token = info.envdAccessToken as string;
    await send(port, { path: "/health", headers: { host, "x-access-token": token } });
    assert.equal(state(info.sandboxId), "running", "envd's token wakes it");
  });

  it("a secure sandbox's envd port: a signed file URL envd would accept wakes it, an expired one not", async () => {
    const info = await pausedSandbox({ allowPublicTraffic: true }, true);
    const token = info.envdAccessToken as string;
    const host = `${ENVD_PORT}-${info.sandboxId}.example.test`;
    const url = (expiration: number) => {
      const signature = fileSignature("/etc/hostname", "read", "user", token, expiration);
      return `/files?path=%2Fetc%2Fhostname&username=user&signature=${encodeURIComponent(signature)}&signature_expiration=${expiration}`;
    };
    const now = Math.floor(Date.now() / 1000);
    await send(port, { path: url(now - 10), headers: { host } });
    assert.equal(state(info.sandboxId), "paused", "an expired signature wakes nothing");
    await send(port, { path: url(now + 60), headers: { host } });
    assert.equal(state(info.sandboxId), "running");
  });

  it("a public sandbox's app port still wakes on any request", async () => {
    const info = await pausedSandbox({ allowPublicTraffic: true }, true);
    await send(port, { headers: { host: `3000-${info.sandboxId}.example.test` } });
    assert.equal(state(info.sandboxId), "running");
  });
});
